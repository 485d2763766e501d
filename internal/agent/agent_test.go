package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flotilla/flotilla/internal/driver"
	"github.com/flotilla/flotilla/internal/driver/sim"
	"github.com/flotilla/flotilla/internal/election"
	"github.com/flotilla/flotilla/internal/monotime"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/proto/agentpb"
)

func unitText(global bool) string {
	s := "[Service]\nExecStart=/bin/true\n"
	if global {
		s += "[X-Fleet]\nGlobal=true\n"
	}
	return s
}

// noLeader is a leader source that never finds a leader.
func noLeader(ctx context.Context) <-chan election.Info {
	ch := make(chan election.Info)
	go func() { <-ctx.Done(); close(ch) }()
	return ch
}

func newTestAgent(t *testing.T, ttl time.Duration) (*Agent, *sim.Driver) {
	t.Helper()
	return newTestAgentWith(t, Config{Machine: Machine{ID: "m1"}, Leaders: noLeader, TTL: ttl, Mono: fakeMono()})
}

// newTestAgentWith makes an agent of cfg with a sim driver.
func newTestAgentWith(t *testing.T, cfg Config) (*Agent, *sim.Driver) {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d, err := sim.New(sim.Config{Machine: cfg.Machine.ID, Notify: a.Notify})
	if err != nil {
		t.Fatal(err)
	}
	a.SetDriver(d)
	return a, d
}

func active(d *sim.Driver) map[string]string {
	m := map[string]string{}
	for _, s := range d.States() {
		m[s.Name] = s.Active
	}
	return m
}

// TestAgentCutOffPolicy: an agent that hears from no leader keeps its
// ordinary and global units running however long it lasts, and kills each
// Singleton=true unit once its LostAfter= (default: the TTL) has passed.
func TestAgentCutOffPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 10 * time.Second
		a, d := newTestAgent(t, ttl)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		full := func() {
			a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: &agentpb.Assignments{Full: true, Units: []*agentpb.Assignment{
				{Name: "web.service", File: unitText(false), DesiredState: "launched"},
				{Name: "mon.service", File: unitText(true), DesiredState: "launched", Global: true},
				{Name: "db.service", File: singletonText(""), DesiredState: "launched"},
				{Name: "queue.service", File: singletonText("30s"), DesiredState: "launched"},
			}}}}, a.cfg.Mono())
			synctest.Wait()
		}
		full()
		all := "map[db.service:active mon.service:active queue.service:active web.service:active]"
		if got := fmt.Sprint(active(d)); got != all {
			t.Fatalf("after assignment: units = %s, want %s", got, all)
		}
		time.Sleep(ttl - time.Second)
		synctest.Wait()
		if got := fmt.Sprint(active(d)); got != all {
			t.Fatalf("before the TTL: units = %s, want %s", got, all)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got, want := fmt.Sprint(active(d)), "map[mon.service:active queue.service:active web.service:active]"; got != want {
			t.Fatalf("past the TTL without a leader: units = %s, want %s (db.service, a singleton, killed)", got, want)
		}
		time.Sleep(20 * time.Second)
		synctest.Wait()
		if got, want := fmt.Sprint(active(d)), "map[mon.service:active web.service:active]"; got != want {
			t.Fatalf("past LostAfter=30s: units = %s, want %s", got, want)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if got, want := fmt.Sprint(active(d)), "map[mon.service:active web.service:active]"; got != want {
			t.Fatalf("an hour cut off: units = %s, want %s", got, want)
		}
		// A leader reached again restores what it assigns here.
		full()
		if got := fmt.Sprint(active(d)); got != all {
			t.Fatalf("after the leader came back: units = %s, want %s", got, all)
		}
		cancel()
		<-done
	})
}

func singletonText(lostAfter string) string {
	s := "[Service]\nExecStart=/bin/true\n[X-Fleet]\nSingleton=true\n"
	if lostAfter != "" {
		s += "LostAfter=" + lostAfter + "\n"
	}
	return s
}

