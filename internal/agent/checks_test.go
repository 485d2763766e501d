package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/driver/sim"
	"github.com/flotilla/flotilla/internal/health"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// healthOf is unit name's active state and health as the agent would send
// them to a leader.
func healthOf(a *Agent, name string) string {
	for _, u := range a.hello(0).Units {
		if u.Name == name {
			return u.Active + "/" + u.Health
		}
	}
	return "absent"
}

// TestAgentRunsChecks: the agent reports a unit without [X-Check] healthy
// while active; it runs a unit's checks (real processes) while the unit is
// active and reports it healthy, then unhealthy once they fail; with
// OnUnhealthy=restart it restarts the unit once, which stays unhealthy
// while its checks keep failing and is not restarted again until it has
// been healthy; a stopped unit has no health and no checks running.
func TestAgentRunsChecks(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok")
	if err := os.WriteFile(ok, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a, d := newTestAgentWith(t, Config{Machine: Machine{ID: "m1"}, Leaders: noLeader, TTL: time.Hour})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// Each run of a unit's check leaves a line in its runs file.
	checked := func(name, onUnhealthy string) *agentpb.Assignment {
		runs := filepath.Join(dir, name+".runs")
		text := fmt.Sprintf("[Service]\nExecStart=/bin/true\n[X-Check]\nExec=/bin/sh -c 'echo run >> %s; test -f %s'\nInterval=100ms\nUnhealthyAfter=2\nOnUnhealthy=%s\n", runs, ok, onUnhealthy)
		return &agentpb.Assignment{Name: name, File: text, DesiredState: "launched"}
	}
	runs := func(name string) int {
		b, _ := os.ReadFile(filepath.Join(dir, name+".runs"))
		return strings.Count(string(b), "run\n")
	}
	send := func(units ...*agentpb.Assignment) {
		a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: &agentpb.Assignments{Full: true, Units: units}}}, a.cfg.Mono())
	}
	expect := func(name, want string) {
		t.Helper()
		waitfor.Until(t, 10*time.Second, name+" "+want, func() error {
			if got := healthOf(a, name); got != want {
				return fmt.Errorf("%s is %s", name, got)
			}
			return nil
		})
	}
	plain := &agentpb.Assignment{Name: "plain.service", File: unitText(false), DesiredState: "launched"}
	web, watched := checked("web.service", "restart"), checked("watched.service", "none")
	send(plain, watched, web)
	expect("plain.service", "active/"+health.Healthy)
	expect("web.service", "active/"+health.Healthy)
	expect("watched.service", "active/"+health.Healthy)
	starts := d.Started()

	os.Remove(ok)
	expect("watched.service", "active/"+health.Unhealthy) // OnUnhealthy=none: left running
	waitfor.True(t, 10*time.Second, "web.service restarted", func() bool { return d.Started() > starts })
	// Restarted, still failing: unhealthy, and not restarted again however
	// many more runs fail.
	expect("web.service", "active/"+health.Unhealthy)
	n := runs("web.service")
	waitfor.True(t, 10*time.Second, "web.service's checks run 6 more times", func() bool { return runs("web.service") >= n+6 })
	if got := d.Started(); got != starts+1 {
		t.Fatalf("units started %d times since the checks failed, want 1 (web.service, once)", got-starts)
	}
	// Passing again: healthy.
	if err := os.WriteFile(ok, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	expect("web.service", "active/"+health.Healthy)

	send(plain, watched, &agentpb.Assignment{Name: "web.service", File: web.File, DesiredState: "loaded"})
	expect("web.service", "inactive/")
	a.mu.Lock()
	_, webChecked := a.checks["web.service"]
	a.mu.Unlock()
	if webChecked {
		t.Fatal("web.service's checks still run once it is stopped")
	}
}

// TestAgentWatchdogUnhealthy: a unit whose run its watchdog ended
// (Result=watchdog) is unhealthy while it is killed and waits to restart,
// [X-Check] or not, and has no health again once a new run starts.
func TestAgentWatchdogUnhealthy(t *testing.T) {
	a, d := newTestAgentWith(t, Config{Machine: Machine{ID: "m1"}, Leaders: noLeader, TTL: time.Hour})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: &agentpb.Assignments{Full: true, Units: []*agentpb.Assignment{
		{Name: "dog.service", File: "[Service]\nType=notify\nWatchdogSec=1s\nExecStart=/bin/true\n", DesiredState: "launched"},
	}}}}, a.cfg.Mono())
	expect := func(want string) {
		t.Helper()
		waitfor.Until(t, 10*time.Second, "dog.service "+want, func() error {
			if got := healthOf(a, "dog.service"); got != want {
				return fmt.Errorf("dog.service is %s", got)
			}
			return nil
		})
	}
	expect("active/" + health.Healthy)
	st := d.States()[0]
	for _, s := range []struct{ active, sub, result, want string }{
		{"deactivating", "stop-watchdog", "watchdog", health.Unhealthy},
		{"activating", "auto-restart", "watchdog", health.Unhealthy},
		{"failed", "failed", "watchdog", health.Unhealthy},
		{"activating", "start", "success", ""},
		{"failed", "failed", "exit-code", ""},
	} {
		st.Active, st.Sub, st.Result = s.active, s.sub, s.result
		a.Notify(st)
		expect(s.active + "/" + s.want)
	}
}

