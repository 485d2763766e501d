package agent

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/keepalive"
)

// conns keeps one gRPC connection per engine address for the agent's whole
// life: its streams to the leader and its questions to the engines (who
// leads?) share it, and a stream the leader refuses or that breaks is
// opened again on the same connection. Only a connection that failed to an
// engine that is not (or no longer) the leader is closed, and made again
// when that engine is next asked (ask): gRPC would go on dialling it.
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
	// leader and leaderRev are the address and election revision of the
	// leader last asked for (leaderConn).
	leader    string
	leaderRev int64
	// down are the engines other than the leader found unreachable, with
	// when: they are not dialled again to be asked who leads before
	// downFor has passed (ask).
	down map[string]time.Time
	// closed is set by closeAll: no connection is made after it (a
	// question to the engines still under way as Run ends).
	closed bool
	// reset is when leaderConn last had a failing leader's connection
	// dial again at once while the agent was cut off (cutOffRedial).
	reset time.Time
}

// cutOffRedial is how often an agent cut off from its leader (no word for
// its TTL) has the leader's failing connection dial again at once, rather
// than after gRPC's backoff (up to 15 s): a partition that heals is then
// found within a few seconds. An agent that hears its leader never does.
const cutOffRedial = 2 * time.Second

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

// deadLeaderAfter is gRPC's keepalive for the agent's connections, given
// its TTL: a connection that has carried nothing from the leader for the
// TTL is pinged, and closed if the ping is not answered within twice the
// TTL (an answer needs the leader's transport, not its busy loop), so that
// a TCP connection a partition left open is not waited on: its
// retransmissions back off exponentially, and an agent that has no
// singleton unit (whose fence starts the stream over on a new connection,
// redial) found a 40 s partition healed 15 s after it did. While the
// leader is heard, the pings are never sent: it speaks every heartbeat, a
// quarter of the TTL at most. gRPC sends none more often than every 10 s.
func deadLeaderAfter(ttl time.Duration) grpc.DialOption {
	return grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: ttl, Timeout: 2 * ttl})
}

func newConns(opts []grpc.DialOption, ttl time.Duration) *conns {
	opts = append(opts[:len(opts):len(opts)], reconnectBackoff)
	if ttl > 0 {
		opts = append(opts, deadLeaderAfter(ttl))
	}
	return &conns{opts: opts, m: map[string]*grpc.ClientConn{}, down: map[string]time.Time{}}
}

// get returns the connection to addr, making it if there is none.
func (c *conns) get(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.getLocked(addr)
}

func (c *conns) getLocked(addr string) (*grpc.ClientConn, error) {
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
// was dead) tries again at once; so does it every cutOffRedial while the
// agent is cut off (no word from a leader for its TTL). The previous
// leader's connection, unless it is ready, is closed and that engine not
// asked who leads for downFor (dropUnreadyLocked, ask).
func (c *conns) leaderConn(addr string, rev int64, now time.Time, cutOff bool) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leader != addr {
		prev := c.leader
		c.leader = addr
		if c.dropUnreadyLocked(prev) {
			c.down[prev] = now
		}
	}
	delete(c.down, addr)
	cc, err := c.getLocked(addr)
	if err != nil {
		return nil, err
	}
	fresh := rev != c.leaderRev
	c.leaderRev = rev
	again := cutOff && now.Sub(c.reset) >= cutOffRedial
	if (fresh || again) && cc.GetState() == connectivity.TransientFailure {
		cc.ResetConnectBackoff()
		if again {
			c.reset = now
		}
	}
	return cc, nil
}

// dropFailed closes the connection to the leader at addr if it failed
// (TRANSIENT_FAILURE: its engine refused it or could not be reached), and
// tells whether it did: gRPC would dial it again in the background, after
// 1 s, 2.6 s and 5.2 s, whatever the agent does, and those redials of a
// dead leader's address by 10,000 agents came at once, 5 s after it died:
// when the engines' election (then a 5 s lease) made a new leader, which
// the agents then had to reach through them. The agent's next session dials
// afresh, when it chooses (Run).
func (c *conns) dropFailed(addr string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	cc := c.m[addr]
	if cc == nil || cc.GetState() != connectivity.TransientFailure {
		return false
	}
	cc.Close()
	delete(c.m, addr)
	return true
}

