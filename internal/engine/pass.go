package engine

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/scheduler"
)

// pass is one reconcile pass carried out: what planReconcile decided (p),
// turned into new records by allocation (decide), then written and applied
// a slice at a time (write), then finished (finish). Only the loop
// goroutine touches it.
type pass struct {
	t   *term
	now time.Time
	ph  *passPhases
	p   reconcilePlan

	// moved holds the units the pass changed in any way but a plain
	// placement: their new records.
	moved map[string]*unitRec
	// placed holds the units placed that nothing else in the pass changed,
	// in name order: a million at a start, kept in a slice rather than in
	// moved, and those placed on a machine (most) with only the machine,
	// their new records made a slice at a time (at a million, a second copy
	// of every record lived until the last slice was applied, and the
	// decisions with it).
	placed []movedUnit
	// newMoves and newHandovers are moves to record durably: unit -> the
	// machine it leaves.
	newMoves, newHandovers map[string]string
	// stopOld holds the handovers whose old copy stops now, handedOver those
	// forgotten: unit -> the machine of that copy.
	stopOld, handedOver map[string]string
	// held holds the units a drain keeps where they run (true: they fit
	// nowhere else; false: waiting for their turn).
	held map[string]bool
	// done holds the moves that ended; lostFrom the machine a lost unit was
	// lost on.
	done     map[string]bool
	lostFrom map[string]string
	// again asks for another pass at once (a displaced unit, a handover
	// ended).
	again bool

	// The changes left to write (write), the room of the list they are in
	// (nextChanges), the size of a slice, and how many parts were applied.
	changes     []movedUnit
	room, slice int
	applied     int
}

// decide turns the plan into new records: it unschedules what was lost or
// misfits, keeps what a drain holds, places handovers, then allocates the
// units to place. It runs on the loop, which reads its state without the
// lock.
func (ps *pass) decide() {
	t, p := ps.t, &ps.p
	ps.moved = map[string]*unitRec{}
	ps.newMoves = map[string]string{}
	ps.held = map[string]bool{}
	ps.unscheduleLost()
	for _, mf := range p.Misfit {
		t.e.log.Info("unit no longer fits its machine; moving it", "unit", mf.Name, "machine", mf.Machine, "reason", mf.Reason)
		ps.unschedule(mf.Name, "")
		if _, waiting := p.Waiting[mf.Name]; waiting {
			ps.newMoves[mf.Name] = mf.Machine
		}
		t.history(mf.Name, fmt.Sprintf("moving off %s: %s", mf.Machine, mf.Reason))
	}
	for _, name := range slices.Sorted(maps.Keys(p.Waiting)) {
		why := p.Waiting[name]
		rec := ps.current(name)
		if rec.reason != why || rec.machine != "" {
			ps.moved[name] = rec.with(func(r *unitRec) { r.machine, r.reason = "", why })
		}
	}
	// A drain keeps units where they run, saying why: those that fit
	// nowhere else, and instances waiting for their turn.
	for name, why := range p.Stay {
		ps.hold(name, why, true)
	}
	for name, why := range p.Queued {
		ps.hold(name, why, false)
	}
	var pending []*scheduler.Unit
	var recs []*unitRec // pending's records, as found here
	for _, name := range p.Place {
		if rec := ps.current(name); rec != nil && rec.wanted() && !rec.file.Fleet.Global {
			pending, recs = append(pending, rec.su), append(recs, rec)
		}
	}
	p.Place = nil // p lives on through the pass; a million names need not
	ps.placeHandovers()
	// A unit the drain no longer holds (the drain ended, or the unit left)
	// loses the reason it gave.
	for name := range t.moves.held {
		_, keep := ps.held[name]
		if rec := t.units[name]; !keep && ps.moved[name] == nil && rec != nil && rec.machine != "" && rec.reason != "" {
			ps.moved[name] = rec.with(func(r *unitRec) { r.reason = "" })
		}
	}
	ps.stopOld, ps.handedOver = map[string]string{}, map[string]string{}
	for _, name := range p.HandoverStop {
		ps.stopOld[name] = t.moves.handovers[name].From
	}
	for _, name := range p.HandoverDone {
		ps.handedOver[name] = t.moves.handovers[name].From
		ps.again = true // an instance waiting for its turn may move now
	}
	ps.allocate(pending, recs)
}

// current is a unit's record as the pass has it so far.
func (ps *pass) current(name string) *unitRec {
	if rec := ps.moved[name]; rec != nil {
		return rec
	}
	return ps.t.units[name]
}

