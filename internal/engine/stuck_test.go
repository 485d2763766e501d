package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/flotilla/flotilla/internal/engine"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// TestStuckAgentsHoldBackNoOther: agents that say Hello and keep sending
// heartbeats but stop reading their streams, as many as the leader has
// senders, each with more assignments than their streams' flow-control
// window holds, so that every sender is stuck in a send to one of them:
// another agent still gets its units and runs them.
func TestStuckAgentsHoldBackNoOther(t *testing.T) {
	cli := newEtcd(t)
	e := startEngine(t, cli, "grpc", "e1")
	waitLeader(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := leaderGRPCAddr(ctx, cli)

	stuck := engine.SendWorkers()
	for i := range stuck {
		conn, err := grpc.NewClient(addr, dialOptions(t)...) // a connection each: no shared window
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		stream, err := agentpb.NewEngineClient(conn).Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		hello := &agentpb.Hello{Machine: &agentpb.Machine{Id: fmt.Sprintf("stuck%d", i), Ip: "127.0.0.1"}}
		if err := stream.Send(&agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Hello{Hello: hello}}); err != nil {
			t.Fatal(err)
		}
		go func() { // heard, so the leader keeps speaking to it; never read
			for ctx.Err() == nil {
				beat := &agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Heartbeat{Heartbeat: &agentpb.Heartbeat{UnixNano: time.Now().UnixNano()}}}
				if stream.Send(beat) != nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	startAgent(t, cli, "grpc", "free")
	waitMachines(t, e.Engine, stuck+1)

	// 100 units of 4 KiB files a stuck machine: 400 KiB each, past the
	// 64 KiB window of the test's server.
	long := strings.Repeat("Environment=PAD="+strings.Repeat("x", 1000)+"\n", 4)
	var cs []engine.Change
	for i := range stuck {
		for j := range 100 {
			name := fmt.Sprintf("s%d-%03d.service", i, j)
			text := fmt.Sprintf("[Service]\nExecStart=/bin/true\n%s[X-Fleet]\nMachineID=stuck%d\n", long, i)
			cs = append(cs, engine.Change{Name: name, File: parse(t, name, text), DesiredState: unit.Launched})
		}
	}
	if err := e.Apply(ctx, cs); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // every sender takes a stuck stream and blocks

	cs = nil
	for j := range 10 {
		name := fmt.Sprintf("free%02d.service", j)
		cs = append(cs, engine.Change{Name: name, File: parse(t, name, simple+"[X-Fleet]\nMachineID=free\n"), DesiredState: unit.Launched})
	}
	if err := e.Apply(ctx, cs); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 15*time.Second, "the free machine's units active", func() error {
		us, err := e.Units(nil)
		if err != nil {
			return err
		}
		active := 0
		for _, u := range us {
			if strings.HasPrefix(u.Name, "free") && u.State != nil && u.State.Active == "active" {
				active++
			}
		}
		if active != 10 {
			return fmt.Errorf("%d of 10 active", active)
		}
		return nil
	})
}
