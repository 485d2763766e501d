package engine_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/flotilla/flotilla/internal/monotime"
)

// inBubble runs f in a testing/synctest bubble: time is virtual (timers,
// sleeps and waitfor's deadlines move only when every goroutine of the
// test waits), so the test neither sleeps nor depends on the host's speed.
// Everything f starts must live in the bubble: etcd is internal/memetcd
// (newEtcd), and the engines' gRPC servers listen on an in-memory network
// that the agents dial (listen, dialOptions), since a goroutine that waits
// on a socket never counts as waiting.
func inBubble(t *testing.T, f func(*testing.T)) {
	synctest.Test(t, func(t *testing.T) {
		nets.Store(t, &memNet{ls: map[string]*bufconn.Listener{}})
		t.Cleanup(func() { nets.Delete(t) })
		f(t)
	})
}

// bubbled returns f to run in a bubble, for t.Run.
func bubbled(f func(*testing.T)) func(*testing.T) {
	return func(t *testing.T) { inBubble(t, f) }
}

// nets holds the in-memory network of each test that runs in a bubble.
var nets sync.Map // testing.TB → *memNet

// memNet is a bubble's network: gRPC servers' listeners by address.
type memNet struct {
	mu   sync.Mutex
	next int
	ls   map[string]*bufconn.Listener
}

// listen returns a listener on the network and its address, a loopback
// address as the engine advertises one (no socket is opened).
func (n *memNet) listen() net.Listener {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.next++
	ln := &memListener{Listener: bufconn.Listen(1 << 20), addr: fmt.Sprintf("127.0.0.1:%d", n.next)}
	n.ls[ln.addr] = ln.Listener
	return ln
}

func (n *memNet) dial(ctx context.Context, addr string) (net.Conn, error) {
	n.mu.Lock()
	ln := n.ls[addr]
	n.mu.Unlock()
	if ln == nil {
		return nil, fmt.Errorf("dial %s: connection refused", addr)
	}
	return ln.DialContext(ctx)
}

type memListener struct {
	*bufconn.Listener
	addr string
}

func (l *memListener) Addr() net.Addr { return memAddr(l.addr) }

type memAddr string

func (a memAddr) Network() string { return "tcp" }
func (a memAddr) String() string  { return string(a) }

// listen returns a listener for an engine's gRPC server: on the bubble's
// network if the test runs in one, else on the loopback.
func listen(t testing.TB) net.Listener {
	t.Helper()
	if n, ok := nets.Load(t); ok {
		return n.(*memNet).listen()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// dialOptions are an agent's options to reach the engines' gRPC servers
// (through the bubble's network if the test runs in one), then more.
func dialOptions(t testing.TB, more ...grpc.DialOption) []grpc.DialOption {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if n, ok := nets.Load(t); ok {
		opts = append(opts, grpc.WithContextDialer(n.(*memNet).dial))
	}
	return append(opts, more...)
}

// mono is the monotonic clock of an engine or agent (their Config.Mono):
// in a bubble, the bubble's time, which only moves forward, so that the
// leader's stamps and the agent's count of its silence move with the
// test's timers; else nil, the machine's (monotime.Now).
func mono(t testing.TB) func() monotime.Time {
	if _, ok := nets.Load(t); !ok {
		return nil
	}
	return func() monotime.Time { return monotime.Time(time.Now().UnixNano()) }
}
