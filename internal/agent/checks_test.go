package agent

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/health"
	"github.com/flotilla/flotilla/internal/waitfor"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// healthOf is unit name's health as the agent would send it to a leader.
func healthOf(a *Agent, name string) string {
	for _, u := range a.hello(0).Units {
		if u.Name == name {
			return u.Active + "/" + u.Health
		}
	}
	return "absent"
}

// TestAgentRunsChecks: the agent reports a unit without [X-Check] healthy
// while active; it runs a unit's TCP check (against a real listener) while
// the unit is active, reports it healthy, then unhealthy once the port
// closes, restarts it once for OnUnhealthy=restart, and reports no health
// once the unit is stopped.
func TestAgentRunsChecks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, d := newTestAgentWith(t, Config{Machine: Machine{ID: "m1"}, Leaders: noLeader, TTL: time.Hour})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	checked := fmt.Sprintf("[Service]\nExecStart=/bin/true\n[X-Check]\nTCP=%s\nInterval=100ms\nUnhealthyAfter=2\nOnUnhealthy=restart\n", ln.Addr())
	send := func(units ...*agentpb.Assignment) {
		a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: &agentpb.Assignments{Full: true, Units: units}}}, a.cfg.Mono())
	}
	plain := &agentpb.Assignment{Name: "plain.service", File: unitText(false), DesiredState: "launched"}
	watched := &agentpb.Assignment{Name: "watched.service", File: strings.Replace(checked, "OnUnhealthy=restart", "OnUnhealthy=none", 1), DesiredState: "launched"}
	send(plain, watched, &agentpb.Assignment{Name: "web.service", File: checked, DesiredState: "launched"})
	expect := func(name, want string) {
		t.Helper()
		waitfor.Until(t, 10*time.Second, name+" "+want, func() error {
			if got := healthOf(a, name); got != want {
				return fmt.Errorf("%s is %s", name, got)
			}
			return nil
		})
	}
	expect("plain.service", "active/"+health.Healthy)
	expect("web.service", "active/"+health.Healthy)
	expect("watched.service", "active/"+health.Healthy)
	starts := d.Started()

	ln.Close()
	// Unhealthy after 2 failed runs: stopped, started again, and then,
	// its port still closed, unhealthy and restarted again, each time
	// once per turn to unhealthy.
	waitfor.True(t, 10*time.Second, "web.service restarted", func() bool { return d.Started() > starts })
	expect("watched.service", "active/"+health.Unhealthy) // OnUnhealthy=none: left running

	send(plain, watched, &agentpb.Assignment{Name: "web.service", File: checked, DesiredState: "loaded"})
	expect("web.service", "inactive/")
	a.mu.Lock()
	n := len(a.checks)
	a.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d units' checks run, want 1 (watched.service's; web.service is stopped)", n)
	}
}
