package engine

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
	"unique"

	clientv3 "go.etcd.io/etcd/client/v3"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/cputime"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/state"
	"github.com/flotilla/flotilla/internal/unit"
)

// SnapshotInterval is the least time between the starts of two builds of
// the published cluster state (GET /v1/state). A costly state stretches it
// to 4× the CPU time the last one cost (building it, then encoding and
// compressing it for readers; cputime.Of), so that however hard /v1/state is polled, producing
// states takes at most a quarter of a core. Readers never wait for a build
// once a state exists: a reader that finds the state stale gets it as it is
// and starts one rebuild in the background, so a polled state is at most
// this interval (or 4× the cost) plus one build old.
const SnapshotInterval = 100 * time.Millisecond

// backgroundInterval is how often the state is built with no reader asking
// (it also sets the unit gauges of /metrics), or 20× what the last build
// cost if that is longer: a million units' state takes about half a second
// to build, and rebuilt every 2 s for gauges it took a quarter of a core
// from the leader while units were starting. A state nobody polled is thus
// at most this old, plus one build, when a reader comes.
const backgroundInterval = 2 * time.Second

// State returns the latest published cluster state; nil when this engine
// does not lead. Only the first read of a term waits for a build, and a
// read that began after a write returned (Apply, PatchMachine, ...) waits
// for a state that shows the write if the latest does not, so that a
// client sees its own writes; other reads get the latest state at once,
// and one that finds it stale (older than SnapshotInterval, or 4× the last
// build, with changes since) starts a rebuild in the background for the
// reads after it.
func (e *Engine) State() *state.Snapshot {
	t, err := e.reader()
	if err != nil {
		return nil
	}
	return t.state()
}

// changed notes that readers' state is stale. Any goroutine may call it.
func (t *term) changed() { t.changes.Add(1) }

// state returns the latest snapshot, starting a rebuild in the background
// when it is stale; it waits only when there is none yet.
func (t *term) state() *state.Snapshot {
	written := t.acked.Load()
	if cur := t.snapshot.Load(); cur != nil && cur.Writes < written {
		// A write returned after this state's copy began: build one
		// that shows it (or take the one a build meanwhile made).
		t.pubMu.Lock()
		defer t.pubMu.Unlock()
		if cur = t.snapshot.Load(); cur.Writes < written {
			cur = t.publish()
		}
		return cur
	}
	if cur := t.snapshot.Load(); cur != nil {
		// A busy pubMu means a build (or a check) is under way: nothing to do.
		if t.pubMu.TryLock() {
			if !t.stale(cur, SnapshotInterval, 4) {
				t.pubMu.Unlock()
				return cur
			}
			go func() { // hands pubMu over to the build
				defer t.pubMu.Unlock()
				t.publish()
			}()
		}
		return cur
	}
	t.pubMu.Lock()
	defer t.pubMu.Unlock()
	if cur := t.snapshot.Load(); cur != nil {
		return cur // built while this one waited
	}
	return t.publish()
}

// arrivalQuiet is how long no agent's stream may have been taken before
// the machines of a new term count as back, as many as will come.
const arrivalQuiet = backgroundInterval

// machinesArriving reports whether, at now, the machines the term loaded
// are still coming back: fewer streams than machines that hold units, one
// taken (or the term begun) within arrivalQuiet, and the reconnect grace
// not over. Every agent's Hello makes its units' views stale, so a state
// built before they are back is made again after them: at a million units
// on 10,000 machines the background build a new leader made at once was 2
// of its CPU-seconds while the agents came back, and made again after.
func (t *term) machinesArriving(now time.Time) bool {
	if t.streams.Load() >= int64(t.loadedMachines) {
		return false
	}
	start := t.startWall
	last := max(start.UnixNano(), t.lastAttach.Load())
	return now.Sub(start) < t.reconnect && now.Sub(time.Unix(0, last)) < arrivalQuiet
}

// stale reports whether cur is worth rebuilding: something changed since,
// and its build began at least interval, or k× what it cost, ago. Callers
// hold pubMu.
func (t *term) stale(cur *state.Snapshot, interval time.Duration, k time.Duration) bool {
	return t.changes.Load() != t.pubSeen && time.Since(t.pubAt) >= max(interval, k*(t.pubCost+cur.EncodeCost()))
}

