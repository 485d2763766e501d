package agent

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flotilla/flotilla/internal/election"
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

	deadline := time.Now().Add(20 * time.Second)
	for eng.streams.Load() < 5 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := eng.streams.Load(); n < 5 {
		t.Fatalf("the agent opened %d streams in 20 s, want at least 5", n)
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