func (ps *pass) unschedule(name, reason string) {
	cur := ps.t.units[name]
	ps.moved[name] = cur.with(func(r *unitRec) { r.machine, r.reason = "", reason })
	ps.t.sched.UnplaceUnit(cur.su)
}

// unscheduleLost unschedules the units of lost machines. The first units
// lost in a pass are logged one by one, the rest counted by machine: a
// machine of thousands of units lost would otherwise log a line for each
// (each unit's history has it anyway).
func (ps *pass) unscheduleLost() {
	t := ps.t
	logged, unlogged := 0, map[string]int{}
	for _, l := range ps.p.Lost {
		ps.unschedule(l.Name, "")
		if l.Left {
			t.history(l.Name, "stopped on "+l.Machine+", which left the cluster")
		} else {
			t.history(l.Name, fmt.Sprintf("lost on %s (unheard for %s)", l.Machine, l.Unheard.Round(time.Millisecond)))
		}
		if logged == maxLostLogged {
			unlogged[l.Machine]++
			continue
		}
		logged++
		if l.Left {
			t.e.log.Info("machine left the cluster, its units stopped; placing the unit elsewhere", "unit", l.Name, "machine", l.Machine)
		} else {
			t.e.log.Warn("machine unreachable beyond the unit's LostAfter=; placing the unit elsewhere", "unit", l.Name, "machine", l.Machine, "unheard", l.Unheard.Round(time.Millisecond))
		}
	}
	for _, m := range slices.Sorted(maps.Keys(unlogged)) {
		t.e.log.Warn("more units of a lost or departed machine placed elsewhere (not logged one by one)", "machine", m, "units", unlogged[m])
	}
}

// hold keeps a unit where it runs for a drain, saying why.
func (ps *pass) hold(name, why string, nowhere bool) {
	ps.held[name] = nowhere
	if rec := ps.current(name); rec.reason != why {
		ps.moved[name] = rec.with(func(r *unitRec) { r.reason = why })
	}
}

// placedRec is rec placed on machine, or not placed for reason.
func (ps *pass) placedRec(rec *unitRec, machine, reason string) *unitRec {
	return rec.with(func(r *unitRec) {
		r.machine, r.reason = machine, reason
		if machine != "" && r.at != 0 && !r.atPlaced {
			ps.t.e.cfg.Metrics.SchedulingLatency.WithLabelValues("placed").Observe(ps.now.Sub(unixNano(r.at)).Seconds())
			r.at, r.atPlaced = nanos(ps.now), true
		}
	})
}

// displace moves the units a placement displaced (Replaces=), which
// Allocate unplaced: placed again once stopped where they ran.
func (ps *pass) displace(d scheduler.Decision) {
	t := ps.t
	for _, x := range d.Displaced {
		if _, ok := ps.moved[x]; !ok && t.units[x] != nil && t.units[x].machine != "" {
			from := t.units[x].machine
			ps.newMoves[x] = from
			ps.moved[x] = t.units[x].with(func(r *unitRec) { r.machine, r.reason = "", "replaced; stopping on "+from+" before it moves" })
			ps.again = true
		}
	}
}

// placeHandovers places the handovers first, their old copy kept until the
// new one is active; one that finds no room after all stays.
func (ps *pass) placeHandovers() {
	t, hs := ps.t, ps.p.Handover
	ps.newHandovers = map[string]string{}
	if len(hs) == 0 {
		return
	}
	us := make([]*scheduler.Unit, len(hs))
	for i, h := range hs {
		us[i] = t.units[h.Name].su
	}
	for i, d := range t.sched.Allocate(us) {
		h := hs[i]
		if d.Machine == "" {
			ps.hold(h.Name, stayReason(h.Machine, d.Reason), true)
			continue
		}
		ps.moved[h.Name] = ps.placedRec(t.units[h.Name], d.Machine, "")
		ps.newHandovers[h.Name] = h.Machine
		t.e.log.Info("unit of a draining machine handed over: its new copy starts before the old one stops", "unit", h.Name, "machine", h.Machine, "to", d.Machine)
		t.history(h.Name, fmt.Sprintf("starting on %s before it stops on %s: %s", d.Machine, h.Machine, h.Reason))
		ps.displace(d)
	}
}