// TestAgentJudgesWordBySendTime: a message that waited (in a socket, while
// the agent was frozen) counts from when the leader sent it, not from when
// it arrived, so it does not keep a singleton unit alive past its deadline.
func TestAgentJudgesWordBySendTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 10 * time.Second
		a, d := newTestAgent(t, ttl)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		var clock sendClock
		leader := func() int64 { return int64(a.cfg.Mono()) + 5e9 } // another process's clock
		leaderAt := leader()
		a.received(&agentpb.EngineMessage{SentMonoNano: leaderAt, Msg: &agentpb.EngineMessage_Assignments{Assignments: &agentpb.Assignments{Full: true, Units: []*agentpb.Assignment{
			{Name: "db.service", File: singletonText(""), DesiredState: "launched"},
		}}}}, clock.sent(leaderAt, a.cfg.Mono()))
		synctest.Wait()
		// Frozen for 12s; heartbeats the leader sent 1s and 2s in arrive
		// only now, together.
		time.Sleep(12 * time.Second)
		for _, after := range []int64{1e9, 2e9} {
			a.received(&agentpb.EngineMessage{SentMonoNano: leaderAt + after, Msg: &agentpb.EngineMessage_Heartbeat{Heartbeat: &agentpb.Heartbeat{}}},
				clock.sent(leaderAt+after, a.cfg.Mono()))
		}
		time.Sleep(time.Second) // the watchdog's tick
		synctest.Wait()
		if got := fmt.Sprint(active(d)); got != "map[]" {
			t.Fatalf("10s after the last word was sent (12s frozen): units = %s, want db.service killed", got)
		}
		cancel()
		<-done
	})
}

// TestSendClock: the offset is the smallest arrival-minus-send seen.
func TestSendClock(t *testing.T) {
	var c sendClock
	if got := c.sent(0, 500); got != 500 {
		t.Errorf("sent(0, 500) = %d, want the arrival 500", got)
	}
	if got := c.sent(100, 1100); got != 1100 {
		t.Errorf("first message sent at 100 arriving at 1100: %d, want 1100", got)
	}
	if got := c.sent(200, 1150); got != 1150 {
		t.Errorf("a quicker message sent at 200 arriving at 1150: %d, want 1150 (offset 950)", got)
	}
	if got := c.sent(300, 9000); got != 1250 {
		t.Errorf("a message sent at 300 that waited until 9000: %d, want 1250", got)
	}
}

// TestAgentAdoptsUnits: units the driver already runs when the agent
// starts are reported as they are and left running: the leader's full set
// keeps them without a restart, and unloads those it does not list.
func TestAgentAdoptsUnits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, d := newTestAgent(t, time.Minute)
		for _, name := range []string{"web.service", "old.service"} {
			f, err := unit.Parse(name, []byte(unitText(false)))
			if err != nil {
				t.Fatal(err)
			}
			d.Load(f)
			d.Start(name)
		}
		synctest.Wait()
		pids := map[string]int{}
		for _, s := range d.States() {
			pids[s.Name] = s.PID
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		synctest.Wait()
		h := a.hello(1)
		if len(h.Units) != 2 || h.Units[1].Name != "web.service" || h.Units[1].Applied != "launched" || h.Units[1].Active != "active" {
			t.Fatalf("hello after adopting = %v, want both units, launched and active", h.Units)
		}
		a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: &agentpb.Assignments{Full: true, Units: []*agentpb.Assignment{
			{Name: "web.service", File: unitText(false), DesiredState: "launched"},
		}}}}, a.cfg.Mono())
		synctest.Wait()
		st := d.States()
		if len(st) != 1 || st[0].Name != "web.service" || st[0].PID != pids["web.service"] || st[0].Active != "active" {
			t.Fatalf("after the full set: %v, want only web.service, active with its PID %d", st, pids["web.service"])
		}
		cancel()
		<-done
	})
}

// fencer records the fences an agent hands its driver.
type fencer struct {
	*sim.Driver
	mu       sync.Mutex
	deadline monotime.Time
	names    []string
	calls    int
}

