package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/metrics"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/state"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// publishTerm is a term holding n units on machines machines, every one
// reported active, as a leader's memory is once a bench's units started
// (no etcd: only what buildSnapshot reads), with a loop that only answers
// reads (onLoop) until the test ends. The test's goroutine may change the
// term while no build is under way; during one, it changes it on the loop.
func publishTerm(tb testing.TB, n, machines int) *term {
	tb.Helper()
	f, err := unit.Parse("bench@.service", []byte("[Service]\nExecStart=/bin/true\n"))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	t := &term{
		e:             &Engine{cfg: Config{Now: time.Now, Metrics: metrics.New(), Registry: registry.ModeGRPC}},
		ctx:           ctx,
		cancel:        cancel,
		committer:     registry.NewCommitter(nil, clientv3.Cmp{}, registry.CommitterConfig{}),
		deg:           newDegradation(),
		events:        newEventLog(0, nil), // its goroutine outlives the test: the term never ends
		inbox:         newInboxes(),
		decisionState: &decisionState{units: map[string]*unitRec{}, machines: map[string]*machineRec{}},
	}
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.inbox.readWake:
				t.serveReads()
			}
		}
	}()
	tb.Cleanup(func() { cancel(nil); <-loopDone })
	for i := range machines {
		id := fmt.Sprintf("m%05d", i)
		m := t.machine(id)
		m.info = MachineInfo{ID: id, IP: "10.0.0.1", Metadata: map[string]string{"az": fmt.Sprint(i % 3)}}
		m.conn = newAgentConn(id)
	}
	for i := range n {
		name := fmt.Sprintf("bench@%d.service", i)
		id := fmt.Sprintf("m%05d", i%machines)
		r := newTestRec(name, f, unit.Launched, id)
		t.keep(name, nil, r)
		m := t.machines[id]
		m.addUnit(name, r)
		t.putState(m, agentStatus{Applied: f.Hash, Observed: time.Now(), Status: unit.Status{Name: name, Hash: f.Hash,
			Load: "loaded", Active: "active", Sub: "running", PID: 1000 + i, Since: time.Now()}})
	}
	return t
}

// BenchmarkBuildSnapshot is one build of the published state, at 100,000
// and at a million units on 10,000 machines, and how long a read on the
// loop, made every millisecond meanwhile, waited for the loop at most
// (loop-wait-ms): every view made (all), or the last snapshot copied
// with a fifth of the units changed since (a fifth; a start of a million
// changes about that many between two builds).
func BenchmarkBuildSnapshot(b *testing.B) {
	defer func(v bool) { verifyViews = v }(verifyViews)
	verifyViews = false // the tests' check would be measured
	for _, n := range []int{100_000, 1_000_000} {
		for _, changed := range []string{"all", "a fifth"} {
			b.Run(fmt.Sprintf("%d/%s", n, changed), func(b *testing.B) {
				t := publishTerm(b, n, 10_000)
				t.buildSnapshot()
				names := slices.Sorted(maps.Keys(t.units))
				runtime.GC()
				var maxWait time.Duration
				stop, done := make(chan struct{}), make(chan struct{})
				go func() {
					defer close(done)
					for {
						select {
						case <-stop:
							return
						case <-time.After(time.Millisecond):
						}
						start := time.Now()
						t.onLoop(func() {})
						maxWait = max(maxWait, time.Since(start))
					}
				}()
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					b.StopTimer()
					t.onLoop(func() {
						if changed == "all" {
							t.views = nil
						} else {
							for j := i % 5; j < n; j += 5 {
								t.viewChanged(names[j])
							}
						}
					})
					b.StartTimer()
					if s, _ := t.buildSnapshot(); len(s.Units) != n {
						b.Fatalf("%d units", len(s.Units))
					}
				}
				b.StopTimer()
				close(stop)
				<-done
				b.ReportMetric(float64(maxWait.Microseconds())/1000, "loop-wait-ms")
			})
		}
	}
}

