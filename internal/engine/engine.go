package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flotilla/flotilla/internal/election"
	"github.com/flotilla/flotilla/internal/machine"
	"github.com/flotilla/flotilla/internal/metrics"
	"github.com/flotilla/flotilla/internal/monotime"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// ErrNotLeader is returned by leader-only operations on an engine that does
// not lead.
var ErrNotLeader = errors.New("engine: not the leader")

// Config configures an Engine.
type Config struct {
	// Machine is this daemon's machine ID. Required.
	Machine string
	// Client is the etcd client. Required.
	Client *clientv3.Client
	// ElectionClient, if set, is the etcd client the election uses: the
	// campaign, the lease's renewals and the probes of etcd (degraded.go).
	// Give it its own connection (a client of its own) so that the
	// leader's large writes and watches on Client cannot delay a renewal
	// past the lease's TTL; nil uses Client.
	ElectionClient *clientv3.Client
	// Keys is the cluster's key layout; zero means registry.DefaultPrefix.
	Keys registry.Keys
	// ElectionTTL is the leader lease TTL (whole seconds; default 4s, min 1s):
	// a dead leader is replaced within about this long. The lease is
	// renewed every third of it, so it expires between two thirds of the
	// TTL and the TTL after the leader's last renewal, and etcd revokes an
	// expired lease within another half second: a new leader serves 2.7 to
	// 4.5 s after its predecessor died, against 3.3 to 5.5 s with 5 s,
	// which missed the 5 s a failover at a million units is to take
	// (docs/benchmarks.md, session 25). Taking the prepared state costs a
	// new leader milliseconds; the lease is all the rest.
	ElectionTTL time.Duration
	// AgentTTL is how long a machine may go unheard before its units are
	// moved (default 20s). It must exceed 2×ElectionTTL so that a leader
	// failover completes well inside it.
	AgentTTL time.Duration
	// HeartbeatInterval is how often the leader sends a heartbeat on an idle
	// stream (default AgentTTL/10, at most 1s).
	HeartbeatInterval time.Duration
	// GRPCAddr and APIAddr are advertised to agents and API servers through
	// the election. Required.
	GRPCAddr string
	APIAddr  string
	// Registry is how agents coordinate with the leader: "grpc" (default: a
	// stream each) or "etcd" (presence, states and assignments in etcd).
	Registry string
	// MaxTxnOps bounds the ops of one etcd transaction (default 128, etcd's
	// default --max-txn-ops).
	MaxTxnOps int
	// Metrics receives the engine's metrics; nil makes an unregistered set.
	Metrics *metrics.Set
	// Logger receives the engine's logs; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now. Tests substitute it.
	Now func() time.Time
	// Mono is the machine's monotonic clock, which stamps the messages to
	// agents (they time their leader's silence from it); nil means
	// monotime.Now. Tests under testing/synctest substitute one that
	// follows their fake time, as they do the agents'.
	Mono func() monotime.Time
	// LeaderInfo returns the leader as this daemon last learnt it from etcd,
	// for the Leader RPC agents ask when etcd cannot tell them; nil leaves
	// it unanswered.
	LeaderInfo func() (election.Info, bool)
	// AuthorizeAgent, if set, is asked whether the peer of an agent stream
	// (ctx is the stream's) may speak for machine, and claim its IP and API
	// address (host:port); a Hello it refuses ends the stream with
	// PermissionDenied (see helloAllowed). Daemons with TLS set
	// auth.CheckAgent; nil lets any agent in.
	AuthorizeAgent func(ctx context.Context, machine, ip, apiAddr string) error
}