func (f *fencer) Fence(deadline monotime.Time, names []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deadline, f.names = deadline, names
	f.calls++
	return nil
}

// TestAgentFencesSingletons: the driver is handed the singleton units and
// the deadline of the word plus their shortest LostAfter=, renewed as word
// comes, and never before any word since the agent started.
func TestAgentFencesSingletons(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, err := New(Config{Machine: Machine{ID: "m1"}, Leaders: noLeader, TTL: 10 * time.Second, Mono: fakeMono()})
		if err != nil {
			t.Fatal(err)
		}
		d, _ := sim.New(sim.Config{Machine: "m1", Notify: a.Notify})
		f := &fencer{Driver: d}
		a.SetDriver(f)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		synctest.Wait()
		if f.calls != 0 {
			t.Fatalf("fenced %d times before any word from a leader, want none", f.calls)
		}
		sent := a.cfg.Mono()
		a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: &agentpb.Assignments{Full: true, Units: []*agentpb.Assignment{
			{Name: "web.service", File: unitText(false), DesiredState: "launched"},
			{Name: "db.service", File: singletonText("30s"), DesiredState: "launched"},
			{Name: "queue.service", File: singletonText(""), DesiredState: "launched"},
		}}}}, sent)
		synctest.Wait()
		f.mu.Lock()
		if got := fmt.Sprint(f.names); got != "[db.service queue.service]" || f.deadline != sent.Add(10*time.Second) {
			t.Errorf("fence = %s until +%v, want [db.service queue.service] until +10s", got, f.deadline.Sub(sent))
		}
		f.mu.Unlock()
		time.Sleep(3 * time.Second)
		later := a.cfg.Mono()
		a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Heartbeat{Heartbeat: &agentpb.Heartbeat{}}}, later)
		synctest.Wait()
		f.mu.Lock()
		if f.deadline != later.Add(10*time.Second) {
			t.Errorf("after word 3s later: deadline +%v from the first word, want +13s", f.deadline.Sub(sent))
		}
		f.mu.Unlock()
		cancel()
		<-done
	})
}

// fakeMono is a monotonic clock that follows time.Now, so that it moves
// with testing/synctest's fake time.
func fakeMono() func() monotime.Time {
	base := time.Now()
	return func() monotime.Time { return monotime.Time(time.Since(base) + time.Second) }
}

// TestAgentAppliesDeltas: deltas start, stop and remove units; a full
// assignment unloads what it does not list.
func TestAgentAppliesDeltas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, d := newTestAgent(t, time.Hour)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		send := func(full bool, removed []string, units ...*agentpb.Assignment) {
			a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: &agentpb.Assignments{Full: full, Units: units, Removed: removed}}}, a.cfg.Mono())
			synctest.Wait()
		}
		as := func(name, state string) *agentpb.Assignment {
			return &agentpb.Assignment{Name: name, File: unitText(false), DesiredState: state}
		}
		send(true, nil, as("a.service", "launched"), as("b.service", "loaded"))
		if got, want := fmt.Sprint(active(d)), "map[a.service:active b.service:inactive]"; got != want {
			t.Fatalf("units = %s, want %s", got, want)
		}
		send(false, nil, as("a.service", "loaded"), as("b.service", "launched"))
		if got, want := fmt.Sprint(active(d)), "map[a.service:inactive b.service:active]"; got != want {
			t.Fatalf("after delta: units = %s, want %s", got, want)
		}
		send(false, []string{"a.service"})
		if got, want := fmt.Sprint(active(d)), "map[b.service:active]"; got != want {
			t.Fatalf("after removal: units = %s, want %s", got, want)
		}
		send(true, nil, as("c.service", "launched"))
		if got, want := fmt.Sprint(active(d)), "map[c.service:active]"; got != want {
			t.Fatalf("after full: units = %s, want %s", got, want)
		}
		h := a.hello(7)
		if len(h.Units) != 1 || h.Units[0].Name != "c.service" || h.Units[0].Applied != string(unit.Launched) || h.LeaderRev != 7 {
			t.Errorf("hello = %v, want c.service launched at leader rev 7", h)
		}
		cancel()
		<-done
	})
}

