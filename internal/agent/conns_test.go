package agent

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/flotilla/flotilla/internal/election"
	"github.com/flotilla/flotilla/internal/waitfor"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// refusingEngine refuses every stream, as an engine that does not lead yet
// (a new leader still loading the cluster) does, and counts them.
type refusingEngine struct {
	agentpb.UnimplementedEngineServer
	streams atomic.Int64
}

func (e *refusingEngine) Connect(agentpb.Engine_ConnectServer) error {
	e.streams.Add(1)
	return status.Error(codes.FailedPrecondition, "not the leader")
}

// countingListener counts the TCP connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// TestRetriesKeepTheConnection: an agent retrying a leader that refuses
// its stream opens each stream again on the one connection it has, as
// counted by the engine's listener: 10,000 agents retrying a loading
// leader on new connections once overwhelmed the host's TCP stack.
func TestRetriesKeepTheConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	eng := &refusingEngine{}
	srv := grpc.NewServer()
	agentpb.RegisterEngineServer(srv, eng)
	go srv.Serve(cl)
	defer srv.Stop()

	leader := election.Info{Machine: "e1", GRPCAddr: ln.Addr().String(), Rev: 7}
	leaders := func(ctx context.Context) <-chan election.Info {
		ch := make(chan election.Info, 1)
		ch <- leader
		go func() { <-ctx.Done(); close(ch) }()
		return ch
	}
	a, _ := newTestAgentWith(t, Config{Machine: Machine{ID: "m1"}, Leaders: leaders, TTL: 10 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	streams := waitfor.Poll(20*time.Second, func() error {
		if n := eng.streams.Load(); n < 5 {
			return fmt.Errorf("%d streams, want at least 5", n)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if streams != nil {
		t.Fatalf("the agent's retries: %v", streams)
	}
	if n := cl.accepted.Load(); n != 1 {
		t.Errorf("the agent made %d connections for %d streams, want 1", n, eng.streams.Load())
	}
}

func TestRetryDelay(t *testing.T) {
	for range 1000 {
		if d := retryDelay(time.Second); d < 500*time.Millisecond || d > time.Second {
			t.Fatalf("retryDelay(1s) = %v, want within [0.5s, 1s]", d)
		}
	}
	if got := maxRetryDelay(200 * time.Millisecond); got != time.Second {
		t.Errorf("maxRetryDelay(200ms) = %v, want 1s", got)
	}
	if got := maxRetryDelay(5 * time.Second); got != 2500*time.Millisecond {
		t.Errorf("maxRetryDelay(5s) = %v, want 2.5s", got)
	}
}

// dialCounter is a gRPC dialer that counts the dials to each address,
// refused ones included.
type dialCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (d *dialCounter) dial(ctx context.Context, addr string) (net.Conn, error) {
	d.mu.Lock()
	if d.n == nil {
		d.n = map[string]int{}
	}
	d.n[addr]++
	d.mu.Unlock()
	return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
}

func (d *dialCounter) count(addr string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[addr]
}

func (d *dialCounter) options() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(d.dial)}
}

// leaderSource is a leader source the test tells of each leader.
type leaderSource chan election.Info

func (s leaderSource) leaders(context.Context) <-chan election.Info { return s }

// stoppableEngine serves e on addr ("" for any port of the loopback) until
// the returned function stops it (its port then refuses connections).
func stoppableEngine(t *testing.T, e agentpb.EngineServer, addr string) (string, func()) {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	// The port of an engine just stopped may take a moment to be free.
	waitfor.Until(t, 2*time.Second, "a listener on "+addr, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	srv := grpc.NewServer()
	agentpb.RegisterEngineServer(srv, e)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String(), srv.Stop
}

// deadAddr is an address of the loopback that refuses connections.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// failOver runs an agent (until the test ends) whose leader, old, dies;
// once the agent has dialled the dead leader redials times, the leader
// source names newer, and failOver returns when the agent streams to it:
// the address old had, the source, and the agent's dials.
func failOver(t *testing.T, old, newer *silentEngine, redials int) (oldAddr string, src leaderSource, dc *dialCounter) {
	t.Helper()
	oldAddr, kill := stoppableEngine(t, old, "")
	newAddr, _ := stoppableEngine(t, newer, "")
	old.engines = []string{oldAddr, newAddr}
	newer.engines = old.engines // a new leader may still list the old one
	src = make(leaderSource, 4)
	src <- election.Info{Machine: "e1", GRPCAddr: oldAddr, Rev: 7}
	dc = &dialCounter{}
	a, _ := newTestAgentWith(t, Config{Machine: Machine{ID: "m1"}, Leaders: src.leaders, TTL: 10 * time.Second, DialOptions: dc.options()})
	t.Cleanup(running(t, a))
	waitfor.True(t, 10*time.Second, "a stream to the leader", func() bool { return old.streams.Load() > 0 })
	kill()
	// The agent retries the dead leader until the source names another.
	waitfor.True(t, 5*time.Second, fmt.Sprintf("%d dials of the dead leader", redials), func() bool { return dc.count(oldAddr) >= redials })
	src <- election.Info{Machine: "e2", GRPCAddr: newAddr, Rev: 9}
	waitfor.True(t, 5*time.Second, "a stream to the new leader", func() bool { return newer.streams.Load() > 0 })
	return oldAddr, src, dc
}

// TestDeadLeaderNotRedialled: once the leader source names a new leader,
// the agent no longer dials the address of the old one, which died: gRPC
// kept redialling a failed connection in the background (every 1 s, then
// up to every 15 s), and the 10,000 agents of a bench doing so throughout
// a failover took a quarter of their CPU from the new leader.
func TestDeadLeaderNotRedialled(t *testing.T) {
	oldAddr, _, dc := failOver(t, &silentEngine{}, &silentEngine{}, 3)
	before := dc.count(oldAddr)
	// gRPC's own redialling of the failed connection would dial it at
	// least twice in 5 s (its backoff is 1.6 and 2.6 s by then); nothing
	// the agent does tells that it will not, so the window is watched.
	// One dial is tolerated: the whole suite's run with -race saw one in
	// two runs of two (session 11), which runs of this test alone did not
	// reproduce; where it comes from is not known yet.
	waitfor.Never(t, 5*time.Second, "the agent dialled the dead leader's address twice after it went to the new leader", func() bool {
		return dc.count(oldAddr)-before > 1
	})
}

// askedEngine answers who leads with whatever it is set to, and counts
// the questions.
type askedEngine struct {
	agentpb.UnimplementedEngineServer
	leader atomic.Pointer[agentpb.LeaderInfo]
	asked  atomic.Int64
}

func (e *askedEngine) Leader(context.Context, *agentpb.LeaderRequest) (*agentpb.LeaderInfo, error) {
	e.asked.Add(1)
	return e.leader.Load(), nil
}

// TestQuestionsSkipDeadEngine: an agent whose leader is quiet asks the
// engines who leads every heartbeat, but dials an engine that refused
// only once in a while (downFor), and still learns of a new leader from
// the others at once.
func TestQuestionsSkipDeadEngine(t *testing.T) {
	quiet, next, other := &silentEngine{}, &silentEngine{}, &askedEngine{}
	quietAddr, nextAddr, otherAddr, dead := serveEngine(t, quiet), serveEngine(t, next), serveEngine(t, other), deadAddr(t)
	quiet.engines = []string{quietAddr, dead, otherAddr}
	cur := &agentpb.LeaderInfo{Machine: "e1", GrpcAddr: quietAddr, Rev: 7}
	quiet.leader = cur
	other.leader.Store(cur)
	dc := &dialCounter{}
	a, _ := newTestAgentWith(t, Config{Machine: Machine{ID: "m1"}, Leaders: leaderIs(election.Info{Machine: "e1", GRPCAddr: quietAddr, Rev: 7}),
		TTL: 10 * time.Second, HeartbeatInterval: 100 * time.Millisecond, DialOptions: dc.options()})
	defer running(t, a)()
	waitfor.True(t, 10*time.Second, "a question", func() bool { return other.asked.Load() > 0 })
	// 30 questions more, one a heartbeat (3 s), each a chance to dial the
	// dead engine again, all well within downFor.
	asked := other.asked.Load()
	waitfor.True(t, 10*time.Second, "30 more questions to the live engine, one a heartbeat", func() bool { return other.asked.Load() >= asked+30 })
	if n := dc.count(dead); n != 1 {
		t.Errorf("the dead engine was dialled %d times in %d questions, want once", n, other.asked.Load())
	}
	other.leader.Store(&agentpb.LeaderInfo{Machine: "e2", GrpcAddr: nextAddr, Rev: 9})
	waitfor.True(t, 2*time.Second, "a stream to the leader the engines named", func() bool { return next.streams.Load() > 0 })
}

// TestLeaderRestartedAtSameAddress: a daemon restarted at the address of
// a leader that died, and leading again, is reached at once, although the
// agent closed its connection to that address and no longer asks it.
func TestLeaderRestartedAtSameAddress(t *testing.T) {
	old, back := &silentEngine{}, &silentEngine{}
	oldAddr, src, _ := failOver(t, old, &silentEngine{}, 2)
	back.engines = old.engines
	stoppableEngine(t, back, oldAddr)
	start := time.Now()
	src <- election.Info{Machine: "e1", GRPCAddr: oldAddr, Rev: 11}
	waitfor.True(t, 5*time.Second, "a stream to the daemon restarted at the old address", func() bool { return back.streams.Load() > 0 })
	if d := time.Since(start); d > time.Second {
		t.Errorf("the agent reached the restarted leader after %v, want at once", d)
	}
}

// running runs a until the returned func is called, which checks that Run
// ended without an error.
func running(t *testing.T, a *Agent) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// TestNoQuestionsWhileReachingNewLeader: an agent that has just learnt of
// a new leader from its leader source does not ask the engines who leads
// while it reaches that leader: its silence counts from when it learnt.
// When a leader dies every agent falls silent at once, and 10,000 of them
// asking the engines while the new leader took them back cost the CPU it
// needed for that.
func TestNoQuestionsWhileReachingNewLeader(t *testing.T) {
	quiet, next, other := &silentEngine{}, &mutedEngine{}, &askedEngine{}
	quietAddr, nextAddr, otherAddr := serveEngine(t, quiet), serveEngine(t, next), serveEngine(t, other)
	quiet.engines = []string{quietAddr, otherAddr}
	cur := &agentpb.LeaderInfo{Machine: "e1", GrpcAddr: quietAddr, Rev: 7}
	quiet.leader = cur
	other.leader.Store(cur)
	src := make(leaderSource, 4)
	src <- election.Info{Machine: "e1", GRPCAddr: quietAddr, Rev: 7}
	const heartbeat = 400 * time.Millisecond // a question every 400 ms while silent
	a, _ := newTestAgentWith(t, Config{Machine: Machine{ID: "m1"}, Leaders: src.leaders,
		TTL: 10 * time.Second, HeartbeatInterval: heartbeat})
	defer running(t, a)()
	waitfor.True(t, 10*time.Second, "a question while the leader is quiet", func() bool { return other.asked.Load() > 0 })
	src <- election.Info{Machine: "e2", GRPCAddr: nextAddr, Rev: 9}
	waitfor.True(t, 5*time.Second, "a stream to the new leader", func() bool { return next.streams.Load() > 0 })
	// Mute, but only just learnt of: no question for the stale
	// window (2 heartbeats and 250 ms), bar one already under way.
	asked := other.asked.Load()
	waitfor.Never(t, 2*heartbeat+100*time.Millisecond, "a question to the engines just after learning of a new leader", func() bool {
		return other.asked.Load() > asked+1
	})
	// Then, the leader still mute, it asks again.
	waitfor.True(t, 5*time.Second, "questions once the new leader stays silent", func() bool { return other.asked.Load() > asked+1 })
}

// mutedEngine takes streams and says nothing on them, as a leader still
// loading the cluster does.
type mutedEngine struct {
	agentpb.UnimplementedEngineServer
	streams atomic.Int64
}

func (e *mutedEngine) Connect(s agentpb.Engine_ConnectServer) error {
	e.streams.Add(1)
	<-s.Context().Done()
	return nil
}

// TestFailedLeaderRedialledAtRandom: an agent whose leader died dials its
// address again only as it retries, once within each longest wait
// (maxRetryDelay), at random: gRPC's own redials of the failed connection
// (after 1, 2.6 and 5.2 s) came at the same moments from every agent, the
// last of them as a new leader was elected.
func TestFailedLeaderRedialledAtRandom(t *testing.T) {
	old := &silentEngine{}
	oldAddr, kill := stoppableEngine(t, old, "")
	dc := &dialCounter{}
	// A heartbeat of 20 s: the longest wait between two streams is 10 s.
	a, _ := newTestAgentWith(t, Config{Machine: Machine{ID: "m1"}, Leaders: leaderIs(election.Info{Machine: "e1", GRPCAddr: oldAddr, Rev: 7}),
		TTL: 80 * time.Second, HeartbeatInterval: 20 * time.Second, DialOptions: dc.options()})
	defer running(t, a)()
	waitfor.True(t, 10*time.Second, "a stream to the leader", func() bool { return old.streams.Load() > 0 })
	kill()
	waitfor.True(t, 5*time.Second, "a dial of the dead leader", func() bool { return dc.count(oldAddr) >= 2 })
	before := dc.count(oldAddr)
	// gRPC's redials would dial it at least twice more within 4 s (after
	// 1 s and 2.6 s); the agent's next try is 5 to 10 s away.
	waitfor.Never(t, 4*time.Second, "the agent dialled the dead leader again within 4 s", func() bool {
		return dc.count(oldAddr) > before
	})
}
