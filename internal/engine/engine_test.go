package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/agent"
	"github.com/flotilla/flotilla/internal/driver/sim"
	"github.com/flotilla/flotilla/internal/election"
	"github.com/flotilla/flotilla/internal/engine"
	"github.com/flotilla/flotilla/internal/etcdtest"
	"github.com/flotilla/flotilla/internal/memetcd"
	"github.com/flotilla/flotilla/internal/metrics"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
	"github.com/flotilla/flotilla/proto/agentpb"
	dto "github.com/prometheus/client_model/go"
)

const agentTTL = 5 * time.Second

type testEngine struct {
	*engine.Engine
	name    string
	cancel  context.CancelFunc
	done    chan struct{}
	metrics *metrics.Set
}

// passes is how many reconcile passes te's engine has finished.
func (te *testEngine) passes() uint64 {
	var m dto.Metric
	if err := te.metrics.ReconcileDuration.Write(&m); err != nil {
		panic(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// waitPasses waits until te's engine, which leads, has finished two more
// reconcile passes: the second began after the call, so it saw what was
// true then. A pass runs at least every heartbeat interval.
func (te *testEngine) waitPasses(t testing.TB) {
	t.Helper()
	n := te.passes()
	waitfor.True(t, 10*time.Second, te.name+" reconciling twice more", func() bool { return te.passes() >= n+2 })
}

// newEtcd returns a client of an etcd kept in memory (internal/memetcd),
// closed when the test ends. Tests whose subject is etcd itself start a
// real one (internal/etcdtest) instead; docs/testing.md lists them.
func newEtcd(t testing.TB) *clientv3.Client {
	t.Helper()
	_, c := memetcd.Start(t)
	return c.Client
}

// startEngine runs an engine with a gRPC server on loopback.
// Options change its Config.
func startEngine(t testing.TB, cli *clientv3.Client, reg, name string, options ...func(*engine.Config)) *testEngine {
	t.Helper()
	ln := listen(t)
	// The leader as this engine's daemon would know it, for agents that ask.
	var (
		lmu    sync.Mutex
		leader election.Info
	)
	octx, ocancel := context.WithCancel(context.Background())
	t.Cleanup(ocancel)
	go func() {
		for in := range election.Observe(octx, cli, registry.Keys{}.Election()) {
			lmu.Lock()
			leader = in
			lmu.Unlock()
		}
	}()
	cfg := engine.Config{Machine: name, Client: cli, Registry: reg, ElectionTTL: time.Second, AgentTTL: agentTTL,
		GRPCAddr: ln.Addr().String(), APIAddr: "127.0.0.1:1", Logger: testLogger(t), Mono: mono(t),
		LeaderInfo: func() (election.Info, bool) {
			lmu.Lock()
			defer lmu.Unlock()
			return leader, leader.Machine != ""
		}}
	for _, o := range options {
		o(&cfg)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New()
	}
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	agentpb.RegisterEngineServer(srv, e)
	go srv.Serve(ln)
	ctx, cancel := context.WithCancel(context.Background())
	te := &testEngine{Engine: e, name: name, cancel: cancel, done: make(chan struct{}), metrics: cfg.Metrics}
	go func() { e.Run(ctx); close(te.done) }()
	t.Cleanup(func() { te.stop(); srv.Stop() })
	return te
}

// testLogger logs to the test's output under -v.
func testLogger(t testing.TB) *slog.Logger {
	if !testing.Verbose() {
		return nil
	}
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (te *testEngine) stop() {
	te.cancel()
	<-te.done
}

type testAgent struct {
	name   string
	driver *sim.Driver
	cancel context.CancelFunc
	done   chan struct{}
}

func startAgent(t *testing.T, cli *clientv3.Client, reg, name string, metadata ...string) *testAgent {
	t.Helper()
	md := map[string]string{}
	var cpu, mem int64
	var stopDelay time.Duration
	// A start takes a moment, as a process's does: in a bubble, where
	// nothing else takes time, a unit would otherwise be active since the
	// very instant the leader replaced it, not after.
	startDelay := time.Millisecond
	for _, kv := range metadata {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "cpu%": // capacity, not metadata
			cpu, _ = strconv.ParseInt(v, 10, 64)
		case "mem":
			mem, _ = unit.ParseSize(v)
		case "stop": // the sim driver's stop delay
			stopDelay, _ = time.ParseDuration(v)
		case "start": // and its start delay
			startDelay, _ = time.ParseDuration(v)
		default:
			md[k] = v
		}
	}
	a, err := agent.New(agent.Config{Machine: agent.Machine{ID: name, IP: "127.0.0.1", Metadata: md, CPUPercent: cpu, MemoryBytes: mem}, TTL: agentTTL,
		Registry: reg, Etcd: cli, Logger: testLogger(t), DialOptions: dialOptions(t), Mono: mono(t),
		Leaders: func(ctx context.Context) <-chan election.Info {
			return election.Observe(ctx, cli, registry.Keys{}.Election())
		}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := sim.New(sim.Config{Machine: name, Notify: a.Notify, StopDelay: stopDelay, StartDelay: startDelay})
	if err != nil {
		t.Fatal(err)
	}
	a.SetDriver(d)
	ctx, cancel := context.WithCancel(context.Background())
	ta := &testAgent{name: name, driver: d, cancel: cancel, done: make(chan struct{})}
	go func() { a.Run(ctx); close(ta.done) }()
	t.Cleanup(ta.stop)
	return ta
}

func (ta *testAgent) stop() {
	ta.cancel()
	<-ta.done
}

func parse(t testing.TB, name, text string) *unit.File {
	t.Helper()
	f, err := unit.Parse(name, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

const simple = "[Service]\nExecStart=/bin/true\n"

func launch(t *testing.T, n int, prefix string) []engine.Change {
	var cs []engine.Change
	for i := range n {
		name := fmt.Sprintf("%s%02d.service", prefix, i)
		cs = append(cs, engine.Change{Name: name, File: parse(t, name, simple), DesiredState: unit.Launched})
	}
	return cs
}

// allActive checks every unit is scheduled and reported active, and
// returns the units per machine.
func allActive(e *engine.Engine, want int) (map[string][]string, error) {
	us, err := e.Units(nil)
	if err != nil {
		return nil, err
	}
	if len(us) != want {
		return nil, fmt.Errorf("%d units, want %d", len(us), want)
	}
	per := map[string][]string{}
	for _, u := range us {
		if u.DesiredState != "launched" {
			continue
		}
		if u.State == nil || u.State.Active != "active" || u.CurrentState != "launched" {
			return nil, fmt.Errorf("unit %s on %q: state %+v", u.Name, u.Machine, u.State)
		}
		per[u.Machine] = append(per[u.Machine], u.Name)
	}
	return per, nil
}

// waitLeader waits until e leads.
func waitLeader(t testing.TB, e *testEngine) {
	t.Helper()
	waitfor.Until(t, 10*time.Second, e.name+" leads", func() error {
		if leaderOf(e) == nil {
			return errors.New("it does not lead")
		}
		return nil
	})
}

// waitMachines waits until the leader e hears from n machines.
func waitMachines(t *testing.T, e *engine.Engine, n int) {
	t.Helper()
	waitfor.Until(t, 10*time.Second, fmt.Sprintf("%d machines", n), func() error {
		if ms, err := e.Machines(); len(ms) != n {
			return fmt.Errorf("machines %v, %v", ms, err)
		}
		return nil
	})
}

func leaderOf(es ...*testEngine) *testEngine {
	for _, e := range es {
		if ok, _ := e.IsLeader(); ok {
			return e
		}
	}
	return nil
}

// TestEngine drives one etcd, two engines and three sim agents through
// scheduling, bad requests, a leader change and a lost machine.
func TestEngine(t *testing.T) {
	for _, reg := range []string{"grpc", "etcd"} {
		t.Run(reg, func(t *testing.T) { testEngineLifecycle(t, reg) })
	}
}

func testEngineLifecycle(t *testing.T, reg string) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	e1 := startEngine(t, cli, reg, "e1")
	waitLeader(t, e1)
	e2 := startEngine(t, cli, reg, "e2")
	agents := []*testAgent{startAgent(t, cli, reg, "m1"), startAgent(t, cli, reg, "m2"), startAgent(t, cli, reg, "m3")}
	waitMachines(t, e1.Engine, 3)

	ctx := context.Background()
	if err := e2.Apply(ctx, launch(t, 30, "web")); !errors.Is(err, engine.ErrNotLeader) {
		t.Fatalf("Apply on the standby = %v, want ErrNotLeader", err)
	}
	if err := e1.Apply(ctx, launch(t, 30, "web")); err != nil {
		t.Fatal(err)
	}
	var per map[string][]string
	waitfor.Until(t, 10*time.Second, "30 units active", func() (err error) { per, err = allActive(e1.Engine, 30); return err })
	for m, us := range per {
		if len(us) != 10 {
			t.Errorf("machine %s runs %d units, want 10", m, len(us))
		}
	}
	// One machine's unit states are the whole list's for that machine.
	all, err := e1.UnitStates("", nil)
	if err != nil || len(all) != 30 {
		t.Fatalf("UnitStates() = %d states, %v; want 30", len(all), err)
	}
	for m := range per {
		var want []apiv1.UnitState
		for _, st := range all {
			if st.Machine == m {
				want = append(want, st)
			}
		}
		if got, err := e1.UnitStates(m, nil); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("UnitStates(%s) = %v, %v; want %v", m, got, err, want)
		}
	}
	if got, err := e1.UnitStates("nowhere", nil); err != nil || len(got) != 0 {
		t.Errorf("UnitStates(nowhere) = %v, %v; want none", got, err)
	}
	snap, err := registry.Load(ctx, cli, registry.Keys{})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Units) != 30 || len(snap.Schedule) != 30 {
		t.Errorf("etcd holds %d units and %d schedule entries, want 30 and 30", len(snap.Units), len(snap.Schedule))
	}

	// Bad requests change nothing, and say what is wrong.
	other := parse(t, "web00.service", "[Service]\nExecStart=/bin/false\n")
	for _, tc := range []struct {
		changes []engine.Change
		want    error
		msg     string
	}{
		{[]engine.Change{{Name: "web00.service", File: other}}, engine.ErrConflict, "already exists with different contents"},
		{[]engine.Change{{Name: "nope.service", DesiredState: unit.Launched}}, engine.ErrNotFound, "nope.service does not exist"},
		{[]engine.Change{{Name: "new.service", File: parse(t, "new.service", simple)}, {Name: "web01.service", File: other}}, engine.ErrConflict, "web01.service"},
		{[]engine.Change{{Name: "t@.service", File: parse(t, "t@.service", simple), DesiredState: unit.Launched}}, engine.ErrInvalid, "template"},
	} {
		err := e1.Apply(ctx, tc.changes)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("Apply(%v) = %v, want %v mentioning %q", tc.changes[0].Name, err, tc.want, tc.msg)
		}
	}
	if _, err := e1.Unit("new.service"); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("a rejected batch left new.service behind (Unit = %v)", err)
	}

	// A template's instance is created by starting it.
	if err := e1.Apply(ctx, []engine.Change{{Name: "t@.service", File: parse(t, "t@.service", simple)}}); err != nil {
		t.Fatal(err)
	}
	if err := e1.Apply(ctx, []engine.Change{{Name: "t@1.service", DesiredState: unit.Launched}}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "t@1 active", func() error { _, err := allActive(e1.Engine, 32); return err })

	// Leader change: e1 stops (resigning), e2 leads; no unit restarts.
	since := map[string]time.Time{}
	for _, a := range agents {
		for _, s := range a.driver.States() {
			since[s.Name] = s.Since
		}
	}
	e1.stop()
	waitfor.Until(t, 10*time.Second, "e2 leads", func() error {
		if leaderOf(e2) == nil {
			return errors.New("e2 does not lead")
		}
		return nil
	})
	waitfor.Until(t, 10*time.Second, "agents report to e2", func() error { _, err := allActive(e2.Engine, 32); return err })
	for _, a := range agents {
		for _, s := range a.driver.States() {
			if !s.Since.Equal(since[s.Name]) {
				t.Errorf("unit %s on %s changed state during the leader change (since %v -> %v)", s.Name, a.name, since[s.Name], s.Since)
			}
		}
	}

	// Lost machine: m3's agent stops; after the agent TTL its units run on m1 and m2.
	lostAt := time.Now()
	agents[2].stop()
	waitfor.Until(t, agentTTL+10*time.Second, "m3's units moved", func() error {
		per, err := allActive(e2.Engine, 32)
		if err != nil {
			return err
		}
		if len(per["m3"]) > 0 {
			return fmt.Errorf("m3 still has %v", per["m3"])
		}
		return nil
	})
	if d := time.Since(lostAt); d < agentTTL {
		t.Errorf("units moved %v after the machine was lost, before the agent TTL %v", d, agentTTL)
	}
	names := func(d *sim.Driver) []string {
		var out []string
		for _, s := range d.States() {
			out = append(out, s.Name)
		}
		sort.Strings(out)
		return out
	}
	if n := len(names(agents[0].driver)) + len(names(agents[1].driver)); n != 31 {
		t.Errorf("m1 and m2 run %d units, want 31", n)
	}

	// Destroy removes units from agents and etcd.
	var destroy []engine.Change
	us, _ := e2.Units(nil)
	for _, u := range us {
		destroy = append(destroy, engine.Change{Name: u.Name, Destroy: true})
	}
	if err := e2.Apply(ctx, destroy); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "agents empty", func() error {
		for _, a := range agents[:2] {
			if n := names(a.driver); len(n) > 0 {
				return fmt.Errorf("%s still has %v", a.name, n)
			}
		}
		return nil
	})
	snap, _ = registry.Load(ctx, cli, registry.Keys{})
	if len(snap.Units) != 0 || len(snap.Schedule) != 0 {
		t.Errorf("etcd still holds %d units, %d schedule entries", len(snap.Units), len(snap.Schedule))
	}
}

// TestEngineReservedMetadata: once a key is reserved, what machines claim
// for it no longer counts (a unit placed by the claim leaves); only the
// value an admin sets through the API does.
func TestEngineReservedMetadata(t *testing.T) { inBubble(t, testEngineReservedMetadata) }

func testEngineReservedMetadata(t *testing.T) {
	cli := newEtcd(t)
	e := startEngine(t, cli, "grpc", "e1")
	startAgent(t, cli, "grpc", "m1", "disk=ssd")
	startAgent(t, cli, "grpc", "m2", "disk=ssd")
	waitMachines(t, e.Engine, 2)
	ctx := context.Background()
	db := parse(t, "db.service", simple+"[X-Fleet]\nMachineMetadata=disk=ssd\n")
	if err := e.Apply(ctx, []engine.Change{{Name: "db.service", File: db, DesiredState: unit.Launched}}); err != nil {
		t.Fatal(err)
	}
	on := func(want string) func() error {
		return func() error {
			u, err := e.Unit("db.service")
			if err != nil || u.Machine != want || want != "" && (u.State == nil || u.State.Active != "active") {
				return fmt.Errorf("db.service on %q (%+v), %v", u.Machine, u.State, err)
			}
			return nil
		}
	}
	waitfor.Until(t, 10*time.Second, "db placed by the machines' claims", func() error {
		if on("m1")() != nil && on("m2")() != nil {
			return errors.New("db.service not active on m1 or m2")
		}
		return nil
	})
	if err := e.SetScheduler(ctx, apiv1.Scheduler{ReservedMetadata: []string{"bad key"}}); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("SetScheduler(reserved %q) = %v, want ErrInvalid", "bad key", err)
	}
	if err := e.SetScheduler(ctx, apiv1.Scheduler{ReservedMetadata: []string{"disk"}}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "db unplaced: no machine's own disk=ssd counts", on(""))
	ssd := "ssd"
	if err := e.PatchMachine(ctx, "m2", map[string]*string{"disk": &ssd}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "db on m2, where an admin set disk=ssd", on("m2"))
	if s, err := e.Scheduler(); err != nil || !slices.Equal(s.ReservedMetadata, []string{"disk"}) {
		t.Errorf("Scheduler() = %+v, %v; want reservedMetadata [disk]", s, err)
	}
}

