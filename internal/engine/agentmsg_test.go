package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flotilla/flotilla/internal/election"
	"github.com/flotilla/flotilla/internal/limits"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/waitfor"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// TestAgentMessageLimits: a Hello or a status update over one of the
// limits ends the agent's stream with InvalidArgument naming it, before
// the machine is known to the leader; the leader's term goes on and a
// well-formed agent is served as before. The cases are not subtests:
// t.Run cannot be called in a bubble.
func TestAgentMessageLimits(t *testing.T) { inBubble(t, testAgentMessageLimits) }

func testAgentMessageLimits(t *testing.T) {
	cli := newEtcd(t)
	e := startEngine(t, cli, "grpc", "e1")
	waitLeader(t, e)
	_, rev0 := e.IsLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addr := leaderGRPCAddr(ctx, cli)
	conn, err := grpc.NewClient(addr, dialOptions(t)...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	ok := func(id string) *agentpb.Machine { return &agentpb.Machine{Id: id, Ip: "127.0.0.1"} }
	status1 := func(name string) *agentpb.UnitStatus {
		return &agentpb.UnitStatus{Name: name, Hash: strings.Repeat("a", 40), Load: "loaded", Active: "active", Sub: "running"}
	}
	manyPairs := map[string]string{}
	for i := range limits.MetadataPairs + 1 {
		manyPairs[fmt.Sprintf("k%d", i)] = "v"
	}
	hello := func(m *agentpb.Machine, units ...*agentpb.UnitStatus) *agentpb.AgentMessage {
		return &agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Hello{Hello: &agentpb.Hello{Machine: m, Units: units}}}
	}
	update := func(u *agentpb.StatusUpdate) *agentpb.AgentMessage {
		return &agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Update{Update: u}}
	}
	for _, tc := range []struct {
		name string
		msgs []*agentpb.AgentMessage
		want string
	}{
		{"no hello", []*agentpb.AgentMessage{update(&agentpb.StatusUpdate{})}, "must be a Hello"},
		{"machine name", []*agentpb.AgentMessage{hello(ok(strings.Repeat("m", limits.MachineNameBytes+1)))}, fmt.Sprintf("the limit is %d", limits.MachineNameBytes)},
		{"machine name syntax", []*agentpb.AgentMessage{hello(ok("../m1"))}, "machine name"},
		{"metadata pairs", []*agentpb.AgentMessage{hello(&agentpb.Machine{Id: "m1", Metadata: manyPairs})}, fmt.Sprintf("the limit is %d", limits.MetadataPairs)},
		{"metadata value", []*agentpb.AgentMessage{hello(&agentpb.Machine{Id: "m1", Metadata: map[string]string{"k": strings.Repeat("v", limits.MetadataValueBytes+1)}})}, fmt.Sprintf("the limit is %d", limits.MetadataValueBytes)},
		{"metadata syntax", []*agentpb.AgentMessage{hello(&agentpb.Machine{Id: "m1", Metadata: map[string]string{"k": "a=b"}})}, "metadata"},
		{"capacity", []*agentpb.AgentMessage{hello(&agentpb.Machine{Id: "m1", MemoryBytes: -1})}, "memory capacity -1"},
		{"unit name in hello", []*agentpb.AgentMessage{hello(ok("m1"), status1("../x.service"))}, "units[0]"},
		{"status field", []*agentpb.AgentMessage{hello(ok("m1"), &agentpb.UnitStatus{Name: "a.service", Sub: strings.Repeat("s", 65)})}, "sub is 65 bytes; the limit is 64"},
		{"unit name in update", []*agentpb.AgentMessage{hello(ok("m2")), update(&agentpb.StatusUpdate{Units: []*agentpb.UnitStatus{status1("a b")}})}, "status update: units[0]"},
		{"removed name in update", []*agentpb.AgentMessage{hello(ok("m2")), update(&agentpb.StatusUpdate{Removed: []string{""}})}, "removed[0]"},
	} {
		if err := refused(ctx, conn, tc.msgs); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: stream ended with %v, want InvalidArgument naming %q", tc.name, err, tc.want)
		}
	}
	ms, err := e.Machines()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.ID != "m2" { // m2 said a valid Hello before its bad update
			t.Errorf("a refused Hello left machine %q in the leader's state", m.ID)
		}
	}
	if ok, rev := e.IsLeader(); !ok || rev != rev0 {
		t.Errorf("after refused streams IsLeader() = %v, %d; want the same term %d", ok, rev, rev0)
	}
	startAgent(t, cli, "grpc", "m3", "disk=ssd")
	waitfor.Until(t, 10*time.Second, "m3 served", func() error {
		ms, _ := e.Machines()
		for _, m := range ms {
			if m.ID == "m3" && m.Metadata["disk"] == "ssd" {
				return nil
			}
		}
		return fmt.Errorf("machines %v", ms)
	})
}

// leaderGRPCAddr returns the agents' address of the leader, once one
// says it ("" if ctx ends first).
func leaderGRPCAddr(ctx context.Context, cli *clientv3.Client) string {
	for in := range election.Observe(ctx, cli, registry.Keys{}.Election()) {
		if in.GRPCAddr != "" {
			return in.GRPCAddr
		}
	}
	return ""
}

// refused sends msgs on a new stream to the leader and returns how the
// stream ended.
func refused(ctx context.Context, conn *grpc.ClientConn, msgs []*agentpb.AgentMessage) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stream, err := agentpb.NewEngineClient(conn).Connect(ctx)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			break // the leader ended the stream: Recv says why
		}
	}
	for {
		if _, err := stream.Recv(); err != nil {
			return err
		}
	}
}
