package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flotilla/flotilla/internal/driver/sim"
	"github.com/flotilla/flotilla/internal/election"
	"github.com/flotilla/flotilla/internal/waitfor"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// stuckDriver is a sim driver whose Start of one unit blocks until
// release is closed, as a real driver's call can.
type stuckDriver struct {
	*sim.Driver
	unit    string
	release chan struct{}
}

func (d *stuckDriver) Start(name string) error {
	if name == d.unit {
		<-d.release
	}
	return d.Driver.Start(name)
}

// TestWatchdogFiresWhileDriverStuck: the watchdog gives up a singleton
// unit once its LostAfter= has passed even while the reconciler is stuck
// in a driver call (it runs on a timer of its own), and the unit is killed
// once the driver answers again.
func TestWatchdogFiresWhileDriverStuck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, err := New(Config{Machine: Machine{ID: "m1"}, Leaders: noLeader, TTL: 5 * time.Second, Mono: fakeMono()})
		if err != nil {
			t.Fatal(err)
		}
		s, _ := sim.New(sim.Config{Machine: "m1", Notify: a.Notify})
		d := &stuckDriver{Driver: s, unit: "web.service", release: make(chan struct{})}
		a.SetDriver(d)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: &agentpb.Assignments{Full: true, Units: []*agentpb.Assignment{
			{Name: "db.service", File: singletonText(""), DesiredState: "launched"},
			{Name: "web.service", File: unitText(false), DesiredState: "launched"},
		}}}}, a.cfg.Mono())
		synctest.Wait() // db.service active; the reconciler stuck starting web.service
		if got, want := active(s)["db.service"], "active"; got != want {
			t.Fatalf("db.service is %q, want %q", got, want)
		}
		time.Sleep(6 * time.Second)
		synctest.Wait()
		a.mu.Lock()
		_, wanted := a.wants["db.service"]
		fenced := a.fenced["db.service"]
		a.mu.Unlock()
		if wanted || !fenced {
			t.Fatalf("6s without word, the driver stuck: db.service wanted %v, fenced %v; want given up and fenced", wanted, fenced)
		}
		select {
		case <-a.resync:
		default:
			t.Fatal("the watchdog did not ask the session to start over")
		}
		close(d.release)
		synctest.Wait()
		if got := active(s); got["db.service"] != "" || got["web.service"] != "active" {
			t.Fatalf("once the driver answered: units = %v, want db.service killed, web.service active", got)
		}
		cancel()
		<-done
	})
}

// silentEngine takes a stream, tells the engines' addresses once, then
// says nothing more; it answers who leads with leader.
type silentEngine struct {
	agentpb.UnimplementedEngineServer
	engines []string
	leader  *agentpb.LeaderInfo
	streams atomic.Int64
}