// TestAgentKeepsUnchangedSet: the agent's Hello sums up the set it holds
// (the leader's own sum of the same set matches it), and a full set the
// leader says is unchanged keeps that set, its units running as they
// were, with what it lists applied as changes.
func TestAgentKeepsUnchangedSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, d := newTestAgent(t, time.Hour)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		send := func(as *agentpb.Assignments) {
			a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: as}}, a.cfg.Mono())
			synctest.Wait()
		}
		as := func(name, state string, global bool) *agentpb.Assignment {
			return &agentpb.Assignment{Name: name, File: unitText(global), DesiredState: state, Global: global}
		}
		if h := a.hello(1); h.WantsCount != 0 || h.WantsDigest != 0 {
			t.Fatalf("a Hello holding no set sums up %d units (%x); want none", h.WantsCount, h.WantsDigest)
		}
		send(&agentpb.Assignments{Full: true, Units: []*agentpb.Assignment{as("a.service", "launched", false), as("b.service", "loaded", false),
			as("g.service", "launched", true), as("off.service", "inactive", false)}})
		pids := map[string]int{}
		for _, s := range d.States() {
			pids[s.Name] = s.PID
		}
		var want agentpb.WantsDigest // as the leader sums up the set it assigned
		for _, u := range []struct {
			name, state string
			global      bool
		}{{"a.service", "launched", false}, {"b.service", "loaded", false}, {"g.service", "launched", true}} {
			f, err := unit.ParseStored(u.name, unitText(u.global))
			if err != nil {
				t.Fatal(err)
			}
			want.Add(u.name, f.Hash, u.state, u.global)
		}
		if h := a.hello(2); !want.Same(h) {
			t.Fatalf("the Hello sums up %d units (%x); the set assigned is %d (%x)", h.WantsCount, h.WantsDigest, want.Count, want.Sum)
		}
		send(&agentpb.Assignments{Full: true, Unchanged: true, Removed: []string{"b.service"}, Units: []*agentpb.Assignment{as("c.service", "launched", false)}})
		if got, want := fmt.Sprint(active(d)), "map[a.service:active c.service:active g.service:active]"; got != want {
			t.Fatalf("after an unchanged set and its changes: units = %s, want %s", got, want)
		}
		for _, s := range d.States() {
			if p, ok := pids[s.Name]; ok && s.PID != p {
				t.Errorf("%s: pid %d, was %d: restarted by an unchanged set", s.Name, s.PID, p)
			}
		}
		send(&agentpb.Assignments{Full: true})
		if got := active(d); len(got) != 0 {
			t.Fatalf("after an empty full set: units = %v, want none", got)
		}
		cancel()
		<-done
	})
}

// TestAgentUsesTheLeadersShorterTTL: a singleton unit's default LostAfter=
// is the shorter of the agent's TTL and the leader's, so the agent never
// keeps one the leader has moved.
func TestAgentUsesTheLeadersShorterTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, d := newTestAgent(t, time.Minute)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: &agentpb.Assignments{Full: true, AgentTtlMs: 5000,
			Units: []*agentpb.Assignment{{Name: "db.service", File: singletonText(""), DesiredState: "launched"}}}}}, a.cfg.Mono())
		time.Sleep(6 * time.Second)
		synctest.Wait()
		if got := fmt.Sprint(active(d)); got != "map[]" {
			t.Fatalf("6s without a leader whose TTL is 5s: units = %s, want none", got)
		}
		cancel()
		<-done
	})
}