// TestStateDoesNotWait: once a state exists, a read that finds it stale
// gets it at once, even while the loop is busy, and starts one rebuild,
// which later reads get; with nothing changed, no rebuild.
func TestStateDoesNotWait(t *testing.T) {
	tm := publishTerm(t, 10, 2)
	first := tm.state() // the first read waits for a build
	if first == nil || len(first.Units) != 10 {
		t.Fatalf("first state = %+v, want 10 units", first)
	}
	age := func() { // as if the interval had passed
		tm.pubMu.Lock()
		tm.pubAt = tm.pubAt.Add(-time.Minute)
		tm.pubMu.Unlock()
	}
	age()
	if got := tm.state(); got != first {
		t.Fatalf("with nothing changed, a new state was built (generation %d)", got.Generation)
	}

	tm.onLoop(func() {
		tm.units["new.service"] = newTestRec("new.service", tm.units["bench@0.service"].file, unit.Launched, "")
		tm.namesStale.Store(true)
		tm.changed()
	})
	busy, release := make(chan struct{}), make(chan struct{})
	go tm.onLoop(func() { close(busy); <-release }) // the loop busy with a pass
	<-busy
	age()
	gen := tm.e.generation.Load()
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		for range 5 {
			if got := tm.state(); got != first {
				t.Errorf("a read while the rebuild waits got generation %d, want the last state's %d", got.Generation, first.Generation)
			}
		}
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("a read of a stale state waited for the rebuild")
	}
	close(release)
	waitfor.True(t, 10*time.Second, "the rebuild a stale read started", func() bool { return tm.state() != first })
	if got := tm.state(); len(got.Units) != 11 || tm.e.generation.Load() != gen+1 {
		t.Errorf("rebuilt state has %d units, %d builds since; want 11 units from one build", len(got.Units), tm.e.generation.Load()-gen)
	}
}

// TestStateTermEnds: a build under way when the term ends gives no state
// (the term's first read gets none: the engine does not lead), and its
// call that the loop runs after the build gave up touches nothing the
// build still reads.
func TestStateTermEnds(t *testing.T) {
	tm := publishTerm(t, 10, 2)
	busy, release := make(chan struct{}), make(chan struct{})
	go tm.onLoop(func() { close(busy); <-release }) // the loop busy with a pass
	<-busy
	defer close(release)
	got := make(chan *state.Snapshot)
	go func() { got <- tm.state() }()
	waitfor.True(t, 10*time.Second, "the build's first call queued", func() bool {
		tm.inbox.mu.Lock()
		defer tm.inbox.mu.Unlock()
		return len(tm.inbox.reads) > 0
	})
	tm.cancel(ErrNotLeader)
	if s := <-got; s != nil {
		t.Fatalf("a term that ended before its first build gave a state of %d units", len(s.Units))
	}
	tm.serveReads() // the loop, not yet stopped, answers the call anyway
	if s := tm.snapshot.Load(); s != nil {
		t.Errorf("the build the term's end cut short was published (%d units)", len(s.Units))
	}
}

// TestStateShowsAckedWrite: a read that begins after a write was
// acknowledged gets a state that shows it, not the latest, older one.
func TestStateShowsAckedWrite(t *testing.T) {
	tm := publishTerm(t, 10, 2)
	first := tm.state()
	tm.onLoop(func() { // as an apply round: acknowledged, then applied, on the loop
		tm.acked.Add(1)
		tm.units["new.service"] = newTestRec("new.service", tm.units["bench@0.service"].file, unit.Launched, "")
		tm.namesStale.Store(true)
		tm.changed()
	})
	got := tm.state()
	if got == first || len(got.Units) != 11 {
		t.Fatalf("state read after an acknowledged write has %d units (generation %d, the last was %d), want 11", len(got.Units), got.Generation, first.Generation)
	}
	if again := tm.state(); again != got {
		t.Errorf("a second read built again (generation %d, want %d)", again.Generation, got.Generation)
	}
}

