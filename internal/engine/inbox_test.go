package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flotilla/flotilla/internal/metrics"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/waitfor"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// A stream's reports must not wait for the term's lock: while a reconcile
// pass holds it for reading (seconds at a million units), the agent's
// later heartbeats would wait behind its report, and the machine would be
// counted unheard. The report is taken at once and applied once the lock
// is free.
func TestReportDoesNotWaitForTheLock(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	tm := &term{
		e:         &Engine{cfg: Config{Now: time.Now, Metrics: metrics.New(), HeartbeatInterval: time.Second, Registry: registry.ModeGRPC}},
		ctx:       ctx,
		cancel:    cancel,
		committer: registry.NewCommitter(nil, clientv3.Cmp{}, registry.CommitterConfig{}),
		machines:  map[string]*machineRec{},
		draining:  map[string]string{},
		events:    newEventLog(1, ctx.Done()),
		kick:      make(chan struct{}, 1),
		inbox:     newInboxes(),
	}
	conn := newAgentConn("m1")
	tm.machine("m1").conn = conn
	done := make(chan struct{})
	go func() { defer close(done); tm.inboxLoop() }()
	defer func() { cancel(nil); <-done }()

	update := func(active string) *agentpb.AgentMessage {
		return &agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Update{Update: &agentpb.StatusUpdate{
			Units: []*agentpb.UnitStatus{{Name: "a.service", Load: "loaded", Active: active, Sub: "x"}}}}}
	}
	tm.mu.RLock() // a pass deciding
	returned := make(chan struct{})
	go func() {
		tm.received(conn, update("activating"))
		tm.received(conn, update("active"))
		tm.received(conn, &agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Heartbeat{Heartbeat: &agentpb.Heartbeat{}}})
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		tm.mu.RUnlock()
		t.Fatal("a report waited for the term's lock")
	}
	if _, got := tm.stateOf(tm.machines["m1"], "a.service"); got {
		t.Errorf("state applied while the pass held the lock")
	}
	tm.mu.RUnlock()
	waitfor.Until(t, 10*time.Second, "the latest report applied once the lock was free", func() error {
		tm.mu.RLock()
		got, _ := tm.statusOf(tm.machines["m1"], "a.service")
		tm.mu.RUnlock()
		if got.Active != "active" {
			return fmt.Errorf("state %q", got.Active)
		}
		return nil
	})

	// A report of a stream its machine no longer has (replaced by a new
	// Hello) is dropped.
	old := conn
	tm.mu.Lock()
	tm.machines["m1"].conn = newAgentConn("m1")
	tm.mu.Unlock()
	tm.received(old, update("failed"))
	tm.mu.Lock()
	tm.applyInboxLocked()
	got := ""
	if st, ok := tm.stateOf(tm.machines["m1"], "a.service"); ok {
		got = st.active()
	}
	tm.mu.Unlock()
	if got != "active" {
		t.Errorf("a replaced stream's report was applied: state %q", got)
	}
}
