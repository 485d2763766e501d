package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/health"
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