// TestAgentKillsWhenCutOff: singleton units ended for want of word are
// killed at once, not stopped gracefully: they may be started elsewhere.
func TestAgentKillsWhenCutOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, err := New(Config{Machine: Machine{ID: "m1"}, Leaders: noLeader, TTL: 5 * time.Second, Mono: fakeMono()})
		if err != nil {
			t.Fatal(err)
		}
		d, _ := sim.New(sim.Config{Machine: "m1", Notify: a.Notify, StopDelay: time.Minute})
		a.SetDriver(d)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: &agentpb.Assignments{Full: true,
			Units: []*agentpb.Assignment{{Name: "db.service", File: singletonText(""), DesiredState: "launched"}}}}}, a.cfg.Mono())
		synctest.Wait()
		time.Sleep(6 * time.Second)
		synctest.Wait()
		if got := fmt.Sprint(active(d)); got != "map[]" {
			t.Fatalf("1s after its deadline, with a 1-minute stop: units = %s, want none (killed)", got)
		}
		cancel()
		<-done
	})
}

// TestAgentRestartsFencedSingleton: a singleton unit its driver killed at
// the fence's deadline (while the agent could not act) is started again
// when the leader, heard again, still assigns it here.
func TestAgentRestartsFencedSingleton(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, err := New(Config{Machine: Machine{ID: "m1"}, Leaders: noLeader, TTL: 10 * time.Second, Mono: fakeMono()})
		if err != nil {
			t.Fatal(err)
		}
		d, _ := sim.New(sim.Config{Machine: "m1", Notify: a.Notify})
		f := &refusingFencer{fencer: fencer{Driver: d}}
		a.SetDriver(f)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: &agentpb.Assignments{Full: true, Units: []*agentpb.Assignment{
			{Name: "db.service", File: singletonText(""), DesiredState: "launched"},
		}}}}, a.cfg.Mono())
		synctest.Wait()
		// The supervisor kills it at its deadline, as the agent sleeps,
		// and refuses to start it until the deadline moves on.
		f.kill("db.service")
		synctest.Wait()
		a.Notify(unit.Status{Name: "db.service", Load: "loaded", Active: "inactive", Sub: "dead", Result: "fenced"})
		synctest.Wait()
		if got := fmt.Sprint(active(d)); got != "map[db.service:inactive]" {
			t.Fatalf("after the fence: %s, want db.service inactive", got)
		}
		time.Sleep(time.Second)
		a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Heartbeat{Heartbeat: &agentpb.Heartbeat{}}}, a.cfg.Mono())
		synctest.Wait()
		if got := fmt.Sprint(active(d)); got != "map[db.service:active]" {
			t.Fatalf("after word from the leader that still assigns it: %s, want db.service active", got)
		}
		cancel()
		<-done
	})
}

// refusingFencer refuses to start a unit it killed at its deadline until a
// later Fence, as the exec driver does.
type refusingFencer struct {
	fencer
	killed map[string]bool
}

func (f *refusingFencer) kill(name string) {
	f.mu.Lock()
	if f.killed == nil {
		f.killed = map[string]bool{}
	}
	f.killed[name] = true
	f.mu.Unlock()
	f.Driver.Stop(name)
}

func (f *refusingFencer) Fence(deadline monotime.Time, names []string) error {
	f.mu.Lock()
	clear(f.killed)
	f.mu.Unlock()
	return f.fencer.Fence(deadline, names)
}

func (f *refusingFencer) Start(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.killed[name] {
		return fmt.Errorf("%s was fenced", name)
	}
	return f.Driver.Start(name)
}

// startRecorder is a sim driver that says which units the agent started
// (driver.StartRecorder), as the systemd driver does.
type startRecorder struct {
	*sim.Driver
	started map[string]bool
}

func (r *startRecorder) Started(name string) (bool, bool) { return r.started[name], true }