// TestEngineMetadataPatch: a metadata change through the API is durable and
// moves a unit whose constraint no longer holds; concurrent requests on one
// unit all succeed.
func TestEngineMetadataPatch(t *testing.T) {
	for _, reg := range []string{"grpc", "etcd"} {
		t.Run(reg, bubbled(func(t *testing.T) { testEngineMetadataPatch(t, reg) }))
	}
}

func testEngineMetadataPatch(t *testing.T, reg string) {
	cli := newEtcd(t)
	e := startEngine(t, cli, reg, "e1")
	startAgent(t, cli, reg, "m1", "disk=ssd")
	startAgent(t, cli, reg, "m2", "disk=hdd")
	waitMachines(t, e.Engine, 2)
	ctx := context.Background()
	db := parse(t, "db.service", simple+"[X-Fleet]\nMachineMetadata=disk=ssd\n")
	if err := e.Apply(ctx, []engine.Change{{Name: "db.service", File: db}}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- e.Apply(ctx, []engine.Change{{Name: "db.service", DesiredState: unit.Launched}})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent start: %v", err)
		}
	}
	where := func() (string, error) {
		u, err := e.Unit("db.service")
		if err != nil {
			return "", err
		}
		if u.State == nil || u.State.Active != "active" {
			return "", fmt.Errorf("db.service on %q is %+v", u.Machine, u.State)
		}
		return u.Machine, nil
	}
	waitfor.Until(t, 10*time.Second, "db on m1", func() error {
		if m, err := where(); err != nil || m != "m1" {
			return fmt.Errorf("on %q: %v", m, err)
		}
		return nil
	})
	hdd, ssd := "hdd", "ssd"
	if err := e.PatchMachine(ctx, "m1", map[string]*string{"disk": &hdd}); err != nil {
		t.Fatal(err)
	}
	if err := e.PatchMachine(ctx, "m2", map[string]*string{"disk": &ssd}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "db moved to m2", func() error {
		if m, err := where(); err != nil || m != "m2" {
			return fmt.Errorf("on %q: %v", m, err)
		}
		return nil
	})
	snap, err := registry.Load(ctx, cli, registry.Keys{})
	if err != nil {
		t.Fatal(err)
	}
	if v := snap.Machines["m2"].Metadata["disk"]; v == nil || *v != "ssd" {
		t.Errorf("etcd holds m2's metadata %v, want disk=ssd", snap.Machines["m2"].Metadata)
	}
	if err := e.PatchMachine(ctx, "m9", map[string]*string{"disk": &ssd}); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("PatchMachine(m9) = %v, want ErrNotFound", err)
	}
	if err := e.PatchMachine(ctx, "m1", map[string]*string{"bad key": &ssd}); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("PatchMachine with a bad key = %v, want ErrInvalid", err)
	}
}