// allocate places the pending units (in name order), whose records were
// recs when the pass listed them.
func (ps *pass) allocate(pending []*scheduler.Unit, recs []*unitRec) {
	t := ps.t
	ds := t.sched.Allocate(pending)
	// Most are placed: a million at a start, a list grown to that size
	// was twice it allocated.
	ps.placed = slices.Grow(ps.placed, len(pending))
	for i := range ds {
		d, name := &ds[i], pending[i].Name
		rec, inMoved := ps.moved[name] // moved since (displaced), or before
		if !inMoved {
			rec = recs[i]
		}
		switch {
		case inMoved:
			ps.moved[name] = ps.placedRec(rec, d.Machine, d.Reason)
		case d.Machine != "" && d.Reason == "" && d.Machine != rec.machine:
			ps.placed = append(ps.placed, movedUnit{name: name, machine: d.Machine})
		case d.Machine != rec.machine || d.Reason != rec.reason:
			ps.placed = append(ps.placed, movedUnit{name: name, rec: ps.placedRec(rec, d.Machine, d.Reason)})
		}
		ps.displace(*d)
	}
}

// write has the pass's changes committed and applied in slices, so that
// agents start on the first units while the rest are written, and the
// loop answers reads in between (the driver's write), then runs done,
// saying whether every slice was written.
//
// A part is prepared while the one before it is written (the txn's
// meanwhile): at a million units the pass spent a third of its time
// making records and ops and another third waiting for etcd, one after
// the other. Parts hold other units (a unit whose move ended and that is
// placed again is in two, its move's key deleted by each), and a part's
// txn is made only once the one before it is applied, so that its stored
// files are known. A part is half a slice, the agents told once both
// halves are applied: with whole slices, the ops of two (320,000 at a
// million units, about 75 MB) were alive at once.
func (ps *pass) write(done func(ok bool)) {
	t, p := ps.t, &ps.p
	ps.done = map[string]bool{}
	for _, name := range p.MoveDone {
		ps.done[name] = true
	}
	ps.lostFrom = map[string]string{}
	for _, l := range p.Lost {
		ps.lostFrom[l.Name] = l.Machine
	}
	ps.changes = mergeMoved(ps.moved, ps.placed)
	for _, name := range slices.Concat(p.MoveDone, p.HandoverStop, p.HandoverDone) {
		if _, ok := ps.moved[name]; !ok {
			ps.changes = append(ps.changes, movedUnit{name: name}) // a move forgotten without a new placement (the unit is no longer wanted, or a handover ended)
		}
	}
	ps.slice = max(placeSlice, placesPerMachine*len(t.sched.machines))
	ps.room = len(ps.changes) // the list changes is in (nextChanges)
	ps.writePart(ps.nextPart(), done)
}

// passPart is a part of a pass's changes, prepared: the units and the ops
// that write them.
type passPart struct {
	units []movedUnit
	ops   []registry.Op
}

// nextPart prepares the next part of the changes (nil: none is left).
func (ps *pass) nextPart() *passPart {
	if len(ps.changes) == 0 {
		return nil
	}
	units := ps.changes[:min(len(ps.changes), max(ps.slice/2, 1))]
	ps.changes, ps.room = nextChanges(ps.changes, len(units), ps.room)
	ops := ps.prepare(units)
	ps.ph.done("ops")
	return &passPart{units: units, ops: ops}
}

// writePart has part committed, preparing the next meanwhile, and once it
// is durable applies it and goes on with the next; done once none is left
// or a write failed.
func (ps *pass) writePart(part *passPart, done func(ok bool)) {
	if part == nil {
		done(true)
		return
	}
	t := ps.t
	tx, stored := t.recordsTxn(part.ops, func(yield func(*unitRec) bool) {
		for _, mu := range part.units {
			if mu.rec != nil && !yield(mu.rec) {
				return
			}
		}
	})
	var next *passPart
	tx.meanwhile = func() { next = ps.nextPart() }
	tx.then = func(landed int, err error) {
		ps.ph.done("commit")
		if err != nil {
			// commit has ended the term (the next one reloads from etcd),
			// so the tentative placements left in t.sched do not matter.
			t.e.log.Warn("reconcile: could not write schedule", "err", err, "ops", len(part.ops))
			t.store.markStored(stored(landed))
			wakeAll(t.hold.release()) // the agents of a half applied
			done(false)
			return
		}
		ps.applied++
		ps.apply(part.units, stored(landed), ps.applied%2 == 0 || next == nil)
		ps.writePart(next, done)
	}
	t.emit(tx)
}