// TestAgentAdoptsTriggeredUnits: a unit that runs though the agent did not
// start it (systemd started it for its socket) is adopted as loaded, and
// left running when the leader wants it loaded.
func TestAgentAdoptsTriggeredUnits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, d := newTestAgent(t, time.Minute)
		r := &startRecorder{Driver: d, started: map[string]bool{"web.service": true}}
		a.SetDriver(r)
		for _, name := range []string{"web.service", "greet.service"} {
			f, err := unit.Parse(name, []byte(unitText(false)))
			if err != nil {
				t.Fatal(err)
			}
			d.Load(f)
			d.Start(name)
		}
		synctest.Wait()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		synctest.Wait()
		applied := map[string]string{}
		for _, u := range a.hello(1).Units {
			applied[u.Name] = u.Applied
		}
		if applied["web.service"] != "launched" || applied["greet.service"] != "loaded" {
			t.Fatalf("adopted as %v, want web.service launched and greet.service loaded", applied)
		}
		a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: &agentpb.Assignments{Full: true, Units: []*agentpb.Assignment{
			{Name: "web.service", File: unitText(false), DesiredState: "launched"},
			{Name: "greet.service", File: unitText(false), DesiredState: "loaded"},
		}}}}, a.cfg.Mono())
		synctest.Wait()
		if got := active(d); got["web.service"] != "active" || got["greet.service"] != "active" {
			t.Errorf("after the full set: %v, want both still active (greet.service was started by its socket)", got)
		}
		cancel()
		<-done
	})
}

// ownDriver is a driver that keeps the files it loads (as the exec,
// systemd and docker drivers do): it has no LoadShared.
type ownDriver struct {
	driver.Driver
	mu     sync.Mutex
	loaded map[string]*unit.File
}

func (d *ownDriver) Load(f *unit.File) error {
	d.mu.Lock()
	d.loaded[f.Name] = f
	d.mu.Unlock()
	return d.Driver.Load(f)
}

// TestSharedFileNamedForDriversThatKeepIt: instances of one template share
// one parsed file (parseAssigned); a driver that keeps the file it loads
// is given one named for each unit, while the sim driver (LoadShared)
// loads each under its own name from the shared one.
func TestSharedFileNamedForDriversThatKeepIt(t *testing.T) {
	text := unitText(false)
	full := &agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: &agentpb.Assignments{Full: true, Units: []*agentpb.Assignment{
		{Name: "web@1.service", File: text, DesiredState: "launched"},
		{Name: "web@2.service", File: text, DesiredState: "loaded"},
		{Name: "db@1.service", File: text, DesiredState: "launched"},
	}}}}
	names := []string{"db@1.service", "web@1.service", "web@2.service"}
	for _, keeps := range []bool{false, true} {
		a, d := newTestAgent(t, time.Hour)
		own := &ownDriver{Driver: d, loaded: map[string]*unit.File{}}
		if keeps {
			a.SetDriver(own)
		}
		a.received(full, a.cfg.Mono())
		reconcile(t, a)
		a.mu.Lock()
		if a.files["web@1.service"] != a.files["web@2.service"] || a.files["web@1.service"] == a.files["db@1.service"] {
			t.Errorf("files kept: web@1 %p web@2 %p db@1 %p, want the web instances to share one, db its own",
				a.files["web@1.service"], a.files["web@2.service"], a.files["db@1.service"])
		}
		for _, n := range names {
			if f := a.files[n]; f.Name != n && f.Name != "web@1.service" {
				t.Errorf("the file kept for %s is named %s: a shared file was changed", n, f.Name)
			}
		}
		a.mu.Unlock()
		var got []string
		for _, s := range d.States() {
			got = append(got, s.Name)
		}
		if fmt.Sprint(got) != fmt.Sprint(names) {
			t.Errorf("keeps=%v: the driver has %v, want %v", keeps, got, names)
		}
		if keeps {
			for _, n := range names {
				if f := own.loaded[n]; f == nil || f.Name != n {
					t.Errorf("the driver that keeps files got %v for %s", f, n)
				}
			}
		}
	}
}

