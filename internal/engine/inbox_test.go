package engine

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flotilla/flotilla/internal/metrics"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// A stream's reports must not wait for the loop: while a reconcile pass
// decides (seconds at a million units), the agent's later heartbeats would
// wait behind its report, and the machine would be counted unheard. The
// report is taken at once and applied when the loop next takes its inputs.
func TestReportDoesNotWaitForTheLoop(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	tm := &term{
		e:             &Engine{cfg: Config{Now: time.Now, Metrics: metrics.New(), HeartbeatInterval: time.Second, Registry: registry.ModeGRPC}},
		ctx:           ctx,
		cancel:        cancel,
		committer:     registry.NewCommitter(nil, clientv3.Cmp{}, registry.CommitterConfig{}),
		decisionState: &decisionState{machines: map[string]*machineRec{}, moves: newMoves()},
		events:        newEventLog(1, ctx.Done()),
		kick:          make(chan struct{}, 1),
		inbox:         newInboxes(),
	}
	conn := newAgentConn("m1")
	tm.machine("m1").conn = conn

	update := func(active string) *agentpb.AgentMessage {
		return &agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Update{Update: &agentpb.StatusUpdate{
			Units: []*agentpb.UnitStatus{{Name: "a.service", Load: "loaded", Active: active, Sub: "x"}}}}}
	}
	// This goroutine is the loop, busy: the reports are queued at once.
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
		t.Fatal("a report waited for the loop")
	}
	if _, got := tm.stateOf(tm.machines["m1"], "a.service"); got {
		t.Errorf("state applied while the loop was busy")
	}
	select {
	case <-tm.inbox.wake:
	default:
		t.Fatal("the loop was not woken")
	}
	tm.applyInputs()
	if got, _ := tm.statusOf(tm.machines["m1"], "a.service"); got.Active != "active" {
		t.Errorf("state %q once the loop took its inputs, want the latest report's (active)", got.Active)
	}

	// A report of a stream its machine no longer has (replaced by a new
	// Hello) is dropped.
	old := conn
	tm.machines["m1"].conn = newAgentConn("m1")
	tm.received(old, update("failed"))
	tm.applyInputs()
	got := ""
	if st, ok := tm.stateOf(tm.machines["m1"], "a.service"); ok {
		got = st.active()
	}
	if got != "active" {
		t.Errorf("a replaced stream's report was applied: state %q", got)
	}
}

// While the loop waits for etcd (a round's commit), it answers reads:
// a read waits for a step of the loop, never for etcd.
func TestLoopAnswersReadsWhileItCommits(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	tm := &term{ctx: ctx, inbox: newInboxes(), decisionState: &decisionState{units: map[string]*unitRec{"a.service": nil}}}
	etcd := make(chan struct{}) // the commit's answer
	answered := make(chan error, 1)
	go func() {
		answered <- tm.onLoop(func() {
			if _, ok := tm.units["a.service"]; !ok {
				t.Error("the read did not see the loop's state")
			}
		})
	}()
	loopDone := make(chan struct{})
	go func() { // the loop
		defer close(loopDone)
		tm.serveUntil(etcd)
	}()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatalf("read: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a read waited for the loop's commit")
	}
	close(etcd)
	<-loopDone
}
