package engine

import (
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/flotilla/flotilla/internal/health"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/scheduler"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/proto/agentpb"
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

// reconcile runs one pass: it syncs machines and global units, takes the
// plan's input and decides with planReconcile (plan.go), allocates the
// units to place (pass.decide), and has the outcome committed and applied
// (pass.write, pass.finish). It runs on the loop goroutine, and runs done,
// once the pass's last txn is done, with when the next pass should run by
// time alone (zero: not before the next tick).
func (t *term) reconcile(done func(recheck time.Time)) {
	now := t.now
	ph := &passPhases{}
	ph.start(time.Now()) // phases measure the work: the system's clock
	end := func(recheck time.Time) {
		t.e.cfg.Metrics.ReconcileDuration.Observe(time.Since(ph.began).Seconds())
		ph.logSlow(t.e.log, "reconcile pass")
		done(recheck)
	}
	t.applyInputs()
	ph.done("inbox")
	t.hold.start()
	drifted := t.syncMachines(now)
	t.syncGlobals(len(drifted) > 0)
	ph.done("sync")
	t.sendFull()
	wakeAll(t.hold.release())
	ph.done("full")

	ps := &pass{t: t, now: now, ph: ph}
	ps.p = planReconcile(t.planInput(now, drifted))
	t.noteDoubt(&ps.p)
	t.placeDirty = false
	ps.decide()
	ph.done("plan")
	ph.note("placed", len(ps.moved)+len(ps.placed))
	ps.write(func(ok bool) {
		if !ok {
			end(time.Time{})
			return
		}
		ps.finish(func(ok bool) {
			if !ok {
				end(time.Time{})
				return
			}
			if ps.again || t.recheck != nil || t.followersMoved {
				t.pokeNow()
			}
			end(ps.p.Recheck)
		})
	})
}

// stopOldCopy has machine from stop unit name's copy that a handover kept
// there, and forgets the handover if done (that copy is gone). It runs on
// the loop.
func (t *term) stopOldCopy(name, from string, done bool) {
	h := t.moves.stopOld(name, from, done)
	if cur := t.units[name]; !h.Stopping && cur != nil && cur.machine != from {
		if m := t.machines[from]; m != nil {
			m.push(name, nil)
		}
		t.history(name, "stopping on "+from+", its new copy on "+cur.machine+" being active")
	}
}

// statusOn is unit name's status as machine reports it, if it does. It
// runs on the loop.
func (t *term) statusOn(name, machine string) (agentStatus, bool) {
	if m := t.machines[machine]; m != nil {
		return t.statusOf(m, name)
	}
	return agentStatus{}, false
}

// planInput gathers what the pass decides from. It runs on the loop
// goroutine; it takes what the loop's own
// fields ask to check (followersMoved, a chunk of recheck), which only the
// loop reads.
func (t *term) planInput(now time.Time, drifted []string) planInput {
	in := planInput{
		Now: now, TermStart: t.start, Reconnect: t.reconnect, AgentTTL: t.e.cfg.AgentTTL, Grace: t.heartbeat(),
		Doubt: t.doubt, DoubtFor: doubtFor(len(t.machines), t.e.cfg.AgentTTL),
		Machines:  t.planScratch(),
		Check:     map[string]string{},
		Moves:     t.moves.draining,
		Handovers: t.moves.handovers,
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
		Reported: func(name, machine string) bool {
			_, ok := t.statusOn(name, machine)
			return ok
		},
		MovedAt: t.moves.movedAt,
		Active: func(name, machine string) bool {
			// Healthy too: a handover's old copy stops once the new one
			// passes its checks ("": an agent that does not say).
			s, ok := t.statusOn(name, machine)
			return ok && s.Active == "active" && (s.Health == "" || s.Health == health.Healthy)
		},
	}
	t.planMachines(&in, now)
	t.planChecks(&in, drifted, now)
	in.PlaceDirty = t.placeDirty || len(drifted) > 0
	in.Stayed = map[string]string{}
	for name, nowhere := range t.moves.held {
		if r := t.units[name]; nowhere && r != nil {
			in.Stayed[name] = r.reason
		}
	}
	if in.PlaceDirty {
		// Something placement depends on changed: try the backlog again.
		// Otherwise it would be decided the same way at a cost of up to
		// every machine per unit.
		in.Backlog = make([]string, 0, t.unplaced.len())
		t.unplaced.each(func(id int32) { in.Backlog = append(in.Backlog, t.recs[id].name()) })
	}
	return in
}

// planScratch is the map a pass's input describes the machines in, cleared:
// the same map every pass (a pass's plan keeps none of its input), rather
// than 10,000 machines' entries allocated again at every pass of a start.
func (t *term) planScratch() map[string]planMachine {
	if t.machineScratch == nil {
		t.machineScratch = make(map[string]planMachine, len(t.machines))
	}
	clear(t.machineScratch)
	return t.machineScratch
}

// planMachines describes the machines to the plan: every machine, with its
// units where the plan needs them (unreachable or draining).
func (t *term) planMachines(in *planInput, now time.Time) {
	quiet := t.quietFor()
	for id, m := range t.machines {
		pm := planMachine{Reachable: t.reachable(m, now), Left: m.left, Draining: t.moves.drainMachines[id] > 0, MaxParallel: t.moves.drainMachines[id],
			HeardAt: m.heardAt(), SentAt: m.sentAt(), Streams: t.e.cfg.Registry != registry.ModeEtcd}
		if !pm.Reachable && !pm.Draining && !pm.Left {
			// None of its units can be lost before it has been silent for
			// the shortest LostAfter=: while 10,000 machines reconnect to a
			// new leader, describing their million units at every pass kept
			// the loop from the reconnecting streams.
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
}

// planChecks names the units to check against the machine they run on:
// units whose constraints may no longer hold where they are, on machines
// whose metadata or capacity changed, followers (MachineOf=) of units that
// moved, and, once per term after every live machine has had the agent
// TTL to reconnect, every placed unit (a change a former term committed
// but did not act on is acted on now).
func (t *term) planChecks(in *planInput, drifted []string, now time.Time) {
	for _, id := range drifted {
		for _, e := range t.machines[id].units {
			in.Check[e.name()] = id
		}
	}
	if !t.rechecked && now.Sub(t.start) > t.e.cfg.AgentTTL+t.e.cfg.HeartbeatInterval {
		// recheckChunk units a pass, the next pass at once: a new leader of
		// a million units checked them all in one pass of 15 s, which
		// 10,000 reconnecting agents' Hellos waited for, and
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
}

// syncMachines makes the scheduler's machines the reachable ones that do
// not drain, with their metadata and capacity, and returns those whose
// metadata or capacity changed. It runs on the loop.
func (t *term) syncMachines(now time.Time) (drifted []string) {
	for id, m := range t.machines {
		sm, known := t.sched.machines[id]
		if t.reachable(m, now) && t.moves.drainMachines[id] == 0 {
			cur := schedMachine{metadata: t.metadata(m), capacity: scheduler.Resources{CPUPercent: m.info.CPUPercent, MemoryBytes: m.info.MemoryBytes}, drivers: m.info.Drivers}
			if !known || !cur.same(sm) {
				gone, wasGone := t.sched.setMachine(id, cur)
				t.placeDirty = true
				if known {
					drifted = append(drifted, id)
				} else {
					for _, e := range m.units {
						t.sched.Place(e.su, id)
					}
					t.globalsDirty = true
					// Back after the scheduler dropped it, and changed
					// meanwhile (an override made while it was away, or
					// its daemon restarted with other metadata): its units
					// are checked as a change while it stayed would have
					// had them. (A term's first sight of a machine checks
					// nothing: the term's one check of every placed unit
					// is for what it did not place itself.)
					if wasGone && !cur.same(gone) {
						drifted = append(drifted, id)
					}
				}
			}
			continue
		}
		if known {
			t.sched.drop(id)
			t.globalsDirty = true
			t.placeDirty = true
		}
	}
	t.sched.forget(t.machines)
	if len(drifted) > 0 {
		t.globalsDirty = true
	}
	sort.Strings(drifted)
	return drifted
}

// syncGlobals places every wanted global unit on the machines where it fits
// (in name order, so global units that conflict settle the same way every
// time) and tells the machines that gained or lost one. It runs on the
// loop.
func (t *term) syncGlobals(force bool) {
	if !t.globalsDirty && !force {
		return
	}
	t.globalsDirty = false
	for name := range t.sched.globals {
		if r := t.units[name]; r == nil || !r.wanted() {
			t.sched.Unplace(name)
			delete(t.sched.globals, name)
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
		t.sched.globals[name] = true
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
// stream that awaits it. It runs on the loop.
func (t *term) sendFull() {
	for _, m := range t.machines {
		if m.conn == nil || !m.needFull {
			continue
		}
		m.needFull = false
		m.conn.mu.Lock()
		m.conn.full = true
		if t.fullUnchanged(m) {
			// The agent holds this set already (a new leader's, most
			// often): it is told so, not sent it again.
			m.conn.unchanged = true
			clear(m.conn.pending)
			t.e.cfg.Metrics.FullSets.WithLabelValues("unchanged").Inc()
		} else {
			t.e.cfg.Metrics.FullSets.WithLabelValues("whole").Inc()
			m.conn.unchanged = false
			m.conn.pending = make(map[string]*unitRec, len(m.units)+len(m.globals))
			t.eachFull(m, func(name string, r *unitRec) { m.conn.pending[name] = r })
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

// eachFull calls fn with each unit of machine m's full desired set: the
// units scheduled there, the global ones, and those whose old copy runs
// there until the new one is active elsewhere (handovers). It runs on the
// loop.
func (t *term) eachFull(m *machineRec, fn func(name string, r *unitRec)) {
	for _, e := range m.units {
		fn(e.name(), t.recs[e.su.ID])
	}
	for name := range m.globals {
		fn(name, t.units[name])
	}
	for name, h := range t.moves.handovers {
		if r := t.units[name]; h.From == m.info.ID && !h.Stopping && r != nil && r.machine != h.From {
			fn(name, r)
		}
	}
}

// fullUnchanged reports whether machine m's full desired set is the one its
// agent's Hello summed up: the units the agent keeps (loaded or launched),
// by name, file hash, desired state and global flag. It runs on the loop.
func (t *term) fullUnchanged(m *machineRec) bool {
	h := m.conn.hello
	if h.GetWantsCount() == 0 {
		return false
	}
	var d agentpb.WantsDigest
	t.eachFull(m, func(name string, r *unitRec) {
		if r == nil {
			return // not listed in a full set
		}
		if ds := r.desired(); ds == unit.Loaded || ds == unit.Launched {
			d.Add(name, r.file.Hash, string(ds), r.file.Fleet.Global)
		}
	})
	return d.Same(h)
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
