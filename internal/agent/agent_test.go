package agent

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flotilla/flotilla/internal/driver/sim"
	"github.com/flotilla/flotilla/internal/election"
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
	a, err := New(Config{Machine: Machine{ID: "m1"}, Leaders: noLeader, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	d, err := sim.New(sim.Config{Machine: "m1", Notify: a.Notify})
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

// TestAgentStopsUnitsWhenCutOff: an agent that hears from no leader for the
// TTL stops its non-global units, and keeps its global ones.
func TestAgentStopsUnitsWhenCutOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 10 * time.Second
		a, d := newTestAgent(t, ttl)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: &agentpb.Assignments{Full: true, Units: []*agentpb.Assignment{
			{Name: "web.service", File: unitText(false), DesiredState: "launched"},
			{Name: "mon.service", File: unitText(true), DesiredState: "launched", Global: true},
		}}}})
		synctest.Wait()
		if got, want := fmt.Sprint(active(d)), "map[mon.service:active web.service:active]"; got != want {
			t.Fatalf("after assignment: units = %s, want %s", got, want)
		}
		time.Sleep(ttl - time.Second)
		synctest.Wait()
		if got := active(d); got["web.service"] != "active" {
			t.Fatalf("before the TTL: units = %v, want web.service still active", got)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got, want := fmt.Sprint(active(d)), "map[mon.service:active]"; got != want {
			t.Fatalf("after the TTL without a leader: units = %s, want %s", got, want)
		}
		// A leader reached again restores the assignment.
		a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: &agentpb.Assignments{Full: true, Units: []*agentpb.Assignment{
			{Name: "web.service", File: unitText(false), DesiredState: "launched"},
			{Name: "mon.service", File: unitText(true), DesiredState: "launched", Global: true},
		}}}})
		synctest.Wait()
		if got, want := fmt.Sprint(active(d)), "map[mon.service:active web.service:active]"; got != want {
			t.Fatalf("after the leader came back: units = %s, want %s", got, want)
		}
		cancel()
		<-done
	})
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
			a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: &agentpb.Assignments{Full: full, Units: units, Removed: removed}}})
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

// TestAgentUsesTheLeadersShorterTTL: an agent configured with a longer TTL
// than its leader's stops its units after the leader's, never keeping a
// unit the leader has moved.
func TestAgentUsesTheLeadersShorterTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, d := newTestAgent(t, time.Minute)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: &agentpb.Assignments{Full: true, AgentTtlMs: 5000,
			Units: []*agentpb.Assignment{{Name: "web.service", File: unitText(false), DesiredState: "launched"}}}}})
		time.Sleep(6 * time.Second)
		synctest.Wait()
		if got := fmt.Sprint(active(d)); got != "map[]" {
			t.Fatalf("6s without a leader whose TTL is 5s: units = %s, want none", got)
		}
		cancel()
		<-done
	})
}

// TestAgentKillsWhenCutOff: units stopped because no leader was heard are
// killed at once, not stopped gracefully: they are being started elsewhere.
func TestAgentKillsWhenCutOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, err := New(Config{Machine: Machine{ID: "m1"}, Leaders: noLeader, TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		d, _ := sim.New(sim.Config{Machine: "m1", Notify: a.Notify, StopDelay: time.Minute})
		a.SetDriver(d)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: &agentpb.Assignments{Full: true,
			Units: []*agentpb.Assignment{{Name: "web.service", File: unitText(false), DesiredState: "launched"}}}}})
		synctest.Wait()
		time.Sleep(6 * time.Second)
		synctest.Wait()
		if got := fmt.Sprint(active(d)); got != "map[]" {
			t.Fatalf("1s after fencing, with a 1-minute stop: units = %s, want none (killed)", got)
		}
		cancel()
		<-done
	})
}