// TestUpdateSendsEachUnitsOwnStatus: the statuses of an update, made in
// one allocation (statusesLocked), are each their own unit's.
func TestUpdateSendsEachUnitsOwnStatus(t *testing.T) {
	a, _ := newTestAgent(t, time.Hour)
	want := map[string]string{}
	for i := range 20 {
		name, hash := fmt.Sprintf("u%02d.service", i), fmt.Sprintf("h%d", i)
		a.mu.Lock()
		a.haves[name] = have{Hash: hash, Applied: unit.Launched}
		a.mu.Unlock()
		if i%3 != 0 { // the others are sent as not reported yet
			a.Notify(unit.Status{Name: name, Hash: hash, Load: "loaded", Active: "active", Sub: "running", PID: i})
		}
		want[name] = fmt.Sprintf("%s %d", hash, i)
	}
	a.mu.Lock()
	for i := range 20 {
		a.dirty[fmt.Sprintf("u%02d.service", i)] = true
	}
	a.dirty["gone.service"] = true // unloaded meanwhile: not sent
	a.mu.Unlock()
	u := a.takeUpdate().GetUpdate()
	if len(u.Units) != 20 {
		t.Fatalf("update has %d units, want 20", len(u.Units))
	}
	for _, s := range u.Units {
		i := 0
		fmt.Sscanf(s.Name, "u%02d.service", &i)
		pid := i
		if i%3 == 0 {
			pid = 0
			if s.Active != "inactive" {
				t.Errorf("%s not reported yet is sent %s", s.Name, s.Active)
			}
		}
		if got := fmt.Sprintf("%s %d", s.Hash, s.Pid); got != fmt.Sprintf("h%d %d", i, pid) {
			t.Errorf("%s sent as %s, want hash and pid h%d %d", s.Name, got, i, pid)
		}
		delete(want, s.Name)
	}
	if len(want) != 0 {
		t.Errorf("not sent: %v", want)
	}
}

// TestSingletonsNotedFromDeltas: the shortest LostAfter= of the singleton
// units follows the deltas that add and remove them.
func TestSingletonsNotedFromDeltas(t *testing.T) {
	a, _ := newTestAgent(t, time.Hour)
	send := func(full bool, removed []string, units ...*agentpb.Assignment) {
		a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: &agentpb.Assignments{Full: full, Units: units, Removed: removed}}}, a.cfg.Mono())
	}
	check := func(when string, want time.Duration) {
		t.Helper()
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.minLost != want || a.singletons.Load() != (want > 0) {
			t.Errorf("%s: minLost %v (singletons %v), want %v", when, a.minLost, a.singletons.Load(), want)
		}
	}
	send(true, nil, &agentpb.Assignment{Name: "a.service", File: unitText(false), DesiredState: "launched"})
	check("no singleton", 0)
	send(false, nil, &agentpb.Assignment{Name: "s.service", File: singletonText("30s"), DesiredState: "launched"})
	check("a singleton came", 30*time.Second)
	send(false, nil, &agentpb.Assignment{Name: "b.service", File: unitText(false), DesiredState: "launched"})
	check("another unit came", 30*time.Second)
	send(false, []string{"s.service"})
	check("the singleton left", 0)
	send(false, nil, &agentpb.Assignment{Name: "s.service", File: singletonText("30s"), DesiredState: "launched"})
	send(true, nil, &agentpb.Assignment{Name: "a.service", File: unitText(false), DesiredState: "launched"})
	check("a full set without it", 0)
}