// TestEngineGlobalUnits: a global unit runs on every machine whose metadata
// matches, follows metadata changes, and survives a leader change without
// a restart.
func TestEngineGlobalUnits(t *testing.T) {
	for _, reg := range []string{"grpc", "etcd"} {
		t.Run(reg, bubbled(func(t *testing.T) { testEngineGlobalUnits(t, reg) }))
	}
}

func testEngineGlobalUnits(t *testing.T, reg string) {
	cli := newEtcd(t)
	e1 := startEngine(t, cli, reg, "e1")
	waitLeader(t, e1)
	e2 := startEngine(t, cli, reg, "e2")
	a1 := startAgent(t, cli, reg, "m1", "role=web")
	a2 := startAgent(t, cli, reg, "m2", "role=web")
	a3 := startAgent(t, cli, reg, "m3", "role=db")
	waitMachines(t, e1.Engine, 3)
	ctx := context.Background()
	g := parse(t, "mon.service", simple+"[X-Fleet]\nGlobal=true\nMachineMetadata=role=web\n")
	if err := e1.Apply(ctx, []engine.Change{{Name: "mon.service", File: g, DesiredState: unit.Launched}}); err != nil {
		t.Fatal(err)
	}
	runs := func(a *testAgent) bool {
		for _, s := range a.driver.States() {
			if s.Name == "mon.service" && s.Active == "active" {
				return true
			}
		}
		return false
	}
	where := func() string {
		return fmt.Sprint(runs(a1), runs(a2), runs(a3))
	}
	waitfor.Until(t, 10*time.Second, "mon on the web machines", func() error {
		if got := where(); got != "true true false" {
			return fmt.Errorf("mon runs on m1 m2 m3: %s", got)
		}
		u, err := e1.Unit("mon.service")
		if err != nil || u.CurrentState != "launched" {
			return fmt.Errorf("unit %+v, %v", u, err)
		}
		return nil
	})
	web := "web"
	if err := e1.PatchMachine(ctx, "m3", map[string]*string{"role": &web}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "mon on m3 too", func() error {
		if got := where(); got != "true true true" {
			return fmt.Errorf("mon runs on m1 m2 m3: %s", got)
		}
		return nil
	})
	since := a1.driver.States()[0].Since
	e1.stop()
	waitfor.Until(t, 10*time.Second, "e2 leads with mon everywhere", func() error {
		if leaderOf(e2) == nil {
			return errors.New("e2 does not lead")
		}
		u, err := e2.Unit("mon.service")
		if err != nil || u.CurrentState != "launched" {
			return fmt.Errorf("unit %+v, %v", u, err)
		}
		return nil
	})
	e2.waitPasses(t) // had the new leader anything to change, it has
	if s := a1.driver.States(); len(s) != 1 || !s[0].Since.Equal(since) {
		t.Errorf("mon on m1 after the leader change: %+v, want unchanged since %v", s, since)
	}
	if err := e2.Apply(ctx, []engine.Change{{Name: "mon.service", Destroy: true}}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "mon gone", func() error {
		if got := where(); got != "false false false" {
			return fmt.Errorf("mon runs on m1 m2 m3: %s", got)
		}
		return nil
	})
}

