package state

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// next returns a snapshot after prev as the engine builds one: prev's
// units, some changed (a new Shared, sometimes equal in value to the old
// one, as a full rebuild makes), some gone and some new, in name order.
func next(r *rand.Rand, prev *Snapshot, changed, gone, added int) *Snapshot {
	s := &Snapshot{Term: prev.Term, Generation: prev.Generation + 1, Revision: prev.Revision + 1, Leader: prev.Leader, Machines: prev.Machines}
	s.Units = slices.Clone(prev.Units)
	for range changed {
		i := r.IntN(len(s.Units))
		sh := *s.Units[i].Shared
		switch r.IntN(4) {
		case 0: // the same in value, a new pointer
		case 1:
			sh.Status = &Status{Load: "loaded", Active: "active", Sub: "running", Health: "healthy"}
		case 2:
			sh.Status = nil
		case 3:
			sh.Machine, sh.Reason = "", "no machine fits <&>"
		}
		s.Units[i].Shared = &sh
	}
	for range gone {
		i := r.IntN(len(s.Units))
		s.Units = slices.Delete(s.Units, i, i+1)
	}
	for range added {
		u := s.Units[r.IntN(len(s.Units))]
		u.Name = fmt.Sprintf("%s-%d\u2028", strings.TrimSuffix(u.Name, ".service"), r.IntN(1e6))
		i, found := slices.BinarySearchFunc(s.Units, u.Name, func(u Unit, name string) int { return strings.Compare(u.Name, name) })
		if !found {
			s.Units = slices.Insert(s.Units, i, u)
		}
	}
	return s
}

// fresh is what encoding/json writes of the whole of s.
func fresh(t testing.TB, s *Snapshot) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(s.Select(Filter{})); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestFollowEncodesTheSame: a snapshot encoded from the one before it (its
// unchanged units copied from that one's bytes) is byte for byte what
// encoding it afresh gives, whatever changed between the two: units
// changed, gone, added, all of them, none, the first or the last.
func TestFollowEncodesTheSame(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	prev := sample(3000, 10)
	prev.Term = 5
	prev.JSON()
	for round, c := range []struct{ changed, gone, added int }{
		{0, 0, 0}, {1, 0, 0}, {30, 0, 0}, {300, 10, 10}, {0, 100, 0}, {0, 0, 100}, {3000, 0, 0}, {5, 1, 1},
	} {
		s := next(r, prev, c.changed, c.gone, c.added)
		if round == 7 { // the first and the last unit change
			for _, i := range []int{0, len(s.Units) - 1} {
				sh := *s.Units[i].Shared
				sh.Reason = "changed"
				s.Units[i].Shared = &sh
			}
		}
		s.Follow(prev)
		if s.base.Load() != prev {
			t.Fatalf("round %d: an encoded snapshot followed is not kept as the base", round)
		}
		got := s.JSON()
		if want := fresh(t, s); !bytes.Equal(got, want) {
			i := 0
			for i < min(len(got), len(want)) && got[i] == want[i] {
				i++
			}
			t.Fatalf("round %d (%+v): encoded from the last differs from afresh at byte %d:\ngot  %q\nwant %q", round, c,
				i, got[max(0, i-100):min(len(got), i+100)], want[max(0, i-100):min(len(want), i+100)])
		}
		// Each unit's offsets name its bytes, for the next one to copy.
		for i := range s.Units {
			end := int(s.unitAt[i+1])
			if i < len(s.Units)-1 {
				end--
			}
			if u := appendUnit(nil, &s.Units[i]); !bytes.Equal(got[s.unitAt[i]:end], u) {
				t.Fatalf("round %d: unit %d at %d-%d is %q, want %q", round, i, s.unitAt[i], end, got[s.unitAt[i]:end], u)
			}
		}
		if s.base.Load() != nil {
			t.Fatalf("round %d: the base is still held once the snapshot is encoded", round)
		}
		prev = s
	}
}

// TestFollowHoldsNoChain: only an encoded snapshot is kept as a base, and
// only until the one following it is encoded, so that states nobody reads
// whole hold no older ones.
func TestFollowHoldsNoChain(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	a := sample(100, 3)
	b := next(r, a, 3, 0, 0)
	b.Follow(a)
	if b.base.Load() != nil {
		t.Fatal("a snapshot never encoded is kept as a base")
	}
	c := next(r, b, 3, 0, 0)
	b.JSON()
	c.Follow(b)
	d := next(r, c, 3, 0, 0)
	d.Follow(c)
	if c.base.Load() != b || d.base.Load() != nil {
		t.Fatalf("bases %p %p; want c's the encoded b (%p), d's none (c is not encoded)", c.base.Load(), d.base.Load(), b)
	}
	c.JSON()
	if c.base.Load() != nil {
		t.Fatal("c, encoded, still holds its base")
	}
}

// BenchmarkFollow is the encoding of a state of 100,000 units on 1,000
// machines after one already encoded, with 1% of the units changed since,
// against encoding it afresh, and after one of half as many units (as
// during a start, when the units and their states are coming).
func BenchmarkFollow(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	prev := sample(100_000, 1000)
	prev.JSON()
	s := next(r, prev, 1000, 0, 0)
	half := &Snapshot{Generation: prev.Generation, Revision: prev.Revision, Leader: prev.Leader, Machines: prev.Machines, Units: prev.Units[:50_000]}
	half.JSON()
	names := map[*Snapshot]string{prev: "after-encoded", nil: "afresh", half: "after-half"}
	for _, base := range []*Snapshot{prev, nil, half} {
		name := names[base]
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				c := &Snapshot{Generation: s.Generation, Revision: s.Revision, Leader: s.Leader, Machines: s.Machines, Units: s.Units}
				c.Follow(base)
				c.JSON()
				b.SetBytes(int64(len(c.json)))
			}
		})
	}
}

// TestFollowSizesItsBuffer: an encoding that follows another takes about
// the room it needs, whatever the one it follows held: a few units under
// many machines (a start's first state) once gave each later encoding
// thousands of times its size, and a state whose units grew since had its
// buffer doubled and copied over and over.
func TestFollowSizesItsBuffer(t *testing.T) {
	whole := sample(20_000, 1000)
	for _, tc := range []struct {
		name string
		base *Snapshot
	}{
		{"afresh", nil},
		{"after a few units", &Snapshot{Generation: 1, Leader: whole.Leader, Machines: whole.Machines, Units: whole.Units[:5]}},
		{"after half", &Snapshot{Generation: 1, Leader: whole.Leader, Machines: whole.Machines, Units: whole.Units[:10_000]}},
		{"after all", &Snapshot{Generation: 1, Leader: whole.Leader, Machines: whole.Machines, Units: whole.Units}},
	} {
		if tc.base != nil {
			tc.base.JSON()
		}
		s := &Snapshot{Generation: 2, Leader: whole.Leader, Machines: whole.Machines, Units: whole.Units}
		s.Follow(tc.base)
		b := s.JSON()
		if c := cap(b); c > len(b)+len(b)/4 {
			t.Errorf("%s: %d bytes encoded in a buffer of %d", tc.name, len(b), c)
		}
	}
}
