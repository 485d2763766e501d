package engine

import (
	"errors"
	"fmt"
	"time"
)

// moves is the term's record of units on their way off a machine and of
// the machines flotilla drain empties (plan.go says how a pass decides
// them). The loop's alone, as the rest of the decision state; changed
// through its methods, read directly.
//
// Its invariants (check):
//   - every move has a start and every start a move: movedAt and draining
//     have the same units, each with a machine and a time;
//   - a moving unit exists and is unscheduled: it is placed again only
//     once its move ends (a unit destroyed forgets its move);
//   - a handed-over unit exists and names the machine of its old copy;
//   - a held unit exists (a destroyed one is forgotten at once, the rest
//     at the next pass's end);
//   - a draining machine lets at least one instance of a template move at
//     a time.
//
// A unit may be both moving and handed over: a handover's unit given a
// new Singleton= file moves off its new machine (movesFirst) while its old
// copy's handover ends on its own.
type moves struct {
	// draining holds units moving off a machine (unit -> machine), as
	// recorded under moves/ in etcd: they are placed again once that
	// machine's copy is gone (see plan.go).
	draining map[string]string
	// movedAt is when each move of draining began (this term's load, for
	// one loaded from etcd): see planInput.settled.
	movedAt map[string]time.Time
	// handovers holds units of draining machines started elsewhere while
	// their old copy keeps running there until the new one is active
	// (unit -> old machine), recorded under moves/ too (see plan.go).
	handovers map[string]handover
	// held are the units a drain keeps on their machine for now, with
	// their reason: true for those that fit nowhere else, false for
	// instances waiting for their turn.
	held map[string]bool
	// drainMachines are the machines flotilla drain emptied, with how many
	// instances of one template may move off at once: they take no units
	// (stored in their MachineRecord).
	drainMachines map[string]int
}

func newMoves() moves {
	return moves{
		draining:      map[string]string{},
		movedAt:       map[string]time.Time{},
		handovers:     map[string]handover{},
		held:          map[string]bool{},
		drainMachines: map[string]int{},
	}
}

// begin records that unit name moves off machine from, as of at.
func (mv *moves) begin(name, from string, at time.Time) {
	mv.draining[name] = from
	mv.movedAt[name] = at
}

// end forgets unit name's move: its old copy is gone.
func (mv *moves) end(name string) {
	delete(mv.draining, name)
	delete(mv.movedAt, name)
}

// handOver records that unit name was started elsewhere while its copy on
// machine from runs on.
func (mv *moves) handOver(name, from string) {
	mv.handovers[name] = handover{From: from}
}

// stopOld notes that the old copy of unit name's handover, on machine
// from, is told to stop, or forgets the handover if done (that copy is
// gone). It returns the handover as it was.
func (mv *moves) stopOld(name, from string, done bool) handover {
	h := mv.handovers[name]
	if done {
		delete(mv.handovers, name)
	} else {
		mv.handovers[name] = handover{From: from, Stopping: true}
	}
	return h
}

// forget drops all that is kept of unit name, destroyed, and returns its
// handover, if it had one.
func (mv *moves) forget(name string) (handover, bool) {
	mv.end(name)
	delete(mv.held, name)
	h, ok := mv.handovers[name]
	delete(mv.handovers, name)
	return h, ok
}

// recorded reports whether unit name has a move or a handover, recorded
// under moves/.
func (mv *moves) recorded(name string) bool {
	_, handedOver := mv.handovers[name]
	return mv.draining[name] != "" || handedOver
}

// hold makes held the units the drains keep where they are.
func (mv *moves) hold(held map[string]bool) { mv.held = held }

// setDrain makes machine id drain with maxParallel instances of a template
// moving off it at once (0: it does not drain), and reports whether that
// changed anything.
func (mv *moves) setDrain(id string, maxParallel int) bool {
	if mv.drainMachines[id] == maxParallel {
		return false
	}
	if maxParallel > 0 {
		mv.drainMachines[id] = maxParallel
	} else {
		delete(mv.drainMachines, id)
	}
	return true
}

// check returns an error naming the first invariant (see moves) that does
// not hold; units are the term's records.
func (mv *moves) check(units map[string]*unitRec) error {
	if len(mv.movedAt) != len(mv.draining) {
		return fmt.Errorf("engine: %d moves, %d starts of moves", len(mv.draining), len(mv.movedAt))
	}
	for name, from := range mv.draining {
		r := units[name]
		switch at, ok := mv.movedAt[name]; {
		case from == "":
			return fmt.Errorf("engine: %s moves off no machine", name)
		case !ok || at.IsZero():
			return fmt.Errorf("engine: the move of %s off %s has no start", name, from)
		case r == nil:
			return fmt.Errorf("engine: %s moves off %s, and has no record", name, from)
		case r.machine != "":
			return fmt.Errorf("engine: %s moves off %s, and is scheduled to %s", name, from, r.machine)
		}
	}
	for name, h := range mv.handovers {
		if h.From == "" || units[name] == nil {
			return fmt.Errorf("engine: a handover of %s (%+v) without an old machine or a record", name, h)
		}
	}
	for name := range mv.held {
		if units[name] == nil {
			return fmt.Errorf("engine: the drain holds %s, which has no record", name)
		}
	}
	for id, n := range mv.drainMachines {
		if n < 1 {
			return fmt.Errorf("engine: machine %s drains %d instances at a time", id, n)
		}
	}
	return nil
}

// checkInvariants, set by the engine's tests, has the loop check the
// term's invariants (checkTerm) before each of its steps.
var checkInvariants = false

// checkTerm panics unless the term's parts keep their invariants. The
// loop's: it runs there, between steps.
func (t *term) checkTerm() {
	if err := errors.Join(t.moves.check(t.units), t.sched.check(t), t.store.check(t.units, t.versions.logs)); err != nil {
		panic(err)
	}
}

// drained notes a report of a unit that may be moving off machine: once it
// no longer runs there, the next pass places it. It runs on the loop.
func (t *term) drained(machine, name string, running bool) {
	if old, ok := t.moves.draining[name]; ok && old == machine && !running {
		t.placeDirty = true
		t.poke()
	}
	if h, ok := t.moves.handovers[name]; ok && h.From == machine && !running {
		t.poke() // a handover's old copy is gone: it is forgotten
	}
}