// TestEnginePolicy: units are placed only where they fit; what does not fit
// says why; bin-packing and dominant resource fairness between roles follow
// the policy set through the engine.
func TestEnginePolicy(t *testing.T) { inBubble(t, testEnginePolicy) }

func testEnginePolicy(t *testing.T) {
	reg := "grpc"
	cli := newEtcd(t)
	e := startEngine(t, cli, reg, "e1")
	startAgent(t, cli, reg, "m1", "cpu%=200", "mem=1G")
	startAgent(t, cli, reg, "m2", "cpu%=200", "mem=1G")
	waitMachines(t, e.Engine, 2)
	ctx := context.Background()
	withNeeds := func(prefix string, n int, needs string) []engine.Change {
		var cs []engine.Change
		for i := range n {
			name := fmt.Sprintf("%s%d.service", prefix, i)
			cs = append(cs, engine.Change{Name: name, File: parse(t, name, "[Service]\nExecStart=/bin/true\n"+needs), DesiredState: unit.Launched})
		}
		return cs
	}
	placed := func() map[string]string {
		us, _ := e.Units(nil)
		out := map[string]string{}
		for _, u := range us {
			out[u.Name] = u.Machine
			if u.Machine == "" {
				out[u.Name] = "reason: " + u.Reason
			}
		}
		return out
	}
	if err := e.Apply(ctx, withNeeds("cpu", 5, "CPUQuota=100%\n")); err != nil {
		t.Fatal(err)
	}
	if err := e.Apply(ctx, withNeeds("big", 1, "MemoryMax=2G\n")); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "four cpu units placed, the rest unplaced with reasons", func() error {
		p := placed()
		n := 0
		for i := range 5 {
			if !strings.HasPrefix(p[fmt.Sprintf("cpu%d.service", i)], "reason") {
				n++
			}
		}
		if n != 4 {
			return fmt.Errorf("%d cpu units placed, want 4: %v", n, p)
		}
		if !strings.Contains(p["big0.service"], "memory") {
			return fmt.Errorf("big0.service: %q, want a reason about memory", p["big0.service"])
		}
		return nil
	})
	ms, _ := e.Machines()
	for _, m := range ms {
		if m.Free.CPUPercent != 0 || m.Capacity.CPUPercent != 200 {
			t.Errorf("machine %s: capacity %+v free %+v, want 200%% CPU all used", m.ID, m.Capacity, m.Free)
		}
	}
	var destroy []engine.Change
	for name := range placed() {
		destroy = append(destroy, engine.Change{Name: name, Destroy: true})
	}
	if err := e.Apply(ctx, destroy); err != nil {
		t.Fatal(err)
	}

	// Bin-packing fills one machine before the next.
	if err := e.SetScheduler(ctx, apiv1.Scheduler{Placement: "binpack"}); err != nil {
		t.Fatal(err)
	}
	if err := e.SetScheduler(ctx, apiv1.Scheduler{Placement: "tetris"}); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("SetScheduler(tetris) = %v, want ErrInvalid", err)
	}
	if err := e.Apply(ctx, withNeeds("small", 2, "CPUQuota=50%\n")); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "both small units on one machine", func() error {
		p := placed()
		if p["small0.service"] == "" || p["small0.service"] != p["small1.service"] || strings.HasPrefix(p["small0.service"], "reason") {
			return fmt.Errorf("placement %v", p)
		}
		return nil
	})

	// Two roles competing for what is left share it by dominant resource.
	if err := e.SetScheduler(ctx, apiv1.Scheduler{Placement: "spread"}); err != nil {
		t.Fatal(err)
	}
	batch := append(withNeeds("a", 6, "CPUQuota=50%\n[X-Fleet]\nRole=a\n"), withNeeds("b", 6, "CPUQuota=50%\n[X-Fleet]\nRole=b\n")...)
	if err := e.Apply(ctx, batch); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "roles share", func() error {
		p := placed()
		na, nb := 0, 0
		for name, m := range p {
			if strings.HasPrefix(m, "reason") {
				continue
			}
			switch name[0] {
			case 'a':
				na++
			case 'b':
				nb++
			}
		}
		if na != 3 || nb != 3 {
			return fmt.Errorf("role a placed %d, role b %d; want 3 and 3 (6 half-CPU slots left): %v", na, nb, p)
		}
		return nil
	})
	sc, err := e.Scheduler()
	if err != nil || sc.Placement != "spread" || sc.Shares["a"] != sc.Shares["b"] || sc.Shares["a"] == 0 {
		t.Errorf("Scheduler() = %+v, %v; want spread with equal shares for a and b", sc, err)
	}
	snap, _ := registry.Load(ctx, cli, registry.Keys{})
	if !strings.Contains(string(snap.SchedulerConfig), `"placement":"spread"`) {
		t.Errorf("stored policy = %s", snap.SchedulerConfig)
	}
}