// TestAgentFilesByKey: an assignment may name its file by the key of a
// text sent in the same message or an earlier one of the stream; a full
// set or files_reset forgets them, and a key never sent is refused, not
// run with an empty file.
func TestAgentFilesByKey(t *testing.T) {
	a, _ := newTestAgent(t, time.Minute)
	if !a.hello(1).FilesByHash {
		t.Fatal("the agent's Hello does not say it takes files by key")
	}
	text := "[Service]\nExecStart=/bin/sleep 100\n"
	send := func(as *agentpb.Assignments) {
		a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: as}}, a.cfg.Mono())
	}
	wanted := func() []string {
		a.mu.Lock()
		defer a.mu.Unlock()
		return slices.Sorted(maps.Keys(a.wants))
	}
	send(&agentpb.Assignments{Full: true, Files: map[string]string{"k1": text}, Units: []*agentpb.Assignment{
		{Name: "web@1.service", FileKey: "k1", DesiredState: "loaded"},
		{Name: "web@2.service", FileKey: "k1", DesiredState: "loaded"},
	}})
	send(&agentpb.Assignments{Units: []*agentpb.Assignment{{Name: "web@3.service", FileKey: "k1", DesiredState: "loaded"}}})
	if got := wanted(); !slices.Equal(got, []string{"web@1.service", "web@2.service", "web@3.service"}) {
		t.Fatalf("wanted %v, want the three instances", got)
	}
	a.mu.Lock()
	raw := a.files["web@3.service"].Raw
	a.mu.Unlock()
	if raw != text {
		t.Fatalf("web@3's file = %q, want the text sent under k1 in the earlier message", raw)
	}
	send(&agentpb.Assignments{FilesReset: true, Units: []*agentpb.Assignment{{Name: "web@4.service", FileKey: "k1", DesiredState: "loaded"}}})
	if got := wanted(); slices.Contains(got, "web@4.service") {
		t.Fatalf("wanted %v: web@4 named a key forgotten by files_reset, yet it is wanted", got)
	}
	send(&agentpb.Assignments{Full: true, Units: []*agentpb.Assignment{{Name: "web@1.service", FileKey: "k1", DesiredState: "loaded"}}})
	if got := wanted(); len(got) != 0 {
		t.Fatalf("wanted %v after a full set naming a key it does not send, want none", got)
	}
}

// failingUnload is a driver whose Unload fails a number of times first (its
// connection to the supervisor broken, say).
type failingUnload struct {
	driver.Driver
	mu    sync.Mutex
	fails int
	tries int
}

func (d *failingUnload) Unload(ctx context.Context, name string) error {
	d.mu.Lock()
	d.tries++
	fail := d.tries <= d.fails
	d.mu.Unlock()
	if fail {
		return errors.New("supervisor: unload " + name + ": the connection broke")
	}
	return d.Driver.Unload(ctx, name)
}

// TestUnloadFailedIsTriedAgain: a unit whose unload failed stays the
// agent's (reported, as the driver says) and is unloaded again later, the
// wait doubling while it fails; taken as gone, it ran on unknown to anyone.
func TestUnloadFailedIsTriedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, d := newTestAgent(t, time.Hour)
		fd := &failingUnload{Driver: d, fails: 2}
		a.SetDriver(fd)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		assign := func(units ...*agentpb.Assignment) {
			a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: &agentpb.Assignments{Full: true, Units: units}}}, a.cfg.Mono())
			synctest.Wait()
		}
		assign(&agentpb.Assignment{Name: "web.service", File: unitText(false), DesiredState: "launched"})
		if got := active(d); got["web.service"] != "active" {
			t.Fatalf("after the assignment: %v, want web.service active", got)
		}
		assign() // moved elsewhere: unloaded here
		if got := active(d); got["web.service"] != "active" {
			t.Fatalf("after a failed unload: %v, want web.service still running (the driver failed)", got)
		}
		a.mu.Lock()
		_, known := a.haves["web.service"]
		a.mu.Unlock()
		if !known {
			t.Fatal("the agent forgot web.service after its unload failed")
		}
		time.Sleep(retryFirst) // the second try, which fails too
		synctest.Wait()
		if _, ok := active(d)["web.service"]; !ok {
			t.Fatal("unloaded at the second try, which fails")
		}
		time.Sleep(2 * retryFirst) // the third, after twice the wait
		synctest.Wait()
		if got := active(d); len(got) != 0 {
			t.Errorf("after the third try: %v, want web.service unloaded", got)
		}
		fd.mu.Lock()
		tries := fd.tries
		fd.mu.Unlock()
		if tries != 3 {
			t.Errorf("%d unloads, want 3", tries)
		}
		cancel()
		<-done
	})
}