// checkingDriver is a sim driver that runs units' checks itself
// (driver.Checker), as the exec driver does in the supervisor: its
// statuses carry the health set in health.
type checkingDriver struct {
	*sim.Driver
	mu     sync.Mutex
	health map[string]string
}

func (d *checkingDriver) RunsChecks(string) bool { return true }

func (d *checkingDriver) with(s unit.Status) unit.Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.Active == "active" || d.health[s.Name] == health.Unhealthy {
		s.Health = d.health[s.Name]
	}
	return s
}

func (d *checkingDriver) States() []unit.Status {
	out := d.Driver.States()
	for i := range out {
		out[i] = d.with(out[i])
	}
	return out
}

// set changes the health the driver reports for name, and notifies it.
func (d *checkingDriver) set(a *Agent, name, h string) {
	d.mu.Lock()
	d.health[name] = h
	d.mu.Unlock()
	for _, s := range d.States() {
		if s.Name == name {
			a.Notify(s)
		}
	}
}

// TestAgentLeavesChecksToDriver: a unit whose driver runs its [X-Check]
// (the exec driver in the supervisor) is not checked by the agent, which
// reports the driver's health: at once for a unit it adopts (a restarted
// daemon: no "unknown" before its file comes), "unhealthy" while the
// driver restarts it, whatever the driver says while active.
func TestAgentLeavesChecksToDriver(t *testing.T) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	text := fmt.Sprintf("[Service]\nExecStart=/bin/true\n[X-Check]\nExec=/bin/sh -c 'echo run >> %s; exit 1'\nInterval=100ms\nUnhealthyAfter=1\nOnUnhealthy=restart\n", runs)
	f, err := unit.Parse("web.service", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Machine: Machine{ID: "m1"}, Leaders: noLeader, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	d := &checkingDriver{health: map[string]string{"web.service": health.Healthy}}
	d.Driver, err = sim.New(sim.Config{Machine: "m1", Notify: func(s unit.Status) { a.Notify(d.with(s)) }})
	if err != nil {
		t.Fatal(err)
	}
	// The unit runs already, checked and healthy, as a supervisor holds it
	// for the next daemon.
	if err := d.Load(f); err != nil {
		t.Fatal(err)
	}
	if err := d.Start("web.service"); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, 10*time.Second, "web.service active in the driver", func() bool { return d.States()[0].Active == "active" })
	a.SetDriver(d)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	var got string
	waitfor.True(t, 10*time.Second, "web.service adopted", func() bool { got = healthOf(a, "web.service"); return got != "absent" })
	if got != "active/"+health.Healthy {
		t.Fatalf("adopted web.service is %s before its file came, want active/healthy at once", got)
	}
	a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: &agentpb.Assignments{Full: true, Units: []*agentpb.Assignment{
		{Name: "web.service", File: text, DesiredState: "launched"},
	}}}}, a.cfg.Mono())
	expect := func(want string) {
		t.Helper()
		waitfor.Until(t, 10*time.Second, "web.service "+want, func() error {
			if got := healthOf(a, "web.service"); got != want {
				return fmt.Errorf("web.service is %s", got)
			}
			return nil
		})
	}
	expect("active/" + health.Healthy)
	// The agent runs no check of its own: the failing Exec= would run (and
	// write) within its 100ms Interval.
	waitfor.Never(t, time.Second, "the agent runs web.service's check", func() bool {
		_, err := os.Stat(runs)
		return err == nil
	})
	a.mu.Lock()
	_, checked := a.checks["web.service"]
	a.mu.Unlock()
	if checked {
		t.Fatal("the agent runs web.service's checks, which its driver runs")
	}
	d.set(a, "web.service", health.Unhealthy)
	expect("active/" + health.Unhealthy)
	d.Stop("web.service") // the driver restarts it: unhealthy while stopped
	expect("inactive/" + health.Unhealthy)
	d.set(a, "web.service", health.Unknown)
	expect("inactive/")
	d.Start("web.service")
	expect("active/" + health.Unknown)
}