// publish builds and publishes a snapshot, and returns it (the last one
// if the term ended before it was built). Callers hold pubMu.
func (t *term) publish() *state.Snapshot {
	start, c := time.Now(), t.changes.Load()
	var (
		s     *state.Snapshot
		spent buildCost
	)
	// The cost is the build's work, its own and the loop's for it: the CPU
	// time it took, not its waits for the loop nor for a CPU. While 10,000
	// agents reconnected to a new leader of a million units, a build waited
	// for their Hellos most of 10 s, and four times that kept the state 40 s
	// old; and a build that took 10 s on a host whose CPUs were busy kept it
	// 40 s old again, although its work was a second's.
	cost, cpu := cputime.Of(func() { s, spent = t.buildSnapshot() })
	if s == nil {
		return t.snapshot.Load() // the term ended
	}
	if cpu {
		cost += spent.loop
	} else {
		cost -= spent.waited
	}
	t.pubCost = cost
	t.pubAt, t.pubSeen = start, c
	// Readers encode the state (once, the first that wants it whole); the
	// units unchanged since the last state read whole are copied from its
	// bytes then, not encoded again.
	s.Follow(t.snapshot.Load())
	t.snapshot.Store(s)
	return s
}

// publishLoop keeps a state built when nobody reads one, for /metrics.
// It builds none while the machines of a new term are coming back
// (machinesArriving); a reader still gets one built at once.
func (t *term) publishLoop() {
	tick := time.NewTicker(backgroundInterval / 4)
	defer tick.Stop()
	for {
		t.pubMu.Lock()
		if cur := t.snapshot.Load(); (cur == nil || t.stale(cur, backgroundInterval, 20)) && !t.machinesArriving(time.Now()) {
			t.publish()
		}
		t.pubMu.Unlock()
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// buildChunk is how many units' views a build has the loop make in one
// call: a million units' views take 0.5-1 s (more on a loaded host), and
// the loop, which answers a build's calls between its steps (onLoop),
// would otherwise be held up all of it.
const buildChunk = 4096

// buildCost is what a build cost besides its own goroutine's work: the
// CPU time the loop spent on its calls (loop), and how long it waited for
// the loop otherwise (waited).
type buildCost struct{ loop, waited time.Duration }

// onLoop runs fn on the loop (term.onLoop) for a build, adding what it
// cost there to c.
func (c *buildCost) onLoop(t *term, fn func()) error {
	at := time.Now()
	var work time.Duration
	if err := t.onLoop(func() { work, _ = cputime.Of(fn) }); err != nil {
		return err // fn may yet run, and set work
	}
	c.loop += work
	c.waited += time.Since(at) - work
	return nil
}

// buildSnapshot copies the cluster; nil if the term ended first. It reads
// the decision state only on the loop, in bounded pieces: one call takes
// the machines, the units' names and the units whose views changed since
// the last build (takeDirty), then one call a buildChunk units makes their
// views, while the build sorts, searches and copies off the loop. Each
// unit is as it was at one moment, the whole at most one build later than
// Revision says (Revision is taken first, so a client following
// /v1/events from it misses nothing). Writes is taken on the loop, where
// every acknowledged round is applied (applyPlan answers no reads between
// acknowledging a round and applying it). Units come out in name order
// from an index rebuilt only when units come or go. Callers hold pubMu,
// which keeps that index between the calls.
//
// While no unit came or went since the last build, a build copies the last
// snapshot and makes again only the views of the units that changed since
// (viewChanged): a million units' views take half a second to make, three
// map lookups a unit, and during a start of a million the builds took a
// fifth of the leader's CPU.
//
// A call the build gave up on (the term ended first) may still run on the
// loop after it returned: what the calls write is the loop's, or the
// build's own, which it reads no more once it gave up.
func (t *term) buildSnapshot() (*state.Snapshot, buildCost) {
	s := &state.Snapshot{}
	var c buildCost
	s.Term, s.Generation, s.Revision, s.Leader = t.info.Rev, t.e.generation.Add(1), t.committer.Revision(), t.info.Machine
	if since, ok := t.degradedSince(); ok {
		s.EtcdUnreachableSince = since.UTC().Format(time.RFC3339)
	}
	t.namesMu.Lock()
	prev := t.namesFrom
	t.namesMu.Unlock()
	var (
		names []string // listed now, when prev is not the index
		dirty []string
		all   bool // every view made again
	)
	if c.onLoop(t, func() {
		s.Writes = t.acked.Load()
		if s.Revision == 0 {
			s.Revision = t.rev
		}
		s.Machines = t.machineViews()
		if prev != nil && !t.namesStale.Load() && len(prev.Units) == len(t.units) {
			dirty, all = t.takeDirty()
		} else {
			prev, names = nil, t.unitNames()
			t.takeDirty()
		}
		if all = all || prev == nil || t.views == nil; all {
			t.views = &sharedViews{}
		}
	}) != nil {
		return nil, c
	}
	n, nameAt := len(names), func(i int) string { return names[i] }
	if prev != nil {
		n, nameAt = len(prev.Units), func(i int) string { return prev.Units[i].Name }
	} else {
		// The snapshot is the next build's index, not a list of its own:
		// at a million units that was 16 MB more.
		slices.Sort(names) // off the loop: a million names take a second
	}
	var ok bool
	if all {
		ok = t.makeViews(s, &c, n, nameAt)
	} else {
		ok = t.remakeViews(s, &c, prev, dirty)
	}
	if !ok {
		return nil, c
	}
	t.built(s, n)
	var (
		unplaced int
		wrong    any // what checkViews found
	)
	if c.onLoop(t, func() {
		unplaced = t.unplaced.len()
		if verifyViews && !all {
			defer func() { wrong = recover() }()
			t.checkViews(s)
		}
	}) != nil {
		return nil, c
	}
	if wrong != nil {
		panic(wrong) // the build's, not the loop's
	}
	t.countUnits(s, unplaced)
	return s, c
}

// makeViews lists in s every unit of the n that nameAt names, with its view
// made again, on the loop buildChunk units at a time. It reports false when
// the term ended meanwhile.
func (t *term) makeViews(s *state.Snapshot, c *buildCost, n int, nameAt func(int) string) bool {
	s.Units = make([]state.Unit, 0, n)
	for lo := 0; lo < n; lo += buildChunk {
		if c.onLoop(t, func() {
			for i := lo; i < min(lo+buildChunk, n); i++ {
				if r := t.units[nameAt(i)]; r != nil { // else gone since the names were listed
					s.Units = append(s.Units, state.Unit{Name: r.name(), Shared: t.view(r)})
				}
			}
		}) != nil {
			return false
		}
	}
	return true
}

// remakeViews copies prev's units into s and makes again, on the loop
// buildChunk units at a time, the views of the dirty ones (dropping those
// gone). It reports false when the term ended meanwhile.
func (t *term) remakeViews(s *state.Snapshot, c *buildCost, prev *state.Snapshot, dirty []string) bool {
	s.Units = slices.Clone(prev.Units)
	slices.Sort(dirty)
	dirty = slices.Compact(dirty)
	at := make([]int, len(dirty)) // each one's unit in s.Units; -1: none
	for j, name := range dirty {
		i, ok := slices.BinarySearchFunc(s.Units, name, func(u state.Unit, name string) int { return strings.Compare(u.Name, name) })
		if !ok {
			i = -1 // came since the index was built: the next build lists it
		}
		at[j] = i
	}
	gone := false
	for lo := 0; lo < len(dirty); lo += buildChunk {
		if c.onLoop(t, func() {
			for j := lo; j < min(lo+buildChunk, len(dirty)); j++ {
				if i := at[j]; i < 0 {
					continue
				} else if r := t.units[dirty[j]]; r != nil {
					s.Units[i].Shared = t.view(r)
				} else {
					s.Units[i].Shared, gone = nil, true
				}
			}
		}) != nil {
			return false
		}
	}
	if gone {
		s.Units = slices.DeleteFunc(s.Units, func(u state.Unit) bool { return u.Shared == nil })
	}
	return true
}

// view returns unit r's view, as the published state shows it; r is the
// record t.units holds. It runs on the loop, for a build.
func (t *term) view(r *unitRec) *state.Shared {
	sh := t.views
	v := state.Shared{Machine: r.machine, Reason: r.reason, Spec: sh.spec(r)}
	var m *machineRec
	if r.machine != "" {
		if m = t.machines[r.machine]; m != nil {
			// Its state is in its entry of the machine's list, at its
			// slot: no lookup by name (a million of them were a tenth of
			// a build).
			if st := m.units[r.slot].st; st.ok() {
				v.Status = sh.status(st.codes)
			}
		}
	}
	return sh.sharedOn(m, v)
}

// viewChanged notes that unit name's view in the published state may have
// changed: its record, or its reported state on a machine. It runs on the
// loop.
func (t *term) viewChanged(name string) {
	switch {
	case t.dirtyAll:
	case len(t.dirty) >= max(len(t.units)/2, 1024):
		t.dirty, t.dirtyAll = nil, true // the next build makes every view
	default:
		t.dirty = append(t.dirty, name)
	}
}

// takeDirty returns the units whose views changed since it was last
// called, or all: too many to list. It runs on the loop, in the build's
// call that takes the units' names, so that no change falls between the
// index a build uses and the changes it takes.
func (t *term) takeDirty() (names []string, all bool) {
	names, all = t.dirty, t.dirtyAll
	// The next list starts with the room this one needed: grown from
	// nothing for each build, lists of hundreds of thousands of names
	// were 160 MB of a million-unit start's garbage.
	t.dirty, t.dirtyAll = make([]string, 0, len(names)), false
	return names, all
}

// verifyViews, set by the engine's tests, has every build that copied the
// last snapshot compare each unit's view with one made now (checkViews): a
// change that does not call viewChanged leaves the published state wrong
// until units come or go, and this finds it.
var verifyViews = false

// checkViews panics if a unit of s, built from the last snapshot, shows a
// view other than its record and state say, unless it changed since s's
// build took the changes (then the next build makes it again). It runs on
// the loop.
func (t *term) checkViews(s *state.Snapshot) {
	t.checkLists()
	if t.dirtyAll {
		return
	}
	since := map[string]bool{}
	for _, name := range t.dirty {
		since[name] = true
	}
	for _, u := range s.Units {
		r := t.units[u.Name]
		if r == nil || since[u.Name] {
			continue
		}
		want := t.view(r)
		if u.Machine != want.Machine || u.Reason != want.Reason || *u.Spec != *want.Spec ||
			(u.Status == nil) != (want.Status == nil) || (u.Status != nil && *u.Status != *want.Status) {
			panic(fmt.Sprintf("engine: the published view of %s is %+v (spec %+v, status %+v); its record and state say %+v (spec %+v, status %+v), and nothing said it changed",
				u.Name, *u.Shared, *u.Spec, u.Status, *want, *want.Spec, want.Status))
		}
	}
}

// checkLists panics unless each machine's list holds exactly the units
// whose records place them there (not global), each at its slot, each
// record is held by its number, and the unplaced are the wanted units
// without a machine. It runs on the loop.
func (t *term) checkLists() {
	listed := 0
	for id, m := range t.machines {
		for i, e := range m.units {
			r := t.units[e.name()]
			if r == nil || r.machine != id || int(r.slot) != i || r.file.Fleet.Global || e.su != r.su {
				panic(fmt.Sprintf("engine: %s is at %d in the list of machine %s; its record says %+v", e.name(), i, id, r))
			}
			if _, ok := m.others[e.name()]; ok {
				panic(fmt.Sprintf("engine: %s has a state on machine %s both in its list and among the others", e.name(), id))
			}
		}
		listed += len(m.units)
	}
	placed, unplaced := 0, 0
	for name, r := range t.units {
		if r.machine != "" && !r.file.Fleet.Global {
			placed++
		}
		if id := r.su.ID; id <= 0 || int(id) >= len(t.recs) || t.recs[id] != r {
			panic(fmt.Sprintf("engine: %s is numbered %d, where the records by number hold another", name, id))
		}
		want := r.wanted() && r.machine == "" && !r.file.Fleet.Global
		if t.unplaced.has(r.su.ID) != want && !r.file.Fleet.Global {
			panic(fmt.Sprintf("engine: %s (number %d) unplaced %v, its record says %v", name, r.su.ID, !want, want))
		}
		if want {
			unplaced++
		}
	}
	if unplaced != t.unplaced.len() {
		panic(fmt.Sprintf("engine: %d units are unplaced, the set holds %d", unplaced, t.unplaced.len()))
	}
	if listed != placed {
		panic(fmt.Sprintf("engine: machines list %d units, %d are placed", listed, placed))
	}
}

// sharedViews hands out the values a snapshot's units share (state.Unit):
// one Spec per file hash, desired state and [X-Fleet] settings, one Status
// per reported state, one Shared per machine, reason, Spec and Status. The last one given is kept aside, as units come in
// name order and a template's instances one after another.
type sharedViews struct {
	shared   state.Sharer
	specs    map[specKey]*state.Spec
	statuses map[unique.Handle[statusCodes]]*state.Status

	lastFile    *unit.File
	lastDesired unit.DesiredState
	lastSpec    *state.Spec
	lastCodes   unique.Handle[statusCodes]
	lastStatus  *state.Status
}

type specKey struct {
	hash              string
	desired           unit.DesiredState
	global, singleton bool
	lostAfter         time.Duration
}

func (sh *sharedViews) spec(r *unitRec) *state.Spec {
	if r.file == sh.lastFile && r.desired() == sh.lastDesired && sh.lastSpec != nil {
		return sh.lastSpec
	}
	fl := &r.file.Fleet
	k := specKey{hash: r.file.Hash, desired: r.desired(), global: fl.Global, singleton: fl.Singleton, lostAfter: fl.LostAfter}
	sp := sh.specs[k]
	if sp == nil {
		if sh.specs == nil {
			sh.specs = map[specKey]*state.Spec{}
		}
		sp = &state.Spec{Hash: k.hash, DesiredState: string(k.desired), Global: k.global, Singleton: k.singleton, LostAfter: lostAfterText(k.lostAfter)}
		sh.specs[k] = sp
	}
	sh.lastFile, sh.lastDesired, sh.lastSpec = r.file, r.desired(), sp
	return sp
}

// sharedOn returns the Shared for v, a unit on machine m (nil: none).
// Units in name order go round the machines (a template's instances
// were placed that way), so the last Shared of each machine is kept on
// it (pubShared, touched only by builds' calls on the loop) and checked
// before the map: at a million units the map's lookups took a third of a
// build.
func (sh *sharedViews) sharedOn(m *machineRec, v state.Shared) *state.Shared {
	if m == nil {
		return sh.shared.Get(v)
	}
	if p := m.pubShared; p != nil && *p == v {
		return p
	}
	p := sh.shared.Get(v)
	m.pubShared = p
	return p
}

func (sh *sharedViews) status(c unique.Handle[statusCodes]) *state.Status {
	if c == sh.lastCodes && sh.lastStatus != nil {
		return sh.lastStatus
	}
	st := sh.statuses[c]
	if st == nil {
		if sh.statuses == nil {
			sh.statuses = map[unique.Handle[statusCodes]]*state.Status{}
		}
		v := c.Value()
		st = &state.Status{Load: v.load, Active: v.active, Sub: v.sub, Health: v.health}
		sh.statuses[c] = st
	}
	sh.lastCodes, sh.lastStatus = c, st
	return st
}

// unitNames lists the units' names, in no order (a build sorts them off
// the loop). It runs on the loop, for a build that cannot use the last
// snapshot as its index.
func (t *term) unitNames() []string {
	names := make([]string, 0, len(t.units))
	for name := range t.units {
		names = append(names, name)
	}
	t.namesStale.Store(false) // a unit coming or going from now on sets it again
	return names
}

// built notes snapshot s, built from n names (buildSnapshot),
// as the next build's index if it holds them all. Callers hold pubMu.
func (t *term) built(s *state.Snapshot, n int) {
	t.namesMu.Lock()
	defer t.namesMu.Unlock()
	if len(s.Units) == n {
		t.namesFrom = s
	} else {
		t.namesFrom = nil // a unit went while it was built
	}
}

// countUnits sets the unit and machine gauges from a snapshot.
func (t *term) countUnits(s *state.Snapshot, unplaced int) {
	type key struct{ desired, active, health string }
	counts := map[key]int{}
	for i := range s.Units {
		u := &s.Units[i]
		k := key{desired: u.Spec.DesiredState}
		if u.Status != nil {
			k.active, k.health = u.Status.Active, u.Status.Health
		}
		counts[k]++
	}
	m := t.e.cfg.Metrics
	m.Units.Reset()
	for k, n := range counts {
		m.Units.WithLabelValues(k.desired, k.active, k.health).Set(float64(n))
	}
	m.Unplaced.Set(float64(unplaced))
	m.MachinesUp.Set(float64(len(s.Machines)))
}

// DurableState reads the cluster's durable record from etcd as a state
// snapshot: every unit with its desired state and target machine, but no
// machines and no current states (those live only in the leader's memory).
// Daemons serve it when no leader answers.
func DurableState(ctx context.Context, cli *clientv3.Client, keys registry.Keys) (*state.Snapshot, error) {
	snap, err := registry.Load(ctx, cli, keys)
	if err != nil {
		return nil, err
	}
	s := &state.Snapshot{Revision: snap.Revision}
	views := make([]apiv1.StateUnit, 0, len(snap.Units))
	revs := make([]int64, 0, len(snap.Units)) // each view's record's revision
	at := map[string]int{}
	parsed := map[[2]string]*unit.File{} // (name's template, text) -> a parsed instance: all alike when shareable
	for _, r := range snap.Units {
		u := apiv1.StateUnit{Name: r.Name, DesiredState: r.DesiredState, Machine: snap.Schedule[r.Name]}
		k := [2]string{unit.TemplateOf(r.Name), r.File}
		f := parsed[k]
		if f == nil || !unit.IsInstance(r.Name) {
			var err error
			if f, err = unit.ParseStored(r.Name, r.File); err != nil {
				f = nil
			} else if unit.IsInstance(r.Name) && unit.TypeOf(r.Name) == "service" && !strings.Contains(r.File, "%") {
				parsed[k] = f
			}
		}
		if f != nil {
			u.Hash, u.Global = f.Hash, f.Fleet.Global
		}
		at[r.Name] = len(views)
		views = append(views, u)
		revs = append(revs, r.Rev)
	}
	// What ranges stand for: the instances whose record is older than the
	// range, the newest range first (registry.RangeRecord).
	for _, rr := range snap.Ranges { // oldest first
		r := unit.Range{From: rr.From, To: rr.To, Width: rr.Width}
		for i := range r.Len() {
			name := unit.RangeName(rr.Template, r, i)
			if j, ok := at[name]; ok {
				if revs[j] < rr.Rev {
					views[j].DesiredState = rr.DesiredState
					if rr.DesiredState == string(unit.Inactive) {
						views[j].Machine = ""
					}
				}
				continue
			}
			at[name] = len(views)
			views = append(views, apiv1.StateUnit{Name: name, DesiredState: rr.DesiredState})
			revs = append(revs, 0) // a newer range stands for it too
		}
	}
	sort.Slice(views, func(i, j int) bool { return views[i].Name < views[j].Name })
	s.Units = make([]state.Unit, len(views))
	specs := map[state.Spec]*state.Spec{}
	statuses := map[state.Status]*state.Status{}
	var shared state.Sharer
	for i, v := range views {
		u := state.NewUnit(v)
		if sp := specs[*u.Spec]; sp != nil {
			u.Spec = sp
		} else {
			specs[*u.Spec] = u.Spec
		}
		if st := u.Status; st != nil {
			if p := statuses[*st]; p != nil {
				u.Status = p
			} else {
				statuses[*st] = st
			}
		}
		u.Shared = shared.Get(*u.Shared)
		s.Units[i] = u
	}
	return s, nil
}