// TestEngineMoveWaitsForStop: a unit moving between two live machines (its
// machine's metadata changed) starts on the new one only once the old one
// has stopped it, so it never runs on both.
func TestEngineMoveWaitsForStop(t *testing.T) { inBubble(t, testEngineMoveWaitsForStop) }

func testEngineMoveWaitsForStop(t *testing.T) {
	reg := "grpc"
	cli := newEtcd(t)
	e := startEngine(t, cli, reg, "e1")
	a1 := startAgent(t, cli, reg, "m1", "disk=ssd", "stop=700ms")
	a2 := startAgent(t, cli, reg, "m2", "disk=hdd", "stop=700ms")
	waitMachines(t, e.Engine, 2)
	ctx := context.Background()
	running := startSSDUnit(t, e.Engine, a1)
	hdd, ssd := "hdd", "ssd"
	if err := e.PatchMachine(ctx, "m1", map[string]*string{"disk": &hdd}); err != nil {
		t.Fatal(err)
	}
	if err := e.PatchMachine(ctx, "m2", map[string]*string{"disk": &ssd}); err != nil {
		t.Fatal(err)
	}
	sawReason := false
	waitfor.Watch(t, 10*time.Second, "db.service to move to m2", func() error {
		// m2 first: m1's copy runs from before the move until it stops,
		// once, so running there after m2's was seen running means both
		// ran at once. (Read m1 first, a test preempted between the two
		// reads could see m1's copy before it stopped and m2's after it
		// started.)
		r2 := running(a2)
		r1 := running(a1)
		if r1 && r2 {
			t.Fatal("db.service runs on m1 and m2 at once")
		}
		if u, _ := e.Unit("db.service"); strings.Contains(u.Reason, "stopping on m1") {
			sawReason = true
		}
		if r2 && !r1 {
			return nil
		}
		return fmt.Errorf("running on m1 %v, on m2 %v", r1, r2)
	})
	if !sawReason {
		t.Error("while m1 stopped db.service, its reason never said so")
	}
}

