package engine

import (
	"fmt"
	"unsafe"

	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/flotilla/flotilla/internal/scheduler"
	"github.com/flotilla/flotilla/internal/unit"
)

// TestIDSet: a set of unit numbers holds what was added and not removed,
// counts it, and lists it in increasing order.
func TestIDSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var s idSet
	model := map[int32]bool{}
	for range 20000 {
		id := int32(rng.IntN(3000))
		if rng.IntN(3) == 0 {
			s.remove(id)
			delete(model, id)
		} else {
			s.add(id)
			model[id] = true
		}
		if probe := int32(rng.IntN(3100)); s.has(probe) != model[probe] {
			t.Fatalf("has(%d) = %v, want %v", probe, s.has(probe), model[probe])
		}
	}
	var got []int32
	s.each(func(id int32) { got = append(got, id) })
	if want := slices.Sorted(maps.Keys(model)); !slices.Equal(got, want) || s.len() != len(want) {
		t.Fatalf("each lists %d numbers (len %d), want %d", len(got), s.len(), len(want))
	}
}

// TestMergeMoved: a pass's units moved (a map) and placed (a slice in name
// order) come out as one list in name order, each once, with what it was
// given.
func TestMergeMoved(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for n := range 200 {
		moved := map[string]*unitRec{}
		var placed []movedUnit
		var want []string
		for i := range n {
			name := fmt.Sprintf("u%03d", i)
			switch r.IntN(3) {
			case 0:
				moved[name] = newTestRec(name, nil, unit.Inactive, "")
				want = append(want, name+"=moved")
			case 1:
				placed = append(placed, movedUnit{name: name, machine: "m"})
				want = append(want, name+"=m")
			}
		}
		if r.IntN(2) == 0 {
			placed = slices.Clip(placed)
		} else {
			placed = slices.Grow(placed, r.IntN(n+1))
		}
		var got []string
		for _, mu := range mergeMoved(moved, placed) {
			switch {
			case mu.rec != nil && mu.rec == moved[mu.name]:
				got = append(got, mu.name+"=moved")
			case mu.rec == nil:
				got = append(got, mu.name+"="+mu.machine)
			default:
				got = append(got, mu.name+"=?")
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%d units: mergeMoved =\n%s\nwant\n%s", n, strings.Join(got, " "), strings.Join(want, " "))
		}
	}
}

// newTestRec returns a record of unit name, as a test needs one.
func newTestRec(name string, f *unit.File, ds unit.DesiredState, machine string) *unitRec {
	r := &unitRec{file: f, want: wantOf(ds), machine: machine, su: &scheduler.Unit{Name: name}}
	if f != nil {
		r.su = scheduler.NewUnit(f)
		r.su.Name = name
	}
	return r
}

// TestUnitRecSize: the leader holds a record a unit, a million of them at
// the top of Flotilla's range: it is kept in Go's 80-byte size class.
func TestUnitRecSize(t *testing.T) {
	if size := unsafe.Sizeof(unitRec{}); size > 80 {
		t.Errorf("unitRec is %d bytes; want at most 80", size)
	}
	// Each placed unit is in its machine's list too: its scheduler unit
	// (which has its name) and its state there.
	if size := unsafe.Sizeof(machineUnit{}); size > 40 {
		t.Errorf("machineUnit is %d bytes; want at most 40", size)
	}
}

// TestNextChanges: a pass's remaining changes keep their order and
// contents, and once under half the list they were taken from, are a list
// of their own, so that the applied ones can go.
func TestNextChanges(t *testing.T) {
	changes := make([]movedUnit, 10_000)
	for i := range changes {
		changes[i] = movedUnit{name: fmt.Sprint(i)}
	}
	lists := map[*movedUnit]bool{}
	room := len(changes)
	for done := 0; len(changes) > 0; {
		n := min(len(changes), 1500)
		next, r := nextChanges(changes, n, room)
		done += n
		if len(next) != 10_000-done || (len(next) > 0 && next[0].name != fmt.Sprint(done)) {
			t.Fatalf("after %d: %d changes left starting at %v, want %d starting at %d", done, len(next), next[:min(1, len(next))], 10_000-done, done)
		}
		if len(next) > 0 && len(next)+n < room/2 {
			t.Fatalf("after %d: %d changes left (and %d taken) in a list of %d", done, len(next), n, room)
		}
		if len(next) > 0 && r != room {
			lists[&next[0]] = true
		}
		changes, room = next, r
	}
	if len(lists) < 2 {
		t.Errorf("the changes were copied %d times, want at least 2 (10,000 taken 1,500 at a time)", len(lists))
	}
}
