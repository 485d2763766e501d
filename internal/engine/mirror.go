package engine

import (
	"fmt"
	"maps"

	"github.com/flotilla/flotilla/internal/scheduler"
	"github.com/flotilla/flotilla/internal/unit"
)

// mirror is the scheduler's picture of the cluster (term.sched): the
// machines it places on (the reachable ones that do not drain, with what
// it was told of them), those it dropped this term, and the global units
// placed in it. The loop keeps it equal to the committed schedule (see
// place.go); only the loop reads or changes it.
//
// Its invariants (check), between the loop's steps:
//   - a machine is either the scheduler's or dropped, never both, and one
//     that is the scheduler's is a machine of the term and of the
//     scheduler;
//   - a global unit placed in the scheduler is noted as placed (globals),
//     so that it is unplaced once no longer wanted; with no change to
//     global units since syncGlobals ran (globalsDirty clear), each unit
//     noted is a wanted global unit (a new term's are noted only once a
//     machine comes, which dirties them);
//   - in a term that still decides (neither ended nor degraded: a write
//     of unknown outcome leaves the tentative placements of its pass), each
//     unit that is not global is placed in the scheduler where its record
//     says if that is one of the scheduler's machines, and nowhere
//     otherwise; and each of the scheduler's machines holds those units
//     and the global units placed on it, no others.
type mirror struct {
	*scheduler.Cluster
	// machines is what the scheduler was last told of each of its machines.
	machines map[string]schedMachine
	// gone is what the scheduler was last told of the machines it
	// dropped this term (unreachable or draining), until they come back.
	gone    map[string]schedMachine
	globals map[string]bool // global units placed in the scheduler
}

func newMirror() mirror {
	return mirror{Cluster: scheduler.NewCluster(), machines: map[string]schedMachine{},
		gone: map[string]schedMachine{}, globals: map[string]bool{}}
}

// schedMachine is what the scheduler was last told of a machine.
type schedMachine struct {
	metadata map[string]string
	capacity scheduler.Resources
	drivers  unit.DriverSet
}

// same reports whether the scheduler was told the same of both.
func (a schedMachine) same(b schedMachine) bool {
	return maps.Equal(a.metadata, b.metadata) && a.capacity == b.capacity && a.drivers == b.drivers
}

// setMachine tells the scheduler of machine id as sm. For a machine the
// scheduler dropped before, it returns what it was told of it then.
func (s *mirror) setMachine(id string, sm schedMachine) (before schedMachine, wasGone bool) {
	s.SetMachine(scheduler.Machine{ID: id, Metadata: sm.metadata, Capacity: sm.capacity, Drivers: sm.drivers})
	s.machines[id] = sm
	before, wasGone = s.gone[id]
	delete(s.gone, id)
	return before, wasGone
}

// drop removes machine id from the scheduler, keeping what it was told of
// it until it comes back.
func (s *mirror) drop(id string) {
	s.RemoveMachine(id)
	s.gone[id] = s.machines[id]
	delete(s.machines, id)
}

// forget removes every trace of the machines the term no longer knows.
func (s *mirror) forget(known map[string]*machineRec) {
	for id := range s.machines {
		if _, ok := known[id]; !ok {
			s.RemoveMachine(id)
			delete(s.machines, id)
		}
	}
	for id := range s.gone {
		if _, ok := known[id]; !ok {
			delete(s.gone, id) // forgotten: it comes back as new
		}
	}
}

// check returns an error naming the first invariant (see mirror) that t's
// mirror does not keep.
func (s *mirror) check(t *term) error {
	for id := range s.machines {
		if _, ok := s.gone[id]; ok || !s.HasMachine(id) || t.machines[id] == nil {
			return fmt.Errorf("engine: the scheduler's machine %s: dropped too %v, the scheduler's %v, the term's %v", id, ok, s.HasMachine(id), t.machines[id] != nil)
		}
	}
	for name := range t.globals {
		if on := s.GlobalPlacements(name); len(on) > 0 && !s.globals[name] {
			return fmt.Errorf("engine: global unit %s is placed in the scheduler on %v, and not noted", name, on)
		}
	}
	if !t.globalsDirty {
		for name := range s.globals {
			if r := t.units[name]; r == nil || !r.file.Fleet.Global || !r.wanted() {
				return fmt.Errorf("engine: %s is noted as placed in the scheduler as a global unit, and is no wanted global unit", name)
			}
		}
	}
	if t.ctx.Err() != nil || t.deg.since.Load() != 0 {
		return nil
	}
	return s.checkPlaced(t)
}

// checkPlaced is check's part for a term that decides: the scheduler's
// placements are the records'.
func (s *mirror) checkPlaced(t *term) error {
	load := map[string]int{}
	for name, r := range t.units {
		if r.file.Fleet.Global {
			continue
		}
		want := r.machine
		if _, ok := s.machines[want]; !ok {
			want = ""
		}
		if at, _ := s.WhereUnit(r.su); at != want {
			return fmt.Errorf("engine: %s is placed on %q in the scheduler, its record says %q", name, at, r.machine)
		}
		load[want]++
	}
	for name := range s.globals {
		for _, id := range s.GlobalPlacements(name) {
			load[id]++
		}
	}
	for id := range s.machines {
		if s.Load(id) != load[id] {
			return fmt.Errorf("engine: the scheduler places %d units on %s, the records %d", s.Load(id), id, load[id])
		}
	}
	return nil
}