// TestEngineMoveSurvivesLeaderChange: a unit moving off a machine whose copy
// takes long to stop is not started elsewhere by a new leader before that
// copy has stopped: the move is in etcd, not only in the old leader's memory.
func TestEngineMoveSurvivesLeaderChange(t *testing.T) {
	for _, reg := range []string{"grpc", "etcd"} {
		t.Run(reg, bubbled(func(t *testing.T) { testEngineMoveSurvivesLeaderChange(t, reg) }))
	}
}

func testEngineMoveSurvivesLeaderChange(t *testing.T, reg string) {
	cli := newEtcd(t)
	e1 := startEngine(t, cli, reg, "e1")
	waitLeader(t, e1)
	e2 := startEngine(t, cli, reg, "e2")
	a1 := startAgent(t, cli, reg, "m1", "disk=ssd", "stop=3s")
	a2 := startAgent(t, cli, reg, "m2", "disk=hdd", "stop=3s")
	waitMachines(t, e1.Engine, 2)
	ctx := context.Background()
	running := startSSDUnit(t, e1.Engine, a1)
	if reg == "etcd" {
		// An agent of the etcd registry has no heartbeat by which a move
		// can tell that its machine, silent about a unit, does not run it
		// (planInput.settled): the unit moved is one the leader knows runs.
		waitfor.Until(t, 10*time.Second, "the leader to hear db runs on m1", func() error {
			if u, err := e1.Unit("db.service"); err != nil || u.State == nil || u.State.Active != "active" {
				return fmt.Errorf("%+v, %v", u.State, err)
			}
			return nil
		})
	}
	hdd, ssd := "hdd", "ssd"
	if err := e1.PatchMachine(ctx, "m2", map[string]*string{"disk": &ssd}); err != nil {
		t.Fatal(err)
	}
	if err := e1.PatchMachine(ctx, "m1", map[string]*string{"disk": &hdd}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 5*time.Second, "the move to be decided", func() error {
		if u, _ := e1.Unit("db.service"); !strings.Contains(u.Reason, "stopping on m1") {
			return fmt.Errorf("reason %q", u.Reason)
		}
		return nil
	})
	e1.stop() // resigns: e2 leads at once, while m1 still stops db
	waitfor.Watch(t, 15*time.Second, "db.service to move to m2 under the new leader", func() error {
		r2 := running(a2) // m2 first, as in TestEngineMoveWaitsForStop
		r1 := running(a1)
		if r1 && r2 {
			t.Fatal("db.service runs on m1 and m2 at once after the leader changed")
		}
		if r2 && !r1 {
			return nil
		}
		return fmt.Errorf("running on m1 %v, on m2 %v", r1, r2)
	})
	// The move is forgotten once done.
	waitfor.Until(t, 5*time.Second, "the move's key to go", func() error {
		resp, err := cli.Get(ctx, registry.Keys{}.Moves(), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count != 0 {
			return fmt.Errorf("%d moves in etcd, %v", resp.Count, err)
		}
		return nil
	})
	_ = e2
}

// TestEngineAgentFindsLeaderWithoutEtcd: an agent that cannot learn of a
// new leader from etcd (its machine is cut off from etcd, not from the
// daemons) finds it by asking the engines its old leader named, and keeps
// its units: nothing restarts. The agent tells its leader quiet on its
// monotonic clock, which follows the bubble's time (mono).
func TestEngineAgentFindsLeaderWithoutEtcd(t *testing.T) {
	inBubble(t, testEngineAgentFindsLeaderWithoutEtcd)
}

func testEngineAgentFindsLeaderWithoutEtcd(t *testing.T) {
	cli := newEtcd(t)
	e1 := startEngine(t, cli, "grpc", "e1")
	waitLeader(t, e1)
	e2 := startEngine(t, cli, "grpc", "e2")
	// The agent's view of etcd: the first leader, then nothing.
	first, _, _, err := election.Current(context.Background(), cli, registry.Keys{}.Election())
	if err != nil {
		t.Fatal(err)
	}
	heard := &enginesHeard{}
	d := runHeardAgent(t, heard, func(ctx context.Context) <-chan election.Info {
		ch := make(chan election.Info, 1)
		ch <- first
		go func() { <-ctx.Done(); close(ch) }()
		return ch
	})
	waitMachines(t, e1.Engine, 1)
	if err := e1.Apply(context.Background(), launch(t, 2, "web")); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "2 units active", func() error { _, err := allActive(e1.Engine, 2); return err })
	// Let the leader tell the agent where the engines are (both campaign).
	waitfor.Until(t, 10*time.Second, "e2 campaigning", func() error {
		cs, _, err := election.Candidates(context.Background(), cli, registry.Keys{}.Election())
		if err != nil || len(cs) != 2 {
			return fmt.Errorf("candidates %v, %v", cs, err)
		}
		return nil
	})
	waitfor.True(t, 10*time.Second, "the agent told of both engines", func() bool { return heard.most.Load() >= 2 })
	pids := map[string]int{}
	for _, s := range d.States() {
		pids[s.Name] = s.PID
	}
	e1.stop() // resigns; e2 leads; the agent's etcd view still says e1
	waitLeader(t, e2)
	waitfor.Until(t, 15*time.Second, "the agent at e2", func() error {
		_, err := allActive(e2.Engine, 2)
		return err
	})
	for _, s := range d.States() {
		if s.PID != pids[s.Name] || s.Active != "active" {
			t.Errorf("%s: pid %d, %s; want pid %d, active (not restarted)", s.Name, s.PID, s.Active, pids[s.Name])
		}
	}
}