// TestPublishCostExcludesLoopWaits: what a build of the state waited for
// the loop is not counted in its cost, which spaces the next build (4×
// the cost): a build that waited for the loop's work seconds would
// otherwise keep the state stale four times as long.
func TestPublishCostExcludesLoopWaits(t *testing.T) {
	tm := publishTerm(t, 1000, 10)
	const hold = 300 * time.Millisecond
	start := time.Now()
	busy := make(chan struct{})
	go tm.onLoop(func() { close(busy); time.Sleep(hold) }) // the loop busy with a pass
	<-busy
	tm.pubMu.Lock()
	tm.publish()
	took := time.Since(start)
	tm.pubMu.Unlock()
	if took < hold {
		t.Fatalf("the build took %v, less than the %v the loop was busy", took, hold)
	}
	if tm.pubCost > took-hold+50*time.Millisecond {
		t.Errorf("the build's cost is %v of its %v, which waited %v for the loop: the wait is counted", tm.pubCost, took, hold)
	}
}

// TestSnapshotNames: a build lists the units by name from the last
// snapshot while none came or went, and lists them again once one did,
// also when as many came as went.
func TestSnapshotNames(t *testing.T) {
	tm := publishTerm(t, 5, 2)
	build := func() []string {
		s, _ := tm.buildSnapshot()
		var names []string
		for _, u := range s.Units {
			names = append(names, u.Name)
		}
		return names
	}
	want := []string{"bench@0.service", "bench@1.service", "bench@2.service", "bench@3.service", "bench@4.service"}
	if got := build(); !slices.Equal(got, want) {
		t.Fatalf("first build: %v; want %v", got, want)
	}
	first := tm.namesFrom
	if got := build(); !slices.Equal(got, want) || first == nil {
		t.Fatalf("second build: %v (index kept: %v); want %v", got, first != nil, want)
	}
	// One goes and one comes: as many units, other names.
	// (As setUnitFrom does it, without the rest of a term.)
	gone := tm.units["bench@1.service"]
	delete(tm.units, "bench@1.service")
	tm.units["bench@10.service"] = newTestRec("bench@10.service", gone.file, unit.Launched, gone.machine)
	tm.namesStale.Store(true)
	want = []string{"bench@0.service", "bench@10.service", "bench@2.service", "bench@3.service", "bench@4.service"}
	if got := build(); !slices.Equal(got, want) {
		t.Fatalf("after a unit went and another came: %v; want %v", got, want)
	}
}

// TestSnapshotShares: a snapshot's units say each its own machine, spec
// and status, and those that say the same share one value.
func TestSnapshotShares(t *testing.T) {
	tm := publishTerm(t, 12, 3) // bench@i on m0000(i%3)
	for i := range 12 {
		if i%2 == 1 { // every other unit on each machine: another state
			name := fmt.Sprintf("bench@%d.service", i)
			r := tm.units[name]
			tm.putState(tm.machines[r.machine], agentStatus{Observed: time.Now(), Status: unit.Status{Name: name, Hash: r.file.Hash,
				Load: "loaded", Active: "failed", Sub: "failed"}})
		}
	}
	s, _ := tm.buildSnapshot()
	seen := map[[2]string]*state.Shared{}
	for _, u := range s.Units {
		var i int
		fmt.Sscanf(u.Name, "bench@%d.service", &i)
		active := "active"
		if i%2 == 1 {
			active = "failed"
		}
		if want := fmt.Sprintf("m%05d", i%3); u.Machine != want || u.Status == nil || u.Status.Active != active || u.Spec.DesiredState != "launched" {
			t.Errorf("%s: machine %s, status %+v, spec %+v; want %s, %s", u.Name, u.Machine, u.Status, u.Spec, want, active)
		}
		k := [2]string{u.Machine, active}
		if p := seen[k]; p != nil && p != u.Shared {
			t.Errorf("%s: a Shared of its own for %v", u.Name, k)
		}
		seen[k] = u.Shared
	}
	if len(seen) != 6 {
		t.Errorf("%d distinct machine and state pairs; want 6", len(seen))
	}
}

