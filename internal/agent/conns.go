package agent

import (
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
)

// conns keeps one gRPC connection per engine address for the agent's whole
// life: its streams to the leader and its questions to the engines (who
// leads?) share it, and a stream the leader refuses or that breaks is
// opened again on the same connection.
//
// A connection a session was once made with cost a TCP connection (and a
// TLS handshake, with mutual TLS) each time: 10,000 agents retrying a new
// leader that was still loading the cluster made some 10,000 connections a
// second, and the connect() calls of one host's agents (every port of the
// loopback to one address in use or in TIME_WAIT) took a third of the
// machine's CPU, until the leader itself lost its lease.
type conns struct {
	opts []grpc.DialOption
	mu   sync.Mutex
	m    map[string]*grpc.ClientConn
	// leaderRev is the election revision of the leader last asked for
	// (leaderConn).
	leaderRev int64
	// closed is set by closeAll: no connection is made after it (a
	// question to the engines still under way as Run ends).
	closed bool
}

// reconnectBackoff is how a kept connection whose engine went away tries
// again: after 1 s, then longer, every 15 s at most (gRPC's default waits
// up to two minutes). From 100 ms up to 2 s, the 10,000 agents of a bench
// kept 5,000 connects a second going to a dead leader's address, a
// quarter of their processes' CPU during a failover. A daemon restarted
// at that address that leads again is reached at once all the same: the
// agent hears of it from the engines, and a session to a leader it has
// not tried yet resets the connection's backoff (leaderConn).
var reconnectBackoff = grpc.WithConnectParams(grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: time.Second, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 15 * time.Second},
	MinConnectTimeout: 5 * time.Second,
})

func newConns(opts []grpc.DialOption) *conns {
	return &conns{opts: append(opts[:len(opts):len(opts)], reconnectBackoff), m: map[string]*grpc.ClientConn{}}
}

// get returns the connection to addr, making it if there is none.
func (c *conns) get(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc := c.m[addr]; cc != nil {
		return cc, nil
	}
	if c.closed {
		return nil, errConnsClosed
	}
	cc, err := grpc.NewClient(addr, c.opts...)
	if err != nil {
		return nil, err
	}
	c.m[addr] = cc
	return cc, nil
}

// leaderConn returns the connection to a leader at addr, elected at rev:
// the first time it is asked for a leader's connection after rev changed,
// one waiting out its backoff after failures (a leader at an address that
// was dead) tries again at once.
func (c *conns) leaderConn(addr string, rev int64) (*grpc.ClientConn, error) {
	cc, err := c.get(addr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	fresh := rev != c.leaderRev
	c.leaderRev = rev
	c.mu.Unlock()
	if fresh && cc.GetState() == connectivity.TransientFailure {
		cc.ResetConnectBackoff()
	}
	return cc, nil
}

// keep closes the connections to every address but addrs.
func (c *conns) keep(addrs ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for addr, cc := range c.m {
		keep := false
		for _, a := range addrs {
			keep = keep || a == addr
		}
		if !keep {
			cc.Close()
			delete(c.m, addr)
		}
	}
}

// closeAll closes every connection; none is made after.
func (c *conns) closeAll() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.keep()
}

var errConnsClosed = errors.New("agent: stopped; no connection is made")

// retryDelay is how long the agent waits before opening a stream again
// after one to the same leader ended: backoff, between half of it and all
// of it at random, so that the agents a leader lost at once do not come
// back at once.
func retryDelay(backoff time.Duration) time.Duration {
	return backoff/2 + rand.N(backoff/2+1)
}

// maxRetryDelay is the longest backoff between streams to one leader: a
// second, or half the heartbeat interval when that is longer (the leader
// lengthens it with the agents: 5 s at 10,000), so that many agents
// retrying a leader not yet serving cost it a steady rate of refusals.
func maxRetryDelay(heartbeat time.Duration) time.Duration {
	return max(time.Second, heartbeat/2)
}