// prepare makes a slice's records and the ops that write them.
func (ps *pass) prepare(part []movedUnit) []registry.Op {
	t := ps.t
	// One op per key, from the outcome: a unit moved off a machine and
	// placed again in the same pass is one put (etcd refuses a key twice
	// in a transaction).
	ops := make([]registry.Op, 0, len(part)) // about one a unit
	for i := range part {
		mu := &part[i]
		cur := t.units[mu.name]
		if cur == nil {
			continue
		}
		if mu.rec == nil && mu.machine != "" {
			mu.rec = ps.placedRec(cur, mu.machine, "")
		}
		name, nr := mu.name, mu.rec
		if from, ok := ps.newMoves[name]; ok {
			ops = append(ops, registry.PutMove(t.keys, name, from))
		} else if from, ok := ps.newHandovers[name]; ok {
			ops = append(ops, registry.PutHandover(t.keys, name, from))
		} else if ps.done[name] {
			ops = append(ops, registry.DeleteMove(t.keys, name))
		} else if from, ok := ps.stopOld[name]; ok && cur.machine != from {
			ops = append(ops, t.dropAssignment(from, name)...)
		} else if from, ok := ps.handedOver[name]; ok {
			ops = append(ops, registry.DeleteMove(t.keys, name))
			if cur.machine != from {
				ops = append(ops, t.dropAssignment(from, name)...)
			}
		}
		if nr == nil {
			continue
		}
		// The record holds the machine: a unit placed for the first
		// time is written once, its record then (records.go).
		if nr.machine != cur.machine {
			ops = t.putRecord(ops, name, nr)
		}
		if _, handover := ps.newHandovers[name]; cur.machine != "" && nr.machine != cur.machine && !handover {
			ops = append(ops, t.dropAssignment(cur.machine, name)...)
		}
	}
	return ops
}

// apply applies a written part; the agents concerned are told once a whole
// slice is applied (wake).
func (ps *pass) apply(part []movedUnit, stored storedFiles, wake bool) {
	t := ps.t
	t.hold.start()
	t.store.markStored(stored)
	t.applyInputs() // what came during the slice's write
	for _, mu := range part {
		name, cur := mu.name, t.units[mu.name]
		if nr := mu.rec; nr != nil && cur != nil && nr.machine != cur.machine {
			t.store.written(name)
		}
		if from, ok := ps.newMoves[name]; ok {
			t.moves.begin(name, from, ps.now)
		} else if from, ok := ps.newHandovers[name]; ok {
			t.moves.handOver(name, from)
		} else if ps.done[name] {
			t.moves.end(name)
		} else if from, ok := ps.stopOld[name]; ok {
			t.stopOldCopy(name, from, false)
		} else if from, ok := ps.handedOver[name]; ok {
			t.stopOldCopy(name, from, true)
		}
		// cur is still the record: the moves above change none.
		rec := mu.rec
		if rec == nil || cur == nil || cur.desired() != rec.desired() {
			continue
		}
		switch {
		case rec.machine == "" || rec.machine == cur.machine:
		case ps.lostFrom[name] != "":
			t.history(name, "replaced on "+rec.machine+" (its machine "+ps.lostFrom[name]+" was lost)")
		case ps.done[name] || strings.HasPrefix(cur.reason, "stopping on "):
			t.history(name, "placed on "+rec.machine+" once its old copy stopped")
		}
		t.setUnitFrom(name, cur, rec)
	}
	var woken map[*agentConn]struct{}
	if wake {
		woken = t.hold.release()
	}
	wakeAll(woken)
	ps.ph.done("apply")
}

// finish deletes the range records that stand for no unit any more (their
// units placed by this pass, or changed since; the others stay, one key for
// however many units, records.go), forgets machines gone, and publishes
// what the scheduler now counts; then runs done, saying whether the
// ranges were deleted.
func (ps *pass) finish(done func(ok bool)) {
	t, ph := ps.t, ps.ph
	ph.note("unwritten", t.store.standing.count())
	t.dropRanges(func(err error) {
		if err != nil {
			t.e.log.Warn("reconcile: could not delete finished range records", "err", err)
			ph.done("finish")
			done(false)
			return
		}
		ph.done("ranges")
		ps.forgetGone()
		ph.done("finish")
		done(true)
	})
}

// forgetGone forgets the machines gone, and publishes what the scheduler
// now counts.
func (ps *pass) forgetGone() {
	t := ps.t
	for _, id := range ps.p.Gone {
		if m := t.machines[id]; m != nil && m.conn == nil && len(m.units) == 0 {
			delete(t.machines, id)
		}
	}
	for id := range t.sched.machines {
		if m := t.machines[id]; m != nil {
			m.used = t.sched.Used(id)
		}
	}
	t.shares = t.sched.Shares()
	t.moves.hold(ps.held)
}
