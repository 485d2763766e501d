package daemon

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/flotilla/flotilla/internal/limits"
)

// connLimit bounds the connections the daemon's listeners (the API's and
// the agents' gRPC) hold at once, so that running out of file descriptors
// never reaches the embedded etcd member, whose WAL and snapshots fail
// fatally without one, nor the units' logs: a connection beyond the bound
// is closed as soon as it is accepted. gRPC connections that have not
// finished their handshake (TLS: authenticated the peer) have a bound of
// their own, limits.GRPCPendingConns, so idle connections cannot hold the
// agents' port: while that many are pending, the gRPC listener accepts no
// more, and the next wait in the kernel's listen queue until one is
// authenticated or closed (idle ones are closed after
// limits.GRPCHandshakeTimeout). Closing them instead, as this did, turned
// the 10,000 agents that came back to a new leader at once into 29,000
// refused connections, each followed by the agent's reconnect backoff of
// one second and more: every agent was back 22–28 s after a failover at
// 100,000 units, 5.5 s after the new leader served (docs/benchmarks.md,
// session 16).
type connLimit struct {
	max     int64 // connections in all
	open    atomic.Int64
	pending atomic.Int64  // gRPC connections not authenticated yet
	room    chan struct{} // cap 1: pending went down
	log     *slog.Logger

	mu         sync.Mutex
	refused    int // since the last log line
	held       int // accepts put off while pending was full, since the last log line
	lastLogged time.Time
	lastHeld   time.Time
}

// newConnLimit bounds the connections by the process's open-files limit,
// less limits.ReservedFDs (at most half the limit) for everything else.
func newConnLimit(log *slog.Logger) *connLimit {
	var rl syscall.Rlimit
	n := int64(1 << 20)
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur < uint64(n) {
		n = int64(rl.Cur)
	}
	return &connLimit{max: connsFor(n), log: log, room: make(chan struct{}, 1)}
}

// connsFor is how many connections the listeners may hold under an
// open-files limit of n.
func connsFor(n int64) int64 {
	return n - min(n/2, max(limits.ReservedFDs, n/4))
}

// wrap bounds the connections ln accepts. grpc makes them count as gRPC
// connections, pending until authenticated (see handshakeCreds), or until
// they send anything when plain is set (no TLS: nothing to authenticate).
func (c *connLimit) wrap(ln net.Listener, grpc, plain bool) net.Listener {
	return &limitedListener{Listener: ln, c: c, grpc: grpc, plain: plain, closed: make(chan struct{})}
}

// awaitRoom returns once fewer than limits.GRPCPendingConns gRPC
// connections are pending, or closed is.
func (c *connLimit) awaitRoom(closed <-chan struct{}) {
	if c.pending.Load() < limits.GRPCPendingConns {
		return
	}
	c.mu.Lock()
	c.held++
	if time.Since(c.lastHeld) >= 10*time.Second {
		c.log.Warn("holding new gRPC connections in the listen queue: too many have not authenticated", "held", c.held,
			"pending_grpc", c.pending.Load(), "pending_limit", limits.GRPCPendingConns)
		c.held, c.lastHeld = 0, time.Now()
	}
	c.mu.Unlock()
	for c.pending.Load() >= limits.GRPCPendingConns {
		select {
		case <-c.room:
		case <-closed:
			return
		}
	}
}

// unpend counts one gRPC connection less as pending.
func (c *connLimit) unpend() {
	c.pending.Add(-1)
	select {
	case c.room <- struct{}{}:
	default:
	}
}

func (c *connLimit) refuse(why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refused++
	if time.Since(c.lastLogged) < 10*time.Second {
		return
	}
	c.log.Warn("refusing new connections", "why", why, "refused", c.refused, "open", c.open.Load(), "limit", c.max)
	c.refused, c.lastLogged = 0, time.Now()
}

type limitedListener struct {
	net.Listener
	c           *connLimit
	grpc, plain bool
	closed      chan struct{}
	closeOnce   sync.Once
}

func (l *limitedListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		if l.grpc {
			l.c.awaitRoom(l.closed)
		}
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.c.open.Add(1) > l.c.max {
			l.c.open.Add(-1)
			conn.Close()
			l.c.refuse("the daemon holds as many connections as its open-files limit allows, less those kept for etcd and the units")
			continue
		}
		cc := &countedConn{Conn: conn, c: l.c, plain: l.plain}
		if l.grpc {
			l.c.pending.Add(1) // one listener accepts them: at most the bound
			cc.pending.Store(true)
		}
		return cc, nil
	}
}

// countedConn is a connection counted by a connLimit until it is closed.
type countedConn struct {
	net.Conn
	c       *connLimit
	plain   bool
	pending atomic.Bool
	once    sync.Once
}

// authenticated stops counting the connection as pending.
func (cc *countedConn) authenticated() {
	if cc.pending.CompareAndSwap(true, false) {
		cc.c.unpend()
	}
}

func (cc *countedConn) Read(b []byte) (int, error) {
	n, err := cc.Conn.Read(b)
	if n > 0 && cc.plain {
		cc.authenticated()
	}
	return n, err
}

func (cc *countedConn) Close() error {
	cc.once.Do(func() {
		cc.authenticated()
		cc.c.open.Add(-1)
	})
	return cc.Conn.Close()
}

// handshakeCreds are the gRPC server's TLS credentials, which mark a
// connection authenticated once its handshake succeeded.
type handshakeCreds struct {
	credentials.TransportCredentials
}

func (h handshakeCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := h.TransportCredentials.ServerHandshake(raw)
	if err == nil {
		if cc, ok := raw.(*countedConn); ok {
			cc.authenticated()
		}
	}
	return conn, info, err
}

func (h handshakeCreds) Clone() credentials.TransportCredentials {
	return handshakeCreds{h.TransportCredentials.Clone()}
}
