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
// agents' port.
type connLimit struct {
	max     int64 // connections in all
	open    atomic.Int64
	pending atomic.Int64 // gRPC connections not authenticated yet
	log     *slog.Logger

	mu         sync.Mutex
	refused    int // since the last log line
	lastLogged time.Time
}

// newConnLimit bounds the connections by the process's open-files limit,
// less limits.ReservedFDs (at most half the limit) for everything else.
func newConnLimit(log *slog.Logger) *connLimit {
	var rl syscall.Rlimit
	n := int64(1 << 20)
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur < uint64(n) {
		n = int64(rl.Cur)
	}
	return &connLimit{max: connsFor(n), log: log}
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
	return &limitedListener{Listener: ln, c: c, grpc: grpc, plain: plain}
}

func (c *connLimit) refuse(why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refused++
	if time.Since(c.lastLogged) < 10*time.Second {
		return
	}
	c.log.Warn("refusing new connections", "why", why, "refused", c.refused, "open", c.open.Load(), "limit", c.max,
		"pending_grpc", c.pending.Load(), "pending_limit", limits.GRPCPendingConns)
	c.refused, c.lastLogged = 0, time.Now()
}

type limitedListener struct {
	net.Listener
	c           *connLimit
	grpc, plain bool
}

func (l *limitedListener) Accept() (net.Conn, error) {
	for {
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
			if l.c.pending.Add(1) > limits.GRPCPendingConns {
				l.c.pending.Add(-1)
				l.c.open.Add(-1)
				conn.Close()
				l.c.refuse("too many gRPC connections have not authenticated")
				continue
			}
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
		cc.c.pending.Add(-1)
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
