package engine

import (
	"fmt"
	"unsafe"

	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/flotilla/flotilla/internal/scheduler"
	"github.com/flotilla/flotilla/internal/unit"
)

// TestShrinkUnplaced: the unplaced set is made again, smaller, once it
// holds under a quarter of what it held (a start of a million units left
// it empty but 60 MB large), and keeps every unit it holds.
func TestShrinkUnplaced(t *testing.T) {
	tm := &term{decisionState: &decisionState{unplaced: map[string]struct{}{}}}
	for i := range 10000 {
		tm.unplaced[fmt.Sprint(i)] = struct{}{}
	}
	ptr := func() uintptr { return reflect.ValueOf(tm.unplaced).Pointer() }
	before := ptr()
	tm.shrinkUnplaced()
	for i := range 7600 {
		delete(tm.unplaced, fmt.Sprint(i))
		if i == 7400 {
			tm.shrinkUnplaced() // 2,599 left: over a quarter
			if ptr() != before {
				t.Fatalf("made again holding %d of 10,000", len(tm.unplaced))
			}
		}
	}
	tm.shrinkUnplaced() // 2,400 left
	if ptr() == before {
		t.Fatalf("not made again holding %d of 10,000", len(tm.unplaced))
	}
	if len(tm.unplaced) != 2400 {
		t.Fatalf("holds %d units; want 2,400", len(tm.unplaced))
	}
	for i := 7600; i < 10000; i++ {
		if _, ok := tm.unplaced[fmt.Sprint(i)]; !ok {
			t.Fatalf("lost unit %d", i)
		}
	}
	if tm.unplacedRoom != 2400 {
		t.Fatalf("room %d after the copy; want 2,400", tm.unplacedRoom)
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