// TestEngineNewLeaderSendsNoSet: an agent that comes to a new leader
// holding the set the leader would send it is told the set is unchanged
// (its Hello's sum matches the leader's, each summed on its side), not
// sent it again; its units keep running.
func TestEngineNewLeaderSendsNoSet(t *testing.T) { inBubble(t, testEngineNewLeaderSendsNoSet) }

func testEngineNewLeaderSendsNoSet(t *testing.T) {
	cli := newEtcd(t)
	e1 := startEngine(t, cli, "grpc", "e1")
	waitLeader(t, e1)
	e2 := startEngine(t, cli, "grpc", "e2")
	heard := &enginesHeard{}
	d := runHeardAgent(t, heard, func(ctx context.Context) <-chan election.Info {
		return election.Observe(ctx, cli, registry.Keys{}.Election())
	})
	waitMachines(t, e1.Engine, 1)
	changes := launch(t, 2, "web")
	changes = append(changes, engine.Change{Name: "db.service", File: parse(t, "db.service", simple), DesiredState: unit.Loaded})
	if err := e1.Apply(context.Background(), changes); err != nil {
		t.Fatal(err)
	}
	running := func() error {
		states := map[string]string{}
		for _, s := range d.States() {
			states[s.Name] = s.Active
		}
		if got := fmt.Sprint(states); got != "map[db.service:inactive web00.service:active web01.service:active]" {
			return errors.New(got)
		}
		return nil
	}
	waitfor.Until(t, 10*time.Second, "the units loaded and started", running)
	pids := map[string]int{}
	for _, s := range d.States() {
		pids[s.Name] = s.PID
	}
	before := len(heard.fullSets())
	e1.stop() // resigns; e2 leads
	waitLeader(t, e2)
	waitfor.Until(t, 15*time.Second, "the agent at e2", func() error {
		if len(heard.fullSets()) == before {
			return errors.New("no full set from e2 yet")
		}
		return nil
	})
	if sets := heard.fullSets(); !sets[before].Unchanged || len(sets[before].Units) != 0 {
		t.Fatalf("the new leader's full set: unchanged %v, %d units; want it told unchanged, no unit sent", sets[before].Unchanged, len(sets[before].Units))
	}
	waitfor.Until(t, 15*time.Second, "the units as they were under e2", running)
	for _, s := range d.States() {
		if s.PID != pids[s.Name] {
			t.Errorf("%s: pid %d, was %d: restarted", s.Name, s.PID, pids[s.Name])
		}
	}
}