// TestSnapshotCopies: while no unit comes or goes, a build copies the last
// snapshot and makes again the views of the units whose state changed
// since, and those only (verifyViews checks the rest against their
// records and states).
func TestSnapshotCopies(t *testing.T) {
	tm := publishTerm(t, 1000, 10)
	first, _ := tm.buildSnapshot()
	same, _ := tm.buildSnapshot()
	if &same.Units[0] == &first.Units[0] || same.Units[17].Shared != first.Units[17].Shared {
		t.Fatalf("a build with nothing changed did not copy the last snapshot's units and views")
	}
	// bench@17.service fails on its machine.
	r := tm.units["bench@17.service"]
	m := tm.machines[r.machine]
	tm.observe(m, agentStatus{Applied: r.file.Hash, Status: unit.Status{Name: "bench@17.service", Hash: r.file.Hash,
		Load: "loaded", Active: "failed", Sub: "failed"}}, time.Now())
	next, _ := tm.buildSnapshot()
	i, _ := slices.BinarySearchFunc(next.Units, "bench@17.service", func(u state.Unit, n string) int { return strings.Compare(u.Name, n) })
	if u := next.Units[i]; u.Name != "bench@17.service" || u.Status == nil || u.Status.Active != "failed" {
		t.Fatalf("after bench@17.service failed, the state shows %+v", u)
	}
	for j, u := range next.Units {
		if j != i && u.Shared != same.Units[j].Shared {
			t.Fatalf("%s's view was made again; only bench@17.service changed", u.Name)
		}
	}
	// A change that says nothing is found by the check.
	tm.putState(m, agentStatus{Status: unit.Status{Name: "bench@27.service", Load: "loaded", Active: "inactive", Sub: "dead"}}) // on the same machine
	defer func() {
		if recover() == nil {
			t.Error("a view changed without viewChanged went unnoticed")
		}
	}()
	tm.buildSnapshot()
}

// changingTerm is publishTerm with what the term's own changes (setUnit,
// observe, attachLocked) use besides.
func changingTerm(tb testing.TB, n, machines int) *term {
	tm := publishTerm(tb, n, machines)
	tm.globals, tm.followers, tm.store.files, tm.store.rawContent = map[string]struct{}{}, map[string]struct{}{}, map[string]*storedFile{}, map[string]string{}
	tm.store.protos, tm.moves, tm.hist, tm.overrides = map[*unit.File]*unit.File{}, newMoves(), map[string][]apiv1.HistoryEntry{}, map[string]map[string]*string{}
	tm.lostAfters, tm.singletons = newDurations(), newDurations()
	return tm
}