func (e *silentEngine) Connect(s agentpb.Engine_ConnectServer) error {
	e.streams.Add(1)
	if _, err := s.Recv(); err != nil { // the Hello
		return err
	}
	if err := s.Send(&agentpb.EngineMessage{Engines: e.engines, Msg: &agentpb.EngineMessage_Heartbeat{Heartbeat: &agentpb.Heartbeat{}}}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

func (e *silentEngine) Leader(context.Context, *agentpb.LeaderRequest) (*agentpb.LeaderInfo, error) {
	return e.leader, nil
}

// leaderIs is a leader source that names leader and nothing after.
func leaderIs(leader election.Info) func(ctx context.Context) <-chan election.Info {
	return func(ctx context.Context) <-chan election.Info {
		ch := make(chan election.Info, 1)
		ch <- leader
		go func() { <-ctx.Done(); close(ch) }()
		return ch
	}
}

// serveEngine serves e on a port of the loopback and returns its address.
func serveEngine(t *testing.T, e agentpb.EngineServer) string {
	t.Helper()
	addr, _ := stoppableEngine(t, e, "")
	return addr
}

// runUntilStream runs a until it has opened a stream to e (10 s at most).
func runUntilStream(t *testing.T, a *Agent, e *silentEngine) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	opened := waitfor.Poll(10*time.Second, func() error {
		if e.streams.Load() == 0 {
			return errors.New("no stream")
		}
		return nil
	})
	cancel()
	if opened != nil {
		t.Errorf("a stream to the engine: %v", opened)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestAgentFindsLeaderThroughEngines: an agent whose leader has gone
// quiet, and whose leader source (etcd) does not tell of another, asks
// the engines the leader named and opens a stream to the newer leader
// they name.
func TestAgentFindsLeaderThroughEngines(t *testing.T) {
	old, newer := &silentEngine{}, &silentEngine{}
	oldAddr, newAddr := serveEngine(t, old), serveEngine(t, newer)
	old.engines = []string{oldAddr, newAddr}
	newer.engines = old.engines
	old.leader = &agentpb.LeaderInfo{Machine: "e2", GrpcAddr: newAddr, Rev: 9}
	newer.leader = old.leader
	a, _ := newTestAgentWith(t, Config{Machine: Machine{ID: "m1"}, Leaders: leaderIs(election.Info{Machine: "e1", GRPCAddr: oldAddr, Rev: 7}), TTL: 10 * time.Second, HeartbeatInterval: 100 * time.Millisecond})
	runUntilStream(t, a, newer)
	if old.streams.Load() == 0 || newer.streams.Load() == 0 {
		t.Fatalf("streams to the quiet leader %d, to the newer one %d: want one at least to each", old.streams.Load(), newer.streams.Load())
	}
}

// TestAgentFindsLeaderThroughServers: an agent with no leader source (a
// machine that only runs units, no etcd) asks the servers it was given
// who leads, streams to that leader, and Leader tells it.
func TestAgentFindsLeaderThroughServers(t *testing.T) {
	server, leader := &silentEngine{}, &silentEngine{}
	serverAddr, leaderAddr := serveEngine(t, server), serveEngine(t, leader)
	server.leader = &agentpb.LeaderInfo{Machine: "e2", GrpcAddr: leaderAddr, ApiAddr: "127.0.0.1:7482", Rev: 5}
	a, _ := newTestAgentWith(t, Config{Machine: Machine{ID: "m1"}, Servers: []string{serverAddr}, TTL: 10 * time.Second, HeartbeatInterval: 100 * time.Millisecond})
	if in, ok := a.Leader(); ok {
		t.Errorf("Leader() before Run = %+v, want none", in)
	}
	runUntilStream(t, a, leader)
	in, ok := a.Leader()
	if leader.streams.Load() == 0 || server.streams.Load() != 0 {
		t.Fatalf("streams to the leader %d, to the server asked %d: want some to the leader alone", leader.streams.Load(), server.streams.Load())
	}
	if !ok || in.Machine != "e2" || in.APIAddr != "127.0.0.1:7482" {
		t.Errorf("Leader() = %+v, %v; want e2 at API 127.0.0.1:7482", in, ok)
	}
}

// holdingEngine assigns units on a stream and keeps it open.
type holdingEngine struct {
	agentpb.UnimplementedEngineServer
	updates, heartbeats atomic.Int64
}

func (e *holdingEngine) Connect(s agentpb.Engine_ConnectServer) error {
	if _, err := s.Recv(); err != nil {
		return err
	}
	var units []*agentpb.Assignment
	for _, n := range []string{"a.service", "b.service", "c.service"} {
		units = append(units, &agentpb.Assignment{Name: n, File: unitText(false), DesiredState: "launched"})
	}
	if err := s.Send(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: &agentpb.Assignments{Full: true, Units: units}}}); err != nil {
		return err
	}
	for {
		m, err := s.Recv()
		if err != nil {
			return nil
		}
		if m.GetUpdate() != nil {
			e.updates.Add(1)
		}
		if m.GetHeartbeat() != nil {
			e.heartbeats.Add(1)
		}
	}
}

// agentFrame matches a stack frame in the agent's own (not test) code.
var agentFrame = regexp.MustCompile(`/internal/agent/[a-z]+\.go:`)

// agentGoroutines counts the goroutines running the agent's own code.
func agentGoroutines() int {
	var b bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&b, 2)
	n := 0
	for _, g := range strings.Split(b.String(), "\n\n") {
		if agentFrame.MatchString(g) {
			n++
		}
	}
	return n
}

// TestAgentGoroutines: a connected agent with nothing to do runs only
// two goroutines of its own, its session and the stream's receiver (and
// gRPC's), and still sends its units' states and heartbeats: the host of
// simulated agents (flotilla bench) runs 5,000 agents a process, and every
// goroutine parked per agent is 4-8 KiB of stack each.
func TestAgentGoroutines(t *testing.T) {
	const want = 2
	eng := &holdingEngine{}
	addr := serveEngine(t, eng)
	a, d := newTestAgentWith(t, Config{Machine: Machine{ID: "m1"}, Leaders: leaderIs(election.Info{Machine: "e1", GRPCAddr: addr, Rev: 7}), TTL: 10 * time.Second, HeartbeatInterval: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	waitfor.Until(t, 10*time.Second, "3 units active, an update and heartbeats", func() error {
		if n, u, h := len(active(d)), eng.updates.Load(), eng.heartbeats.Load(); n < 3 || u == 0 || h < 2 {
			return fmt.Errorf("%d units active, %d updates, %d heartbeats", n, u, h)
		}
		return nil
	})
	// A timer's run may be under way at any one look: the agent idles
	// once one look finds no more than want.
	var stacks bytes.Buffer
	idle := waitfor.Poll(2*time.Second, func() error {
		if n := agentGoroutines(); n > want {
			stacks.Reset()
			pprof.Lookup("goroutine").WriteTo(&stacks, 1)
			return fmt.Errorf("%d goroutines run the agent's code", n)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if idle != nil {
		t.Fatalf("while the agent idles, want at most %d goroutines running its code: %v:\n%s", want, idle, stacks.String())
	}
	// The stream's goroutines end once they see its context done.
	waitfor.Until(t, 5*time.Second, "no goroutine running the agent's code after Run returned", func() error {
		if n := agentGoroutines(); n != 0 {
			return fmt.Errorf("%d goroutines", n)
		}
		return nil
	})
}