// startSSDUnit launches db.service, which needs disk=ssd, waits until it
// runs on a (the one ssd machine), and returns a probe of whether an agent
// runs it.
func startSSDUnit(t *testing.T, e *engine.Engine, a *testAgent) func(*testAgent) bool {
	t.Helper()
	db := parse(t, "db.service", simple+"[X-Fleet]\nMachineMetadata=disk=ssd\n")
	if err := e.Apply(context.Background(), []engine.Change{{Name: "db.service", File: db, DesiredState: unit.Launched}}); err != nil {
		t.Fatal(err)
	}
	running := func(a *testAgent) bool {
		for _, s := range a.driver.States() {
			if s.Name == "db.service" && s.Running() {
				return true
			}
		}
		return false
	}
	waitfor.Until(t, 10*time.Second, "db on "+a.name, func() error {
		if !running(a) {
			return errors.New("not running on " + a.name)
		}
		return nil
	})
	return running
}

// TestEngineMachineBackChanged: a machine whose agent went away long enough
// for a pass to drop it from the scheduler, and came back (well within the
// agent TTL) with other metadata, has its units checked: a unit that no
// longer fits there moves, as it would had the metadata changed while the
// machine stayed. (They were placed back unchecked, and stayed for good.)
func TestEngineMachineBackChanged(t *testing.T) { inBubble(t, testEngineMachineBackChanged) }

func testEngineMachineBackChanged(t *testing.T) {
	cli := newEtcd(t)
	e := startEngine(t, cli, "grpc", "e1")
	waitLeader(t, e)
	a1 := startAgent(t, cli, "grpc", "m1", "disk=ssd")
	waitMachines(t, e.Engine, 1)
	running := startSSDUnit(t, e.Engine, a1)
	a2 := startAgent(t, cli, "grpc", "m2", "disk=ssd")
	waitMachines(t, e.Engine, 2)
	a1.stop() // its daemon restarts, with other metadata
	waitMachines(t, e.Engine, 1)
	e.waitPasses(t) // a pass drops m1 from the scheduler
	a1 = startAgent(t, cli, "grpc", "m1", "disk=hdd")
	waitfor.Until(t, agentTTL/2, "db.service to move to m2", func() error {
		if running(a1) || !running(a2) {
			return fmt.Errorf("db runs on m1: %v, on m2: %v", running(a1), running(a2))
		}
		if u, _ := e.Unit("db.service"); u.Machine != "m2" {
			return fmt.Errorf("db is on %q", u.Machine)
		}
		return nil
	})
}

// runHeardAgent runs, until the test ends, machine m1's agent with the sim
// driver, learning the leader from leaders, its streams' messages seen by
// heard, and returns its driver.
func runHeardAgent(t *testing.T, heard *enginesHeard, leaders func(context.Context) <-chan election.Info) *sim.Driver {
	t.Helper()
	a, err := agent.New(agent.Config{Machine: agent.Machine{ID: "m1", IP: "127.0.0.1"}, TTL: agentTTL, Logger: testLogger(t),
		DialOptions: dialOptions(t, grpc.WithStreamInterceptor(heard.intercept)), Mono: mono(t), Leaders: leaders})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := sim.New(sim.Config{Machine: "m1", Notify: a.Notify})
	a.SetDriver(d)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return d
}

// enginesHeard is a gRPC stream interceptor for an agent that records the
// most engines a message on its streams named.
type enginesHeard struct {
	most atomic.Int64
	mu   sync.Mutex
	full []*agentpb.Assignments // the full sets received, in order
}

func (h *enginesHeard) fullSets() []*agentpb.Assignments {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.full)
}

func (h *enginesHeard) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &enginesHeardStream{ClientStream: cs, h: h}, nil
}

type enginesHeardStream struct {
	grpc.ClientStream
	h *enginesHeard
}

func (s *enginesHeardStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if msg, ok := m.(*agentpb.EngineMessage); ok && err == nil {
		if as := msg.GetAssignments(); as.GetFull() {
			s.h.mu.Lock()
			s.h.full = append(s.h.full, as)
			s.h.mu.Unlock()
		}
		for n := int64(len(msg.Engines)); ; {
			cur := s.h.most.Load()
			if n <= cur || s.h.most.CompareAndSwap(cur, n) {
				break
			}
		}
	}
	return err
}

// TestEnginePlanNewUnit: a plan of a unit the leader does not hold yet
// (no number for the scheduler) says where it would start, and changes
// nothing.
func TestEnginePlanNewUnit(t *testing.T) { inBubble(t, testEnginePlanNewUnit) }

func testEnginePlanNewUnit(t *testing.T) {
	cli := newEtcd(t)
	e := startEngine(t, cli, "grpc", "e1")
	startAgent(t, cli, "grpc", "m1")
	waitMachines(t, e.Engine, 1)
	ctx := context.Background()
	web := parse(t, "web.service", simple)
	p, err := e.Plan(ctx, []engine.Change{{Name: "web.service", File: web, DesiredState: unit.Launched}}, engine.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Units) != 1 || p.Units[0].Action != engine.PlanStart || p.Units[0].Target != "m1" {
		t.Fatalf("Plan(new web.service) = %+v, want a start on m1", p.Units)
	}
	if _, err := e.Unit("web.service"); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("Unit(web.service) after a plan = %v, want ErrNotFound", err)
	}
}
