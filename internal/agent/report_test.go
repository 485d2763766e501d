package agent

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// TestReportAsSent: a unit's status kept compactly is sent to the leader
// as the driver reported it, whatever it holds; a unit with no report yet
// is sent loaded and dead.
func TestReportAsSent(t *testing.T) {
	a, _ := newTestAgent(t, 10*time.Second)
	since := time.Unix(1700000000, 123456789)
	for _, s := range []unit.Status{
		{Name: "a.service", Hash: "h1", Machine: "m1", Load: "loaded", Active: "active", Sub: "running", PID: 4321, Since: since},
		{Name: "b.service", Hash: "h2", Load: "error", Active: "failed", Sub: "failed", Result: "load-error", Message: "no such driver"},
		{Name: "c.service", Hash: "h3", Load: "loaded", Active: "inactive", Sub: "dead", Result: "signal", Since: since},
	} {
		a.mu.Lock()
		a.haves[s.Name] = have{Hash: s.Hash, Applied: unit.Launched}
		a.mu.Unlock()
		a.Notify(s)
		want := &agentpb.UnitStatus{Name: s.Name, Hash: s.Hash, Load: s.Load, Active: s.Active, Sub: s.Sub, Pid: int32(s.PID),
			Result: s.Result, Message: s.Message, Applied: string(unit.Launched)}
		if !s.Since.IsZero() {
			want.SinceUnixNano = s.Since.UnixNano()
		}
		if s.Active == "active" {
			want.Health = "healthy" // no [X-Check]: healthy while active
		}
		a.mu.Lock()
		got := statusOf(a, s.Name)
		a.mu.Unlock()
		if !proto.Equal(got, want) {
			t.Errorf("%s sent as %v, want %v", s.Name, got, want)
		}
	}
	a.mu.Lock()
	a.haves["d.service"] = have{Hash: "h4", Applied: unit.Loaded}
	got := statusOf(a, "d.service")
	a.mu.Unlock()
	want := &agentpb.UnitStatus{Name: "d.service", Hash: "h4", Load: "loaded", Active: "inactive", Sub: "dead", Applied: string(unit.Loaded)}
	if !proto.Equal(got, want) {
		t.Errorf("a unit not reported yet sent as %v, want %v", got, want)
	}
	if p, q := internStates(reportStates{"loaded", "active", "running", ""}), internStates(reportStates{"loaded", "active", "running", ""}); p != q {
		t.Error("the same states are kept twice")
	}
}

// statusOf is unit name's status as sent to the leader; callers hold a.mu.
func statusOf(a *Agent, name string) *agentpb.UnitStatus {
	if us := a.statusesLocked(slices.Values([]string{name}), 1); len(us) == 1 {
		return us[0]
	}
	return nil
}