// redial closes the connection to addr, so that the next one is made
// afresh: a connection that carried no word from the leader for the
// agent's TTL may be a TCP connection a partition left open, whose
// retransmissions back off exponentially (a partition of P seconds was
// found up to about P seconds after it healed); a new connection's first
// packet goes out at once.
func (c *conns) redial(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc := c.m[addr]; cc != nil {
		cc.Close()
		delete(c.m, addr)
	}
}

// downFor is how long an engine other than the leader that was found
// unreachable is not dialled again to be asked who leads: the longest wait
// of reconnectBackoff, which is how often a failed connection that was
// kept tried again, but only while the agent asks.
const downFor = 15 * time.Second

// ask returns the connection to ask the engine at addr who leads, or nil
// if it is not to be asked now: it was found unreachable less than
// downFor ago, or its connection is failing (it is then closed). A
// connection that failed is never kept to an engine other than the
// leader: gRPC dials it again after each backoff, whether or not anything
// uses it (pick_first's sticky TRANSIENT_FAILURE), and the 10,000 agents
// of a bench redialling the dead leader's address throughout a failover
// took over a quarter of their processes' CPU while the new leader loaded
// the cluster on the same host. The agent asks only while its leader is
// quiet, so a dead engine is then dialled at most once every downFor, and
// not at all otherwise.
func (c *conns) ask(addr string, now time.Time) *grpc.ClientConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	if addr != c.leader {
		if at, ok := c.down[addr]; ok && now.Sub(at) < downFor {
			return nil
		}
		if c.dropFailingLocked(addr) {
			c.down[addr] = now
			return nil
		}
	}
	cc, err := c.getLocked(addr)
	if err != nil {
		return nil
	}
	return cc
}

// answered takes the outcome of asking the engine at addr on cc: an engine
// other than the leader that could not be reached has its connection
// closed, and is not asked again for downFor.
func (c *conns) answered(addr string, cc *grpc.ClientConn, err error, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if addr == c.leader || c.m[addr] != cc {
		return
	}
	if err == nil {
		delete(c.down, addr)
		return
	}
	if s := cc.GetState(); s != connectivity.Ready && s != connectivity.Idle {
		cc.Close()
		delete(c.m, addr)
		c.down[addr] = now
	}
}

// dropUnreadyLocked closes the connection to a replaced leader at addr
// unless it is ready, and tells whether it closed one: a leader replaced
// while its connection is failing, trying, or idle after its transport
// broke most likely died, and is not asked who leads for downFor (an idle
// connection kept was dialled again by the next question). Callers hold
// mu.
func (c *conns) dropUnreadyLocked(addr string) bool {
	cc := c.m[addr]
	if cc == nil || cc.GetState() == connectivity.Ready {
		return false
	}
	cc.Close()
	delete(c.m, addr)
	return true
}

// dropFailingLocked closes the connection to addr if it is failing
// (TRANSIENT_FAILURE: gRPC would dial it again and again) or still trying
// (CONNECTING: it would fail into that), and tells whether it failed. A
// connection that is ready, or idle (its transport broke and nothing has
// used it since: it dials only when used), is kept. Callers hold mu.
func (c *conns) dropFailingLocked(addr string) (failed bool) {
	cc := c.m[addr]
	if cc == nil {
		return false
	}
	switch cc.GetState() {
	case connectivity.TransientFailure:
		failed = true
	case connectivity.Connecting:
	default:
		return false
	}
	cc.Close()
	delete(c.m, addr)
	return failed
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
	for addr := range c.down {
		if !slices.Contains(addrs, addr) {
			delete(c.down, addr)
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