// TestSnapshotViewsFollowChanges: units move, wait with a reason, report
// states, come and go, and machines say Hello again, in random order
// through the term's own code; each build (most copy the last snapshot)
// shows every unit as its record and state say (verifyViews panics
// otherwise), and so does a build made from nothing at the end.
func TestSnapshotViewsFollowChanges(t *testing.T) {
	tm := changingTerm(t, 300, 6)
	r := rand.New(rand.NewPCG(7, 8))
	names := func() []string { return slices.Sorted(maps.Keys(tm.units)) }
	actives := []string{"active", "failed", "inactive", "activating"}
	var prev *state.Snapshot
	for step := range 3000 {
		all := names()
		name := all[r.IntN(len(all))]
		rec := tm.units[name]
		switch k := r.IntN(20); {
		case k < 6: // placed elsewhere
			to := fmt.Sprintf("m%05d", r.IntN(6))
			tm.setUnit(name, rec.with(func(r *unitRec) { r.machine, r.reason = to, "" }))
		case k < 8: // unplaced, with a reason
			why := []string{"no machine fits", "waiting for a peer"}[r.IntN(2)]
			tm.setUnit(name, rec.with(func(r *unitRec) { r.machine, r.reason = "", why }))
		case k < 15: // a state reported where it runs
			if m := tm.machines[rec.machine]; m != nil {
				tm.observe(m, agentStatus{Applied: rec.file.Hash, Status: unit.Status{Name: name, Hash: rec.file.Hash,
					Load: "loaded", Active: actives[r.IntN(len(actives))], Sub: "x"}}, time.Now())
			}
		case k < 17: // a machine says Hello again, with some of its units' states
			id := fmt.Sprintf("m%05d", r.IntN(6))
			var sts []*agentpb.UnitStatus
			for _, n := range tm.machines[id].units {
				if r.IntN(2) == 0 {
					sts = append(sts, &agentpb.UnitStatus{Name: n.name(), Hash: rec.file.Hash, Load: "loaded", Active: actives[r.IntN(len(actives))], Sub: "y"})
				}
			}
			tm.attachLocked(&agentpb.Machine{Id: id, Ip: "10.0.0.1"}, sts, tm.newConn(id, time.Now()), time.Now())
		case k < 18: // a unit goes
			if len(all) > 50 {
				tm.setUnit(name, nil)
			}
		default: // a unit comes
			n := fmt.Sprintf("new@%d.service", step)
			tm.setUnit(n, newTestRec(n, rec.file, unit.Launched, fmt.Sprintf("m%05d", r.IntN(6))))
		}
		if r.IntN(5) == 0 {
			// Published and, one in two, read whole: encoded from the
			// last one read whole, which it must equal afresh.
			s, _ := tm.buildSnapshot()
			s.Follow(prev)
			prev = s
			if r.IntN(2) == 0 {
				var want bytes.Buffer
				json.NewEncoder(&want).Encode(s.Select(state.Filter{}))
				if got := s.JSON(); !bytes.Equal(got, want.Bytes()) {
					t.Fatalf("step %d: the state encoded from the last one read differs from afresh:\n%s\nwant\n%s", step, got, want.Bytes())
				}
			}
		}
	}
	s, _ := tm.buildSnapshot()
	tm.views, tm.namesFrom = nil, nil // the next build makes every view
	fresh, _ := tm.buildSnapshot()
	if len(s.Units) != len(fresh.Units) {
		t.Fatalf("%d units copied, %d made afresh", len(s.Units), len(fresh.Units))
	}
	for i := range s.Units {
		a, b := s.Units[i], fresh.Units[i]
		if a.Name != b.Name || a.Machine != b.Machine || a.Reason != b.Reason || *a.Spec != *b.Spec || (a.Status == nil) != (b.Status == nil) || (a.Status != nil && *a.Status != *b.Status) {
			t.Fatalf("unit %d: copied %s %+v, made afresh %s %+v", i, a.Name, *a.Shared, b.Name, *b.Shared)
		}
	}
}

// TestMachineListsFollowRecords: a record made from a unit's before another
// unit left its machine (and the list moved it) takes the unit's place in
// the list when published, and every unit stays where its record says.
func TestMachineListsFollowRecords(t *testing.T) {
	tm := changingTerm(t, 10, 1)
	last := tm.units["bench@9.service"]
	if last.slot != 9 {
		t.Fatalf("bench@9 at %d, want 9", last.slot)
	}
	next := last.with(func(r *unitRec) { r.setDesired(unit.Loaded) }) // made before the move below
	tm.setUnit("bench@2.service", nil)
	if got := tm.units["bench@9.service"].slot; got != 2 {
		t.Fatalf("bench@9 at %d once bench@2 left, want 2 (the last unit takes the place of the one that left)", got)
	}
	tm.setUnit("bench@9.service", next)
	tm.checkLists()
	tm.setUnit("bench@9.service", nil) // removed from the place its record says
	tm.checkLists()
	if len(tm.machines["m00000"].units) != 8 {
		t.Errorf("machine lists %v, want 8 units", tm.machines["m00000"].units)
	}
}