func (c *Config) validate() error {
	if c.Machine == "" {
		return errors.New("engine: machine ID is required")
	}
	if c.Client == nil {
		return errors.New("engine: etcd client is required")
	}
	if c.GRPCAddr == "" || c.APIAddr == "" {
		return errors.New("engine: gRPC and API addresses are required")
	}
	if c.ElectionClient == nil {
		c.ElectionClient = c.Client
	}
	if c.ElectionTTL == 0 {
		c.ElectionTTL = DefaultElectionTTL
	}
	if c.ElectionTTL < time.Second {
		return fmt.Errorf("engine: election TTL %v is below etcd's 1s lease granularity", c.ElectionTTL)
	}
	if c.AgentTTL == 0 {
		c.AgentTTL = machine.DefaultTTL
	}
	if min := MinAgentTTL(c.ElectionTTL); c.AgentTTL < min {
		return fmt.Errorf("engine: agent TTL %v is too short for election TTL %v: a leader failover can take up to %v, so use at least %v", c.AgentTTL, c.ElectionTTL, min-FailoverMargin, min)
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = min(c.AgentTTL/10, time.Second)
	}
	mode, err := registry.ParseMode(c.Registry)
	if err != nil {
		return fmt.Errorf("engine: registry %w", err)
	}
	c.Registry = mode
	if c.MaxTxnOps == 0 {
		c.MaxTxnOps = 128
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Metrics == nil {
		c.Metrics = metrics.New()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Mono == nil {
		c.Mono = monotime.Now
	}
	return nil
}

// FailoverMargin is what a leader failover may take beyond twice the
// election TTL: when the dead leader's etcd member was also etcd's raft
// leader, etcd first elects a new raft leader (about a second) and extends
// every lease by its election timeout (another second) before the dead
// engine's lease can expire; then agents need a moment to reconnect.
const FailoverMargin = 3 * time.Second

// DefaultElectionTTL is ElectionTTL's default.
const DefaultElectionTTL = 4 * time.Second

// MinAgentTTL is the shortest agent TTL that keeps a leader failover inside
// it for an election TTL: twice the TTL (a lease may be renewed just before
// the leader dies and expires up to a TTL later, then the next candidate
// campaigns) plus FailoverMargin.
func MinAgentTTL(electionTTL time.Duration) time.Duration {
	return 2*electionTTL + FailoverMargin
}

// Engine campaigns for leadership and, while it leads, runs a term.
type Engine struct {
	agentpb.UnimplementedEngineServer
	cfg  Config
	log  *slog.Logger
	term atomic.Pointer[term]
	// generation numbers the published cluster states, across terms.
	generation atomic.Uint64
	// onTerm, if set, is called with each term as it starts (tests).
	onTerm func(*term)
	// loading is closed when the term this engine was elected for is
	// loaded (or failed to load); nil while it is not loading one.
	loading atomic.Pointer[chan struct{}]
	// refused is why this engine does not campaign (schema.go), nil
	// while it does.
	refused atomic.Pointer[error]
	// standby prepares a term's state while the engine campaigns (nil
	// while it does not).
	standby atomic.Pointer[standby]
}

// New returns an engine; Run makes it campaign.
func New(cfg Config) (*Engine, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Engine{cfg: cfg, log: cfg.Logger.With("component", "engine", "machine", cfg.Machine)}, nil
}

// Run campaigns, leads while elected, and campaigns again when a term ends,
// until ctx is done.
func (e *Engine) Run(ctx context.Context) error {
	me := election.Info{Machine: e.cfg.Machine, GRPCAddr: e.cfg.GRPCAddr, APIAddr: e.cfg.APIAddr}
	for ctx.Err() == nil {
		if !e.mayLead(ctx) {
			continue
		}
		// While it campaigns, the engine follows the durable record, so
		// that if it wins it need not read it all from etcd
		// (registry.Follower), and prepares the state a term would make
		// of it (standby.go); it stops both once it leads, when it writes
		// the record itself.
		fctx, stopFollowing := context.WithCancel(ctx)
		var (
			fol *registry.Follower
			sb  *standby
		)
		if e.cfg.Registry == registry.ModeGRPC {
			fol = registry.NewFollower(e.cfg.Client, e.cfg.Keys)
			go fol.Run(fctx)
			sb = newStandby(e, fol)
			go sb.run(fctx)
			e.standby.Store(sb)
		}
		t, err := election.Campaign(ctx, e.cfg.ElectionClient, e.cfg.Keys.Election(), e.cfg.ElectionTTL, me)
		if err != nil {
			e.standby.Store(nil)
			stopFollowing()
			if ctx.Err() != nil {
				break
			}
			e.log.Warn("campaign failed; retrying", "err", err)
			sleepCtx(ctx, time.Second)
			continue
		}
		e.lead(ctx, t, fol, sb, stopFollowing)
	}
	if t := e.leader(); t != nil {
		e.drop(t) // a degraded term
	}
	return nil
}

// lead runs one term until it ends.
func (e *Engine) lead(ctx context.Context, el *election.Term, fol *registry.Follower, sb *standby, stopFollowing func()) {
	log := e.log.With("leader_rev", el.Info.Rev)
	started := e.cfg.Now()
	ready := make(chan struct{})
	e.loading.Store(&ready)
	t, err := newTerm(ctx, e, el, fol, sb)
	e.standby.Store(nil)
	stopFollowing()
	if err == nil {
		e.install(t)
	}
	e.loading.Store(nil)
	close(ready)
	if refusesSchema(err) {
		e.refuse(err) // Run waits in mayLead before it campaigns again
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		el.Resign(rctx)
		cancel()
		return
	}
	if err != nil {
		log.Error("could not start term; resigning", "err", err)
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		el.Resign(rctx)
		cancel()
		sleepCtx(ctx, time.Second)
		return
	}
	log.Info("elected leader", "units", t.loaded, "from", t.loadedFrom, "load_ms", e.cfg.Now().Sub(started).Milliseconds())
	if e.onTerm != nil {
		e.onTerm(t)
	}
	t.wg.Add(1)
	go func() { defer t.wg.Done(); t.watchLease() }()
	select {
	case <-ctx.Done():
		log.Info("stopping; resigning leadership")
	case <-el.Done():
		log.Warn("election term ended", "err", el.Err())
	case <-t.deg.lost:
		log.Warn("lost leadership (etcd says the election lease is gone)")
	case <-t.deg.c:
	case <-t.ctx.Done():
		log.Warn("term ended", "err", context.Cause(t.ctx))
	}
	if e.keepDegraded(ctx, t, el) {
		return // campaign again; the degraded term answers reads meanwhile
	}
	e.drop(t)
	rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	el.Resign(rctx)
	cancel()
}

// Leader returns the current term if this engine leads, else nil.
func (e *Engine) leader() *term { return e.term.Load() }

// leaderOnceLoaded is leader, but when this engine was elected and is
// loading its term it waits for the load (or ctx) first: agents that
// found the new leader wait for it on their streams, instead of being
// refused and saying Hello again and again (10,000 agents, each every
// couple of seconds, while a million units loaded).
func (e *Engine) leaderOnceLoaded(ctx context.Context) *term {
	if t := e.leader(); t != nil {
		return t
	}
	if ready := e.loading.Load(); ready != nil {
		select {
		case <-*ready:
		case <-ctx.Done():
		}
	}
	return e.leader()
}

// IsLeader reports whether this engine leads now, and its election
// revision; a degraded term leads (for reads) until it is replaced.
func (e *Engine) IsLeader() (bool, int64) {
	if t := e.term.Load(); t != nil {
		return true, t.info.Rev
	}
	return false, 0
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
