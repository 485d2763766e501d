package engine

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/scheduler"
	"github.com/flotilla/flotilla/internal/unit"
)

// The loop keeps t.sched equal to the committed schedule (see the
// scheduler's doc for the duties this file carries out) and, each pass,
// reconciles: units move off lost machines and off machines where they no
// longer fit, pending units are allocated (by dominant resource fairness
// between roles), and global units follow the machines they fit.

// placeSlice is how many placements are sent to the agents at a time (a
// slice, committed and applied in halves: see reconcile), at least;
// placesPerMachine raises it with the cluster's size, so that each agent
// is sent its share of a slice in one message of about that many units, however many machines there are (a slice of 10,000 over
// 4,000 machines was 2.5 units a message, and messages, not units, were
// then the leader's main cost).
const (
	placeSlice       = 10000
	placesPerMachine = 16
)

// maxLostLogged is how many lost units a reconcile pass logs one by one.
const maxLostLogged = 20

// recheckChunk is how many placed units a pass checks against their
// machines in a term's one check of them all (planInput).
const recheckChunk = 1 << 14

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

// reconcile runs one pass: it takes the plan's input under the lock,
// decides with planReconcile (plan.go), allocates the units to place, and
// commits and applies the outcome. It runs on the loop goroutine.
// It returns when the next pass should run by time alone (zero: not
// before the next tick).
func (t *term) reconcile() (recheck time.Time) {
	now := t.e.cfg.Now()
	var ph passPhases
	ph.start(time.Now())
	defer func() {
		t.e.cfg.Metrics.ReconcileDuration.Observe(time.Since(now).Seconds())
		ph.logSlow(t.e.log, "reconcile pass")
	}()
	t.mu.Lock()
	ph.done("lock")
	t.applyInboxLocked()
	ph.done("inbox")
	t.hold.start()
	drifted := t.syncMachines(now)
	t.syncGlobals(len(drifted) > 0)
	ph.done("sync")
	t.sendFull()
	woken := t.hold.release()
	t.mu.Unlock()
	wakeAll(woken)
	ph.done("full")

	t.mu.RLock()
	ph.done("lock")
	in := t.planInput(now, drifted)
	p := planReconcile(in)
	t.placeDirty = false

	moved := map[string]*unitRec{}
	newMoves := map[string]string{} // moves to record durably
	unschedule := func(name, reason string) {
		moved[name] = t.units[name].with(func(r *unitRec) { r.machine, r.reason = "", reason })
		t.sched.Unplace(name)
	}
	// The first units lost in a pass are logged one by one, the rest
	// counted by machine: a machine of thousands of units lost would
	// otherwise log a line for each (each unit's history has it anyway).
	logged, unlogged := 0, map[string]int{}
	for _, l := range p.Lost {
		unschedule(l.Name, "")
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
	for _, mf := range p.Misfit {
		t.e.log.Info("unit no longer fits its machine; moving it", "unit", mf.Name, "machine", mf.Machine, "reason", mf.Reason)
		unschedule(mf.Name, "")
		if _, waiting := p.Waiting[mf.Name]; waiting {
			newMoves[mf.Name] = mf.Machine
		}
		t.history(mf.Name, fmt.Sprintf("moving off %s: %s", mf.Machine, mf.Reason))
	}
	for _, name := range slices.Sorted(maps.Keys(p.Waiting)) {
		why := p.Waiting[name]
		rec := moved[name]
		if rec == nil {
			rec = t.units[name]
		}
		if rec.reason != why || rec.machine != "" {
			moved[name] = rec.with(func(r *unitRec) { r.machine, r.reason = "", why })
		}
	}
	// A drain keeps units where they run, saying why: those that fit
	// nowhere else, and instances waiting for their turn.
	held := map[string]bool{}
	hold := func(name, why string, nowhere bool) {
		held[name] = nowhere
		rec := moved[name]
		if rec == nil {
			rec = t.units[name]
		}
		if rec.reason != why {
			moved[name] = rec.with(func(r *unitRec) { r.reason = why })
		}
	}
	for name, why := range p.Stay {
		hold(name, why, true)
	}
	for name, why := range p.Queued {
		hold(name, why, false)
	}
	var pending []*scheduler.Unit
	for _, name := range p.Place {
		rec := moved[name]
		if rec == nil {
			rec = t.units[name]
		}
		if rec != nil && rec.wanted() && !rec.file.Fleet.Global {
			pending = append(pending, rec.su)
		}
	}
	p.Place = nil // p lives on through the pass; a million names need not
	again := false
	// placedRec is rec placed on machine, or not placed for reason.
	placedRec := func(rec *unitRec, machine, reason string) *unitRec {
		return rec.with(func(r *unitRec) {
			r.machine, r.reason = machine, reason
			if machine != "" && r.at != 0 && !r.atPlaced {
				t.e.cfg.Metrics.SchedulingLatency.WithLabelValues("placed").Observe(now.Sub(unixNano(r.at)).Seconds())
				r.at, r.atPlaced = nanos(now), true
			}
		})
	}
	// displace moves the units a placement displaced (Replaces=), which
	// Allocate unplaced: placed again once stopped where they ran.
	displace := func(d scheduler.Decision) {
		for _, x := range d.Displaced {
			if _, ok := moved[x]; !ok && t.units[x] != nil && t.units[x].machine != "" {
				from := t.units[x].machine
				newMoves[x] = from
				moved[x] = t.units[x].with(func(r *unitRec) { r.machine, r.reason = "", "replaced; stopping on "+from+" before it moves" })
				again = true
			}
		}
	}
	// Handovers are placed first, their old copy kept until the new one
	// is active; one that finds no room after all stays.
	newHandovers := map[string]string{}
	if len(p.Handover) > 0 {
		us := make([]*scheduler.Unit, len(p.Handover))
		for i, h := range p.Handover {
			us[i] = t.units[h.Name].su
		}
		for i, d := range t.sched.Allocate(us) {
			h := p.Handover[i]
			if d.Machine == "" {
				hold(h.Name, stayReason(h.Machine, d.Reason), true)
				continue
			}
			moved[h.Name] = placedRec(t.units[h.Name], d.Machine, "")
			newHandovers[h.Name] = h.Machine
			t.e.log.Info("unit of a draining machine handed over: its new copy starts before the old one stops", "unit", h.Name, "machine", h.Machine, "to", d.Machine)
			t.history(h.Name, fmt.Sprintf("starting on %s before it stops on %s: %s", d.Machine, h.Machine, h.Reason))
			displace(d)
		}
	}
	// A unit the drain no longer holds (the drain ended, or the unit left)
	// loses the reason it gave.
	for name := range t.held {
		_, keep := held[name]
		if rec := t.units[name]; !keep && moved[name] == nil && rec != nil && rec.machine != "" && rec.reason != "" {
			moved[name] = rec.with(func(r *unitRec) { r.reason = "" })
		}
	}
	// Handovers whose old copy stops now, and those forgotten: unit -> the
	// machine of that copy.
	stopOld, handedOver := map[string]string{}, map[string]string{}
	for _, name := range p.HandoverStop {
		stopOld[name] = t.handovers[name].From
	}
	for _, name := range p.HandoverDone {
		handedOver[name] = t.handovers[name].From
		again = true // an instance waiting for its turn may move now
	}
	// The units placed that nothing else in the pass changed, in name
	// order (pending's): a million at a start, kept in a slice rather than
	// in moved, and those placed on a machine (most) with only the
	// machine, their new records made a slice at a time below (at a
	// million, a second copy of every record lived until the last slice
	// was applied, and the decisions with it).
	var placed []movedUnit
	ds := t.sched.Allocate(pending)
	for i := range ds {
		d, name := &ds[i], pending[i].Name
		rec, inMoved := moved[name]
		if !inMoved {
			rec = t.units[name]
		}
		switch {
		case inMoved:
			moved[name] = placedRec(rec, d.Machine, d.Reason)
		case d.Machine != "" && d.Reason == "" && d.Machine != rec.machine:
			placed = append(placed, movedUnit{name: name, machine: d.Machine})
		case d.Machine != rec.machine || d.Reason != rec.reason:
			placed = append(placed, movedUnit{name: name, rec: placedRec(rec, d.Machine, d.Reason)})
		}
		displace(*d)
	}
	t.mu.RUnlock()
	ph.done("plan")
	ph.note("placed", len(moved)+len(placed))
	done := map[string]bool{}
	for _, name := range p.MoveDone {
		done[name] = true
	}
	lostFrom := map[string]string{}
	for _, l := range p.Lost {
		lostFrom[l.Name] = l.Machine
	}
	// Commit and apply in slices, so that agents start on the first units
	// while the rest are written, and the lock is released in between. Only
	// this goroutine changes t.units, so it reads them without the lock.
	changes := mergeMoved(moved, placed)
	for _, name := range slices.Concat(p.MoveDone, p.HandoverStop, p.HandoverDone) {
		if _, ok := moved[name]; !ok {
			changes = append(changes, movedUnit{name: name}) // a move forgotten without a new placement (the unit is no longer wanted, or a handover ended)
		}
	}
	slice := max(placeSlice, placesPerMachine*len(t.schedMachines))
	// prepare makes a slice's records and the ops that write them.
	prepare := func(part []movedUnit) []registry.Op {
		for i, mu := range part {
			if mu.rec == nil && mu.machine != "" {
				part[i].rec = placedRec(t.units[mu.name], mu.machine, "")
			}
		}
		// One op per key, from the outcome: a unit moved off a machine and
		// placed again in the same pass is one put (etcd refuses a key twice
		// in a transaction).
		ops := make([]registry.Op, 0, len(part)) // about one a unit
		for _, mu := range part {
			name, nr, cur := mu.name, mu.rec, t.units[mu.name]
			if cur == nil {
				continue
			}
			if from, ok := newMoves[name]; ok {
				ops = append(ops, registry.PutMove(t.keys, name, from))
			} else if from, ok := newHandovers[name]; ok {
				ops = append(ops, registry.PutHandover(t.keys, name, from))
			} else if done[name] {
				ops = append(ops, registry.DeleteMove(t.keys, name))
			} else if from, ok := stopOld[name]; ok && cur.machine != from {
				ops = append(ops, t.dropAssignment(from, name)...)
			} else if from, ok := handedOver[name]; ok {
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
			if _, handover := newHandovers[name]; cur.machine != "" && nr.machine != cur.machine && !handover {
				ops = append(ops, t.dropAssignment(cur.machine, name)...)
			}
		}
		return ops
	}
	// commit writes a prepared slice, in the background.
	commit := func(part []movedUnit, ops []registry.Op) <-chan error {
		done := make(chan error, 1)
		go func() {
			done <- t.commitRecords(ops, func(yield func(*unitRec) bool) {
				for _, mu := range part {
					if mu.rec != nil && !yield(mu.rec) {
						return
					}
				}
			})
		}()
		return done
	}
	// apply applies a written part; the agents concerned are told once a
	// whole slice is applied (wake).
	apply := func(part []movedUnit, wake bool) {
		t.mu.Lock()
		ph.done("lock")
		t.hold.start()
		for _, mu := range part {
			name := mu.name
			if nr, cur := mu.rec, t.units[name]; nr != nil && cur != nil && nr.machine != cur.machine {
				t.written(name)
			}
			if from, ok := newMoves[name]; ok {
				t.draining[name] = from
			} else if from, ok := newHandovers[name]; ok {
				t.handovers[name] = handover{From: from}
			} else if done[name] {
				delete(t.draining, name)
			} else if from, ok := stopOld[name]; ok {
				t.stopOldCopy(name, from, false)
			} else if from, ok := handedOver[name]; ok {
				t.stopOldCopy(name, from, true)
			}
			rec, cur := mu.rec, t.units[name]
			if rec == nil || cur == nil || cur.desired() != rec.desired() {
				continue
			}
			switch {
			case rec.machine == "" || rec.machine == cur.machine:
			case lostFrom[name] != "":
				t.history(name, "replaced on "+rec.machine+" (its machine "+lostFrom[name]+" was lost)")
			case done[name] || strings.HasPrefix(cur.reason, "stopping on "):
				t.history(name, "placed on "+rec.machine+" once its old copy stopped")
			}
			t.setUnit(name, rec)
		}
		t.shrinkUnplaced()
		var woken map[*agentConn]struct{}
		if wake {
			woken = t.hold.release()
		}
		t.mu.Unlock()
		wakeAll(woken)
		ph.done("apply")
	}
	// A part is prepared while the one before it is written: at a
	// million units the pass spent a third of its time making records
	// and ops and another third waiting for etcd, one after the other.
	// Parts hold other units (a unit whose move ended and that is placed
	// again is in two, its move's key deleted by each, as before), and a
	// part is written only once the one before it is applied, so that its
	// stored files are known. A part is half a slice, the agents told once
	// both halves are applied: with whole slices, the ops of two (320,000
	// at a million units, about 75 MB) were alive at once.
	var (
		written     <-chan error
		writtenPart []movedUnit
		writtenOps  int
		applied     int
		room        = len(changes) // the list changes is in (nextChanges)
	)
	for len(changes) > 0 || written != nil {
		var part []movedUnit
		var ops []registry.Op
		if len(changes) > 0 {
			part = changes[:min(len(changes), max(slice/2, 1))]
			changes, room = nextChanges(changes, len(part), room)
			ops = prepare(part)
			ph.done("ops")
		}
		if written != nil {
			err := <-written
			ph.done("commit")
			if err != nil {
				// commit has ended the term (the next one reloads from etcd),
				// so the tentative placements left in t.sched do not matter.
				t.e.log.Warn("reconcile: could not write schedule", "err", err, "ops", writtenOps)
				t.mu.Lock()
				woken := t.hold.release() // the agents of a half applied
				t.mu.Unlock()
				wakeAll(woken)
				return time.Time{}
			}
			applied++
			apply(writtenPart, applied%2 == 0 || part == nil)
			written = nil
		}
		if part != nil {
			written, writtenPart, writtenOps = commit(part, ops), part, len(ops)
		}
	}
	// Delete the range records that stand for no unit any more (their
	// units placed by this pass, or changed since); the others stay, one
	// key for however many units (records.go).
	ph.note("unwritten", t.standing.count())
	defer ph.done("finish")
	if err := t.dropRanges(); err != nil {
		t.e.log.Warn("reconcile: could not delete finished range records", "err", err)
		return time.Time{}
	}
	ph.done("ranges")
	t.mu.Lock()
	ph.done("lock")
	for _, id := range p.Gone {
		if m := t.machines[id]; m != nil && m.conn == nil && len(m.units) == 0 {
			delete(t.machines, id)
		}
	}
	for id := range t.schedMachines {
		if m := t.machines[id]; m != nil {
			m.used = t.sched.Used(id)
		}
	}
	t.shares = t.sched.Shares()
	t.shrinkUnplaced()
	t.held = held
	t.mu.Unlock()
	if again || t.recheck != nil || t.followersMoved {
		t.poke()
	}
	return p.Recheck
}

// stopOldCopy has machine from stop unit name's copy that a handover kept
// there, and forgets the handover if done (that copy is gone). Callers
// hold mu for writing.
func (t *term) stopOldCopy(name, from string, done bool) {
	h := t.handovers[name]
	if done {
		delete(t.handovers, name)
	} else {
		t.handovers[name] = handover{From: from, Stopping: true}
	}
	if cur := t.units[name]; !h.Stopping && cur != nil && cur.machine != from {
		if m := t.machines[from]; m != nil {
			m.push(name, nil)
		}
		t.history(name, "stopping on "+from+", its new copy on "+cur.machine+" being active")
	}
}

// statusOn is unit name's status as machine reports it, if it does.
// Callers hold mu.
func (t *term) statusOn(name, machine string) (agentStatus, bool) {
	if m := t.machines[machine]; m != nil {
		return t.statusOf(m, name)
	}
	return agentStatus{}, false
}

// shrinkUnplaced makes t.unplaced again once it holds under a quarter of
// what it once held. A map keeps the room it once grew to: the million
// units of a start left it empty but 60 MB large, and the pass that
// places them empties it a slice at a time while the rest of the heap
// grows. Each copy costs a quarter of the deletes since the last, so the
// copies cost a third of the deletes in all. Callers hold mu for writing.
func (t *term) shrinkUnplaced() {
	t.unplacedRoom = max(t.unplacedRoom, len(t.unplaced))
	if t.unplacedRoom < 1024 || len(t.unplaced) >= t.unplacedRoom/4 {
		return
	}
	m := make(map[string]struct{}, len(t.unplaced))
	for name := range t.unplaced {
		m[name] = struct{}{}
	}
	t.unplaced, t.unplacedRoom = m, len(m)
}

// planInput gathers what the pass decides from. Callers hold mu (for
// reading) and run on the loop goroutine; it takes what the loop's own
// fields ask to check (followersMoved, a chunk of recheck), which only the
// loop reads.
func (t *term) planInput(now time.Time, drifted []string) planInput {
	in := planInput{
		Now: now, TermStart: t.start, Reconnect: t.reconnect, AgentTTL: t.e.cfg.AgentTTL, Grace: t.heartbeat(),
		Machines:  make(map[string]planMachine, len(t.machines)),
		Check:     map[string]string{},
		Moves:     t.draining,
		Handovers: t.handovers,
		Unit: func(name string) planUnit {
			r := t.units[name]
			if r == nil {
				return planUnit{}
			}
			return planUnit{Wanted: r.wanted(), Singleton: r.file.Fleet.Singleton, LostAfter: r.file.Fleet.LostAfter,
				Launched: r.want == wantLaunched, Machine: r.machine}
		},
		Fits: func(name, machine string) (bool, string) {
			return t.sched.Fits(t.units[name].su, machine)
		},
		Elsewhere: func(name string) (bool, string) {
			// A draining machine is not among the scheduler's: Decide
			// says where the unit would go if it moved now.
			d := t.sched.Decide(t.units[name].su)
			return d.Machine != "", d.Reason
		},
		Running: func(name, machine string) bool {
			s, ok := t.statusOn(name, machine)
			return ok && s.Running()
		},
		Active: func(name, machine string) bool {
			s, ok := t.statusOn(name, machine)
			return ok && s.Active == "active"
		},
	}
	quiet := t.quietFor()
	for id, m := range t.machines {
		pm := planMachine{Reachable: t.reachable(m, now), Left: m.left, Draining: t.drainMachines[id] > 0, MaxParallel: t.drainMachines[id],
			HeardAt: m.heardAt(), SentAt: m.sentAt()}
		if !pm.Reachable && !pm.Draining && !pm.Left {
			// None of its units can be lost before it has been silent for
			// the shortest LostAfter=: while 10,000 machines reconnect to a
			// new leader, describing their million units at every pass kept
			// the lock from the reconnecting streams.
			if at := in.heardFrom(pm).Add(quiet); now.Before(at) {
				if in.Wake.IsZero() || at.Before(in.Wake) {
					in.Wake = at
				}
				in.Machines[id] = pm
				continue
			}
		}
		if !pm.Reachable || pm.Draining {
			pm.Units = m.unitNames()
		}
		in.Machines[id] = pm
	}
	// Units whose constraints may no longer hold where they are: on
	// machines whose metadata or capacity changed, followers (MachineOf=)
	// of units that moved, and, once per term after every live machine has
	// had the agent TTL to reconnect, every placed unit (a change a former
	// term committed but did not act on is acted on now).
	for _, id := range drifted {
		for _, e := range t.machines[id].units {
			in.Check[e.name] = id
		}
	}
	if !t.rechecked && now.Sub(t.start) > t.e.cfg.AgentTTL+t.e.cfg.HeartbeatInterval {
		// recheckChunk units a pass, the next pass at once: a new leader of
		// a million units checked them all in one pass of 15 s, under the
		// read lock that 10,000 reconnecting agents' Hellos waited for, and
		// a request waits for the pass under way (65,536 a pass took 1 s).
		if t.recheck == nil {
			t.recheck = make([]string, 0, len(t.units))
			for name, r := range t.units {
				if r.machine != "" {
					t.recheck = append(t.recheck, name)
				}
			}
		}
		n := min(len(t.recheck), recheckChunk)
		for _, name := range t.recheck[:n] {
			if r := t.units[name]; r != nil && r.machine != "" && t.sched.HasMachine(r.machine) {
				in.Check[name] = r.machine
			}
		}
		t.recheck = t.recheck[n:]
		if len(t.recheck) == 0 {
			t.rechecked, t.recheck = true, nil
		}
	}
	if t.followersMoved {
		// Taken here, not at the end of the pass: a unit this pass moves
		// sets it again, and the next pass checks its followers (cleared
		// at the end, a follower of a unit moved by a metadata change
		// stayed behind until the term's check of every unit, if any).
		t.followersMoved = false
		for name := range t.followers {
			if r := t.units[name]; r != nil && r.machine != "" {
				in.Check[name] = r.machine
			}
		}
	}
	in.PlaceDirty = t.placeDirty || len(drifted) > 0
	in.Stayed = map[string]string{}
	for name, nowhere := range t.held {
		if r := t.units[name]; nowhere && r != nil {
			in.Stayed[name] = r.reason
		}
	}
	if in.PlaceDirty {
		// Something placement depends on changed: try the backlog again.
		// Otherwise it would be decided the same way at a cost of up to
		// every machine per unit.
		in.Backlog = slices.AppendSeq(make([]string, 0, len(t.unplaced)), maps.Keys(t.unplaced))
	}
	return in
}

// syncMachines makes the scheduler's machines the reachable ones that do
// not drain, with their metadata and capacity, and returns those whose
// metadata or capacity changed. Callers hold mu and run on the loop
// goroutine.
func (t *term) syncMachines(now time.Time) (drifted []string) {
	for id, m := range t.machines {
		sm, known := t.schedMachines[id]
		if t.reachable(m, now) && t.drainMachines[id] == 0 {
			cur := schedMachine{metadata: t.metadata(m), capacity: scheduler.Resources{CPUPercent: m.info.CPUPercent, MemoryBytes: m.info.MemoryBytes}, drivers: m.info.Drivers}
			if !known || !cur.same(sm) {
				t.sched.SetMachine(scheduler.Machine{ID: id, Metadata: cur.metadata, Capacity: cur.capacity, Drivers: cur.drivers})
				t.schedMachines[id] = cur
				t.placeDirty = true
				if known {
					drifted = append(drifted, id)
				} else {
					for _, e := range m.units {
						t.sched.Place(t.units[e.name].su, id)
					}
					t.globalsDirty = true
					// Back after the scheduler dropped it, and changed
					// meanwhile (an override made while it was away, or
					// its daemon restarted with other metadata): its units
					// are checked as a change while it stayed would have
					// had them. (A term's first sight of a machine checks
					// nothing: the term's one check of every placed unit
					// is for what it did not place itself.)
					if gone, ok := t.schedGone[id]; ok {
						delete(t.schedGone, id)
						if !cur.same(gone) {
							drifted = append(drifted, id)
						}
					}
				}
			}
			continue
		}
		if known {
			t.sched.RemoveMachine(id)
			t.schedGone[id] = sm
			delete(t.schedMachines, id)
			t.globalsDirty = true
			t.placeDirty = true
		}
	}
	for id := range t.schedMachines {
		if _, ok := t.machines[id]; !ok {
			t.sched.RemoveMachine(id)
			delete(t.schedMachines, id)
		}
	}
	for id := range t.schedGone {
		if _, ok := t.machines[id]; !ok {
			delete(t.schedGone, id) // forgotten: it comes back as new
		}
	}
	if len(drifted) > 0 {
		t.globalsDirty = true
	}
	sort.Strings(drifted)
	return drifted
}

// syncGlobals places every wanted global unit on the machines where it fits
// (in name order, so global units that conflict settle the same way every
// time) and tells the machines that gained or lost one. Callers hold mu.
func (t *term) syncGlobals(force bool) {
	if !t.globalsDirty && !force {
		return
	}
	t.globalsDirty = false
	for name := range t.schedGlobals {
		if r := t.units[name]; r == nil || !r.wanted() {
			t.sched.Unplace(name)
			delete(t.schedGlobals, name)
		}
	}
	want := map[string]map[string]struct{}{} // machine -> global units
	for _, name := range slices.Sorted(maps.Keys(t.globals)) {
		r := t.units[name]
		if !r.wanted() {
			continue
		}
		target := setOf(t.sched.GlobalMachines(r.su))
		for _, id := range t.sched.GlobalPlacements(name) {
			if _, ok := target[id]; !ok {
				t.sched.UnplaceFrom(name, id)
			}
		}
		have := setOf(t.sched.GlobalPlacements(name))
		for _, id := range slices.Sorted(maps.Keys(target)) {
			if _, ok := have[id]; !ok {
				t.sched.Place(r.su, id)
			}
		}
		t.schedGlobals[name] = true
		t.placeDirty = true // global placements use room other units may want
		for _, id := range t.sched.GlobalPlacements(name) {
			if want[id] == nil {
				want[id] = map[string]struct{}{}
			}
			want[id][name] = struct{}{}
		}
	}
	for id, m := range t.machines {
		if m.conn == nil {
			clear(m.globals)
			continue
		}
		if m.needFull {
			m.globals = want[id] // sendFull sends them
			if m.globals == nil {
				m.globals = map[string]struct{}{}
			}
			continue
		}
		for name := range want[id] {
			if _, ok := m.globals[name]; !ok {
				m.globals[name] = struct{}{}
				m.push(name, t.units[name])
			}
		}
		for name := range m.globals {
			if _, ok := want[id][name]; !ok {
				delete(m.globals, name)
				m.push(name, nil)
			}
		}
	}
}

// sendFull queues the full desired set (scheduled and global units) of each
// stream that awaits it. Callers hold mu.
func (t *term) sendFull() {
	for _, m := range t.machines {
		if m.conn == nil || !m.needFull {
			continue
		}
		m.needFull = false
		m.conn.mu.Lock()
		m.conn.full = true
		m.conn.pending = make(map[string]*unitRec, len(m.units)+len(m.globals))
		for _, e := range m.units {
			m.conn.pending[e.name] = t.units[e.name]
		}
		for name := range m.globals {
			m.conn.pending[name] = t.units[name]
		}
		for name, h := range t.handovers {
			if r := t.units[name]; h.From == m.info.ID && !h.Stopping && r != nil && r.machine != h.From {
				m.conn.pending[name] = r // its old copy runs here until the new one is active
			}
		}
		// What the agent reported having that no longer exists was
		// destroyed (while it was away, or before this leader).
		m.conn.destroyed = nil
		for name := range m.others { // a unit it does not know is not listed
			if _, ok := t.units[name]; !ok {
				if m.conn.destroyed == nil {
					m.conn.destroyed = map[string]bool{}
				}
				m.conn.destroyed[name] = true
			}
		}
		m.conn.mu.Unlock()
		signalConn(m.conn)
	}
}

func setOf(ids []string) map[string]struct{} {
	m := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		m[id] = struct{}{}
	}
	return m
}

// movedUnit is a unit a pass changes, with its new record (nil: only its
// move is forgotten), or the machine it is placed on to make it from.
type movedUnit struct {
	name    string
	rec     *unitRec
	machine string
}

// nextChanges returns the changes after the first n, and the length of
// the list they are in, which is room until they are under half of it:
// then they are a list of their own. The changes of a start (a million
// units, 40 MB) lived until the pass's last slice was applied, which is
// when the leader's heap peaks; they now go about as fast as they are
// applied.
func nextChanges(changes []movedUnit, n, room int) ([]movedUnit, int) {
	rest := changes[n:]
	if room >= 1024 && len(rest) < room/2 {
		return slices.Clone(rest), len(rest)
	}
	return rest, room
}

// mergeMoved returns the units of moved and of placed (in name order, none
// in moved) in name order.
func mergeMoved(moved map[string]*unitRec, placed []movedUnit) []movedUnit {
	if len(moved) == 0 {
		return placed // a start: a million units placed, none moved
	}
	// Merged from the back into placed grown by len(moved): a copy of a
	// million placements (40 MB) would live beside placed until the merge
	// ended.
	names := slices.Sorted(maps.Keys(moved))
	i, j := len(placed)-1, len(names)-1
	out := slices.Grow(placed, len(names))[:len(placed)+len(names)]
	for k := len(out) - 1; j >= 0; k-- {
		if i >= 0 && out[i].name > names[j] {
			out[k] = out[i]
			i--
		} else {
			out[k] = movedUnit{name: names[j], rec: moved[names[j]]}
			j--
		}
	}
	return out
}
