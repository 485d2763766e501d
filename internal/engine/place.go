package engine

import (
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/scheduler"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// The loop keeps t.sched equal to the committed schedule (see the
// scheduler's doc for the duties this file carries out) and, each pass,
// reconciles: units move off lost machines and off machines where they no
// longer fit, pending units are allocated (by dominant resource fairness
// between roles), and global units follow the machines they fit.

// placeSlice is how many placements are committed and applied at a time.
const placeSlice = 10000

// schedMachine is what the scheduler was last told of a machine.
type schedMachine struct {
	metadata map[string]string
	capacity scheduler.Resources
}

// reconcile runs one pass. It runs on the loop goroutine.
func (t *term) reconcile() {
	now := t.e.cfg.Now()
	defer func() { t.e.cfg.Metrics.ReconcileDuration.Observe(time.Since(now).Seconds()) }()
	t.mu.Lock()
	lost, drifted := t.syncMachines(now)
	t.syncGlobals(len(drifted) > 0)
	t.sendFull()
	t.mu.Unlock()

	t.mu.RLock()
	moved := map[string]*unitRec{}
	unschedule := func(name string) {
		moved[name] = t.units[name].with(func(r *unitRec) { r.machine = "" })
		t.sched.Unplace(name)
	}
	// A unit moving off a live machine is placed again only once that
	// machine has stopped it, so it never runs on two (see draining).
	drain := func(name string) {
		if old := t.units[name].machine; old != "" {
			t.draining[name] = old
		}
		unschedule(name)
	}
	// Units whose constraints no longer hold where they are: on machines
	// whose metadata or capacity changed, and followers (MachineOf=) of
	// units that moved.
	check := map[string]string{}
	for _, id := range drifted {
		for name := range t.machines[id].units {
			check[name] = id
		}
	}
	if !t.rechecked && now.Sub(t.start) > t.e.cfg.AgentTTL+t.e.cfg.HeartbeatInterval {
		t.rechecked = true
		for name, r := range t.units {
			if r.machine != "" && t.sched.HasMachine(r.machine) {
				check[name] = r.machine
			}
		}
	}
	if t.followersMoved {
		for name := range t.followers {
			if r := t.units[name]; r != nil && r.machine != "" {
				check[name] = r.machine
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(check)) {
		if ok, why := t.sched.Fits(t.units[name].su, check[name]); !ok {
			t.e.log.Info("unit no longer fits its machine; moving it", "unit", name, "machine", check[name], "reason", why)
			drain(name)
		}
	}
	for _, id := range lost {
		for name := range t.machines[id].units {
			if _, ok := moved[name]; !ok {
				unschedule(name)
			}
		}
	}
	var pending []*scheduler.Unit
	if t.placeDirty || len(lost) > 0 || len(drifted) > 0 {
		// Something placement depends on changed: try the backlog again.
		// Otherwise it would be decided the same way at a cost of up to
		// every machine per unit.
		for name := range t.unplaced {
			if _, ok := moved[name]; !ok && !t.stillRunning(name) {
				pending = append(pending, t.units[name].su)
			}
		}
	}
	t.placeDirty = false
	for name, r := range moved {
		switch {
		case !r.wanted():
		case t.stillRunning(name):
			old := t.draining[name]
			moved[name] = r.with(func(r *unitRec) { r.reason = "stopping on " + old + " before it moves" })
		default:
			pending = append(pending, r.su)
		}
	}
	sort.Slice(pending, func(i, j int) bool { return pending[i].Name < pending[j].Name })
	again := false
	for i, d := range t.sched.Allocate(pending) {
		name := pending[i].Name
		rec := moved[name]
		if rec == nil {
			rec = t.units[name]
		}
		nr := rec.with(func(r *unitRec) {
			r.machine, r.reason = d.Machine, d.Reason
			if d.Machine != "" && !r.wantedAt.IsZero() {
				t.e.cfg.Metrics.SchedulingLatency.WithLabelValues("placed").Observe(now.Sub(r.wantedAt).Seconds())
				r.wantedAt, r.placedAt = time.Time{}, now
			}
		})
		if nr.machine != rec.machine || nr.reason != rec.reason || moved[name] != nil {
			moved[name] = nr
		}
		// Replaces=: the units this one displaced were unplaced by Allocate;
		// unschedule them now and place them on the next pass.
		for _, x := range d.Displaced {
			if _, ok := moved[x]; !ok && t.units[x] != nil && t.units[x].machine != "" {
				t.draining[x] = t.units[x].machine
				moved[x] = t.units[x].with(func(r *unitRec) { r.machine, r.reason = "", "replaced; stopping on "+r.machine+" before it moves" })
				again = true
			}
		}
	}
	t.mu.RUnlock()
	// Commit and apply in slices, so that agents start on the first units
	// while the rest are written, and the lock is released in between. Only
	// this goroutine changes t.units, so it reads them without the lock.
	names := slices.Sorted(maps.Keys(moved))
	for len(names) > 0 {
		part := names[:min(len(names), placeSlice)]
		names = names[len(part):]
		// One op per unit, from the outcome: a unit moved off a machine and
		// placed again in the same pass is one put (etcd refuses a key twice
		// in a transaction).
		var ops []registry.Op
		for _, name := range part {
			nr, cur := moved[name], t.units[name]
			switch {
			case nr.machine != "" && nr.machine != cur.machine:
				ops = append(ops, registry.PutSchedule(t.keys, name, nr.machine))
			case nr.machine == "" && cur.machine != "":
				ops = append(ops, registry.DeleteSchedule(t.keys, name))
			}
			if cur.machine != "" && nr.machine != cur.machine {
				ops = append(ops, t.dropAssignment(cur.machine, name)...)
			}
		}
		if err := t.commit(ops); err != nil {
			// commit has ended the term (the next one reloads from etcd),
			// so the tentative placements left in t.sched do not matter.
			t.e.log.Warn("reconcile: could not write schedule", "err", err, "ops", len(ops))
			return
		}
		t.mu.Lock()
		for _, name := range part {
			if rec, cur := moved[name], t.units[name]; cur != nil && cur.desired == rec.desired {
				t.setUnit(name, rec)
			}
		}
		t.mu.Unlock()
	}
	t.mu.Lock()
	t.followersMoved = false
	for _, id := range lost {
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
	t.mu.Unlock()
	if len(lost) > 0 {
		t.e.log.Info("moved units off lost machines", "machines", lost)
	}
	if again {
		t.poke()
	}
}

// syncMachines makes the scheduler's machines the connected ones, with
// their metadata and capacity, and returns the machines lost (unheard for
// the agent TTL plus grace) and those whose metadata or capacity changed.
// Callers hold mu and run on the loop goroutine.
func (t *term) syncMachines(now time.Time) (lost, drifted []string) {
	deadline := t.e.cfg.AgentTTL + t.e.cfg.HeartbeatInterval
	for id, m := range t.machines {
		sm, known := t.schedMachines[id]
		if m.conn != nil {
			cur := schedMachine{metadata: t.metadata(m), capacity: scheduler.Resources{CPUPercent: m.info.CPUPercent, MemoryBytes: m.info.MemoryBytes}}
			if !known || !maps.Equal(cur.metadata, sm.metadata) || cur.capacity != sm.capacity {
				t.sched.SetMachine(scheduler.Machine{ID: id, Metadata: cur.metadata, Capacity: cur.capacity})
				t.schedMachines[id] = cur
				t.placeDirty = true
				if known {
					drifted = append(drifted, id)
				} else {
					for name := range m.units {
						t.sched.Place(t.units[name].su, id)
					}
					t.globalsDirty = true
				}
			}
			continue
		}
		if known {
			t.sched.RemoveMachine(id)
			delete(t.schedMachines, id)
			t.globalsDirty = true
			t.placeDirty = true
		}
		heard := m.lastSeen
		if heard.Before(t.start) {
			heard = t.start
		}
		if now.Sub(heard) > deadline {
			lost = append(lost, id)
		}
	}
	for id := range t.schedMachines {
		if _, ok := t.machines[id]; !ok {
			t.sched.RemoveMachine(id)
			delete(t.schedMachines, id)
		}
	}
	if len(drifted) > 0 {
		t.globalsDirty = true
	}
	sort.Strings(lost)
	sort.Strings(drifted)
	return lost, drifted
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
				m.push(name, assignment(t.units[name]))
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
		m.conn.pending = make(map[string]*agentpb.Assignment, len(m.units)+len(m.globals))
		for name := range m.units {
			m.conn.pending[name] = assignment(t.units[name])
		}
		for name := range m.globals {
			m.conn.pending[name] = assignment(t.units[name])
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

// stillRunning reports whether a unit moving off a machine still runs there
// (so it must not be placed yet), and forgets the move once it does not.
// Callers hold mu and run on the loop goroutine.
func (t *term) stillRunning(name string) bool {
	old, ok := t.draining[name]
	if !ok {
		return false
	}
	if m := t.machines[old]; m != nil && m.conn != nil {
		if s, ok := m.states[name]; ok && s.Running() {
			return true
		}
	}
	delete(t.draining, name) // stopped, or its machine is gone (and fences itself)
	return false
}