// TestStatesFollowTheirUnits: a unit's state on a machine stays reported as
// the unit leaves the machine's list (moving away, destroyed) and joins it
// again, and a state reported of a unit not scheduled there is kept apart.
func TestStatesFollowTheirUnits(t *testing.T) {
	tm := changingTerm(t, 4, 1)
	m := tm.machines["m00000"]
	count := func() int {
		n := 0
		eachState(m, func(string, storedStatus) { n++ })
		return n
	}
	active := func(name string) string {
		if s, ok := tm.statusOf(m, name); ok {
			return s.Active
		}
		return "none"
	}
	r := tm.units["bench@1.service"]
	tm.setUnit("bench@1.service", r.with(func(r *unitRec) { r.machine, r.reason = "", "stopping on m00000 before it moves" }))
	if got := active("bench@1.service"); got != "active" || count() != 4 {
		t.Fatalf("after bench@1 left the list: its state %q, %d states; want active, 4", got, count())
	}
	tm.checkLists()
	tm.putState(m, agentStatus{Status: unit.Status{Name: "bench@1.service", Load: "loaded", Active: "deactivating", Sub: "stop-sigterm"}})
	tm.putState(m, agentStatus{Status: unit.Status{Name: "stray.service", Load: "loaded", Active: "active", Sub: "running"}})
	tm.setUnit("bench@1.service", tm.units["bench@1.service"].with(func(r *unitRec) { r.machine, r.reason = "m00000", "" }))
	tm.checkLists()
	if got := active("bench@1.service"); got != "deactivating" || count() != 5 {
		t.Fatalf("after bench@1 came back: its state %q, %d states; want deactivating, 5", got, count())
	}
	if _, ok := tm.dropState(m, "bench@1.service"); !ok || active("bench@1.service") != "none" {
		t.Fatalf("bench@1's state not dropped: %q", active("bench@1.service"))
	}
	tm.setUnit("bench@2.service", nil) // destroyed: its state stays until the agent says it is gone
	tm.checkLists()
	if got := active("bench@2.service"); got != "active" || active("stray.service") != "active" || count() != 4 {
		t.Fatalf("bench@2 destroyed: its state %q, stray's %q, %d states; want active, active, 4", got, active("stray.service"), count())
	}
}

// TestMachinesArriving: a new term holds its background builds while the
// machines it loaded come back: until every one has a stream, or none came
// for arrivalQuiet, or the reconnect grace is over.
func TestMachinesArriving(t *testing.T) {
	start := time.Unix(1000, 0)
	tm := &term{loadedMachines: 2, startWall: start, reconnect: time.Minute}
	at := func(d time.Duration) time.Time { return start.Add(d) }
	for _, c := range []struct {
		why     string
		streams int64
		last    time.Duration // since start; 0: none came
		now     time.Duration
		want    bool
	}{
		{"at the start", 0, 0, 0, true},
		{"none came for arrivalQuiet", 0, 0, arrivalQuiet, false},
		{"one came a moment ago", 1, arrivalQuiet, arrivalQuiet + time.Second, true},
		{"none came since for arrivalQuiet", 1, arrivalQuiet, 2 * arrivalQuiet, false},
		{"every one back", 2, time.Second, time.Second, false},
		{"the grace over", 1, time.Minute, time.Minute, false},
	} {
		tm.streams.Store(c.streams)
		tm.lastAttach.Store(0)
		if c.last > 0 {
			tm.lastAttach.Store(at(c.last).UnixNano())
		}
		if got := tm.machinesArriving(at(c.now)); got != c.want {
			t.Errorf("%s: arriving %v, want %v", c.why, got, c.want)
		}
	}
	if (&term{startWall: start, reconnect: time.Minute}).machinesArriving(start) {
		t.Error("a term that loaded no machine holding units waits for machines")
	}
}
