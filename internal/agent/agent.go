// Package agent runs on every machine: it keeps one stream to the engine
// leader, drives its units to the state the leader assigns through a driver,
// and reports every unit's state back.
//
// The protocol, from the agent's side:
//
//  0. On start, adopt what the driver already runs (units outlive the
//     daemon: the exec driver's supervisor kept them): they are reported
//     as they are and nothing is restarted.
//  1. Find the leader (its gRPC address and term revision) through etcd,
//     or, on a machine that only runs units (Config.Servers: it has no
//     access to etcd), by asking the servers it was given who leads
//     (the engines' Leader call), and then every engine the leader names.
//  2. Open the stream; send Hello with the machine and every loaded unit's
//     status. The leader answers with the machine's full desired set; any
//     loaded unit not in it is unloaded, and the rest are loaded, started or
//     stopped as needed. Units already in their desired state are left
//     alone, so a change of leader restarts nothing.
//  3. Apply each later delta; send status changes (coalesced) and a
//     heartbeat when idle.
//  4. When the stream breaks or the leader changes, go back to 1. Units keep
//     running meanwhile. A stream is opened again on the connection the
//     agent keeps to each engine (conns.go), after a jittered backoff of
//     up to half the heartbeat interval (at least 1 s), so that thousands
//     of agents retrying a leader still loading cost it streams, not TCP
//     connections and handshakes. A leader that refuses the Hello because another
//     live daemon holds the machine's name (with another instance: another
//     data dir) ends Run with ErrNameInUse, or, with Config.OnRefused (the
//     daemon's), has the agent say Hello again every RefusedRetry until
//     the name is free. So does a Hello whose protocol version is outside
//     the leader's window (ErrIncompatible: a rolling upgrade skipped a
//     release), until the leader or this machine is upgraded.
//  5. The cut-off policy. Every message from the leader carries the
//     leader's monotonic send time; the agent maps it onto the machine's
//     monotonic clock (monotime) with the smallest offset seen on the
//     stream, so a message that waited in a socket while this process was
//     frozen counts as old, and keeps the latest as its word from a current
//     leader (a leader sends nothing once its lease may have lapsed).
//     Ordinary units keep running however long the machine is cut off; the
//     leader replaces them elsewhere after their LostAfter= and stops the
//     extra copy when the machine is back. A Singleton=true unit is killed
//     once LostAfter= (default: the shorter of the agent's TTL and the
//     leader's) has passed since that word: by the driver itself where it
//     can (driver.Fencer: the supervisor holds the deadline, so a frozen
//     daemon still has it killed on time), and by the agent's watchdog
//     otherwise. The leader places it elsewhere only after that. Global
//     units are never stopped for being cut off.
//  6. Leave (daemon --stop-units-on-exit, fleet's shutdown): stop carrying
//     out assignments, unload every unit, send Leave; the leader places
//     the units elsewhere at once. Run then returns.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/flotilla/flotilla/internal/driver"
	"github.com/flotilla/flotilla/internal/election"
	"github.com/flotilla/flotilla/internal/health"
	"github.com/flotilla/flotilla/internal/limits"
	"github.com/flotilla/flotilla/internal/machine"
	"github.com/flotilla/flotilla/internal/monotime"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/version"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// Machine is what the agent tells the leader about its machine.
type Machine struct {
	ID       string
	IP       string
	Metadata map[string]string
	APIAddr  string
	Version  string
	// Capacity offered to units: CPU percent (400 = four CPUs) and memory
	// bytes; 0 means not limited.
	CPUPercent  int64
	MemoryBytes int64
	// Drivers are the drivers the machine runs units with.
	Drivers unit.DriverSet
	// Instance identifies the daemon's data dir (see the daemon's
	// instance file): the leader refuses the agent while another live
	// daemon holds the machine ID with another instance.
	Instance string
	// Protocol is the agent protocol the machine says it speaks; 0 means
	// version.ProtocolVersion. The leader refuses one outside its window
	// (ErrIncompatible).
	Protocol int
}

// ErrNameInUse is returned by Run when the leader refuses the machine's ID
// because another live daemon holds it; the error names that daemon.
var ErrNameInUse = errors.New("agent: machine name in use")

// ErrIncompatible is returned by Run when the leader refuses the agent's
// protocol version, outside the leader's window; the error names both
// releases and protocols.
var ErrIncompatible = errors.New("agent: protocol refused by the leader")

// Config configures an Agent.
type Config struct {
	Machine Machine
	// Registry is how the agent coordinates with the leader: "grpc"
	// (default: one stream to the leader) or "etcd" (presence, states and
	// assignments in etcd, as fleet did).
	Registry string
	// Leaders returns a channel of the current leader, sent again each time
	// it changes (the zero Info while there is none). In grpc mode it or
	// Servers is required.
	Leaders func(ctx context.Context) <-chan election.Info
	// Servers are the gRPC addresses (host:port) of engines to ask who
	// leads (their Leader call) when Leaders does not tell: at start, and
	// whenever word from the leader stops. A machine that only runs units
	// has no etcd to learn the leader from and is given them (daemon
	// --servers), as Nomad's clients are given their servers.
	Servers []string
	// Etcd is the agent's own etcd client. Required in etcd mode.
	Etcd *clientv3.Client
	// Keys is the cluster's key layout in etcd (etcd mode).
	Keys registry.Keys
	// Driver runs the units. Required.
	Driver driver.Driver
	// TTL is the default LostAfter= of singleton units: how long they keep
	// running without word from a current leader (default 20s); it should
	// match the engines' agent TTL (the shorter of the two is used).
	TTL time.Duration
	// HeartbeatInterval is how often an idle stream carries a heartbeat
	// (default TTL/10, at most 1s).
	HeartbeatInterval time.Duration
	// DialOptions for the leader's gRPC server; default plaintext.
	DialOptions []grpc.DialOption
	Logger      *slog.Logger
	Now         func() time.Time
	// Mono is the machine's monotonic clock; nil means monotime.Now. Tests
	// under testing/synctest substitute one that follows their fake time.
	Mono func() monotime.Time
	// OnRefused, if set, keeps Run going when the leader refuses the
	// machine's ID because another live daemon holds it (ErrNameInUse), or
	// its protocol version (ErrIncompatible, during a rolling upgrade):
	// Run calls it with the refusal, tries again every RefusedRetry, and
	// calls it with nil once it has joined, as fleetd kept retrying. Nil:
	// Run returns the refusal.
	OnRefused func(error)
	// ProbeCommand builds the processes of [X-Check] Exec= probes as the
	// unit's own are built (the daemon gives the exec driver's); nil runs
	// them as the agent, with its environment.
	ProbeCommand ProbeCommand
	// ProbeRunner, if set, runs the processes ProbeCommand builds, in
	// place of starting and waiting for them (health.CommandRunner).
	ProbeRunner health.CommandRunner
}

// RefusedRetry is how often an agent whose machine ID is held by another
// live daemon, or whose protocol the leader refuses, tries again
// (Config.OnRefused).
const RefusedRetry = 2 * time.Second

// Agent is one machine's agent. Make it with New; Notify must be wired to
// the driver's notifications (see New).
type Agent struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	wants  map[string]want
	files  map[string]*unit.File
	protos map[[2]string]*unit.File // (template's prefix, text) -> an instance parsed from it (parseAssigned)
	// texts are the unit files the leader sent by key on the current
	// stream (Assignments.files): assignments name them by key.
	texts    map[string]string
	haves    map[string]have
	statuses map[string]report // the driver's latest report per unit (report.go)
	dirty    map[string]bool   // units whose status is to be sent
	removed  map[string]bool   // units unloaded since the last send
	// word is when the latest word from a current leader was sent, on the
	// machine's monotonic clock (0: none since the agent started); started
	// is when the agent started, which stands in for it until then.
	word    monotime.Time
	started monotime.Time
	// fenced names the singleton units killed for want of word: they are
	// started again only when a leader assigns them anew.
	fenced map[string]bool
	// kill names units to end at once rather than stop gracefully: they
	// were cut off and are being started elsewhere.
	kill map[string]bool
	// destroyed names loaded units the leader says were destroyed (not
	// moved): their logs are removed once they are unloaded.
	destroyed map[string]bool
	// wasRefused: the leader refused the machine's ID since it last took
	// it (Config.OnRefused).
	wasRefused bool
	// leaderTTL is the agent TTL the leader last told (0: not told); the
	// default LostAfter= is the shorter of it and the agent's own.
	leaderTTL time.Duration
	// fencedAt is the deadline and units last handed to the driver's
	// Fencer, so an unchanged fence is not sent again.
	fencedAt    monotime.Time
	fencedUnits string
	// resync asks the session to start over (a new Hello and full set)
	// after the watchdog killed units: the leader must learn of it and may
	// assign them again.
	resync chan struct{}
	// engines are the engine candidates' gRPC addresses, as the leader last
	// told them: asked who leads when word stops and etcd does not say.
	engines []string
	// heartbeatNano is the heartbeat interval in use (nanoseconds): the
	// configured one until a leader tells another (it lengthens it as
	// agents join, so that thousands of them stay cheap).
	heartbeatNano atomic.Int64
	// minLost is the shortest LostAfter= of the singleton units wanted
	// here (0: none): the watchdog looks no further while word is newer.
	minLost time.Duration
	// singletons tells, without mu, whether minLost is set: the watchdog
	// runs every half heartbeat while it is, and once a minute otherwise
	// (a host of 5,000 simulated agents has none). watch is the
	// watchdog's timer while Run runs.
	singletons atomic.Bool
	watch      *periodic
	// conns are the agent's connections to the engines (conns.go).
	conns *conns
	// lw is who leads, as Run knows it (nil before Run).
	lw atomic.Pointer[leaderWatch]

	// rec runs the reconciliation passes (timers.go).
	rec reconciler
	// flush is signalled when there are changes to send (wake): the etcd
	// session reads it; a stream's sender is told directly.
	flush  chan struct{}
	sender atomic.Pointer[sender]

	// leaving is set by Leave: the reconciler stops carrying out
	// assignments. leaveNow is closed once the units are stopped, for the
	// session to tell the leader; left is closed once it has.
	leaving   bool
	leaveOnce sync.Once
	leaveNow  chan struct{}
	left      chan struct{}
	leftOnce  sync.Once

	// checks are the [X-Check] probes being run, of active units
	// (checks.go); restarting names units stopped for being unhealthy,
	// to be started again once stopped, and restarted those started
	// again whose new checks have not begun. checksStopped: Run has ended.
	checks        map[string]*checkRun
	restarting    map[string]bool
	restarted     map[string]bool
	checksStopped bool
}

// New returns an agent. The driver must deliver its notifications to the
// returned agent's Notify method.
func New(cfg Config) (*Agent, error) {
	if cfg.Machine.ID == "" {
		return nil, errors.New("agent: machine ID is required")
	}
	mode, err := registry.ParseMode(cfg.Registry)
	if err != nil {
		return nil, fmt.Errorf("agent: registry %w", err)
	}
	cfg.Registry = mode
	if mode == registry.ModeGRPC && cfg.Leaders == nil && len(cfg.Servers) == 0 {
		return nil, errors.New("agent: a leader source or servers to ask are required")
	}
	if mode == registry.ModeEtcd && cfg.Etcd == nil {
		return nil, errors.New("agent: etcd mode needs an etcd client")
	}
	if cfg.TTL == 0 {
		cfg.TTL = machine.DefaultTTL
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = min(cfg.TTL/10, time.Second)
	}
	if cfg.DialOptions == nil {
		cfg.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limits.AgentRecvBytes)))
	cfg.DialOptions = append(cfg.DialOptions, agentpb.ClientTransport()...)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Mono == nil {
		cfg.Mono = monotime.Now
	}
	a := &Agent{
		cfg: cfg, log: cfg.Logger.With("component", "agent", "machine", cfg.Machine.ID),
		wants: map[string]want{}, files: map[string]*unit.File{}, protos: map[[2]string]*unit.File{}, haves: map[string]have{},
		statuses: map[string]report{}, dirty: map[string]bool{}, removed: map[string]bool{}, kill: map[string]bool{},
		fenced: map[string]bool{}, destroyed: map[string]bool{},
		checks: map[string]*checkRun{}, restarting: map[string]bool{}, restarted: map[string]bool{},
		flush: make(chan struct{}, 1), resync: make(chan struct{}, 1),
		leaveNow: make(chan struct{}), left: make(chan struct{}),
	}
	a.heartbeatNano.Store(int64(cfg.HeartbeatInterval))
	a.conns = newConns(cfg.DialOptions, cfg.TTL)
	return a, nil
}

// heartbeat is the heartbeat interval in use: how often an idle stream
// carries one, and what the agent's timers are paced by.
func (a *Agent) heartbeat() time.Duration { return time.Duration(a.heartbeatNano.Load()) }

// setHeartbeat takes the interval a leader tells (0: none told). It is
// never longer than a quarter of the agent's own TTL: the leader bounds it
// by its TTL, and the two should match.
func (a *Agent) setHeartbeat(ms int64) {
	if ms <= 0 {
		return
	}
	h := time.Duration(ms) * time.Millisecond
	h = min(h, max(a.cfg.TTL/4, a.cfg.HeartbeatInterval))
	a.heartbeatNano.Store(int64(h))
}

// SetDriver sets the driver when it has to be made after the agent (its
// notifications go to the agent). It must be called before Run.
func (a *Agent) SetDriver(d driver.Driver) { a.cfg.Driver = d }

// resultFenced is the Result of a unit the driver killed at its fence's
// deadline (driver.Fencer).
const resultFenced = "fenced"

// Notify is the driver's notification sink.
func (a *Agent) Notify(s unit.Status) {
	a.mu.Lock()
	h, ok := a.haves[s.Name]
	if !ok {
		a.mu.Unlock()
		return // a late report about a unit already unloaded
	}
	prev, had := a.statuses[s.Name]
	a.statuses[s.Name] = compact(s)
	a.dirty[s.Name] = true
	// A driver that runs the checks logs their turns in its own log (the
	// supervisor's) and the unit's; the daemon's says so too.
	turned := s.Health == health.Unhealthy && (!had || prev.states[4] != health.Unhealthy) && a.driverChecksLocked(s.Name)
	restarts := turned && a.files[s.Name] != nil && a.files[s.Name].Check != nil && a.files[s.Name].Check.OnUnhealthy == "restart"
	fenced := s.Result == resultFenced && h.Applied == unit.Launched
	if fenced {
		// The driver killed it at its deadline: it is started again if a
		// leader still assigns it here once word comes (the driver refuses
		// until then).
		h.Applied = unit.Loaded
		a.haves[s.Name] = h
	}
	stop := a.syncChecksLocked(s.Name, nil)
	restart := a.restartLocked(s.Name, s)
	a.mu.Unlock()
	switch {
	case restarts:
		a.log.Warn("unit unhealthy; its driver is restarting it (OnUnhealthy=restart)", "unit", s.Name)
	case turned:
		a.log.Warn("unit unhealthy", "unit", s.Name)
	}
	stopChecks(stop)
	if restart {
		a.restartUnhealthy(s.Name)
	}
	a.wake()
	if fenced {
		a.kickReconcile()
	}
}

// wake has the changes sent: by the stream's sender, or the etcd session.
func (a *Agent) wake() {
	signal(a.flush)
	if s := a.sender.Load(); s != nil {
		s.flush()
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Run keeps the agent connected and its units reconciled until ctx is done
// or the machine has left the cluster (Leave). It does not stop the units:
// the caller closes the driver. It returns an error wrapping ErrNameInUse
// when the leader refuses the machine's ID, held by another live daemon.
func (a *Agent) Run(ctx context.Context) error {
	if a.cfg.Driver == nil {
		return errors.New("agent: no driver")
	}
	a.adopt()
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	a.startReconciling(ctx)
	watch := every(&wg, a.watchdogInterval, a.watchdog)
	a.mu.Lock()
	a.watch = watch
	a.mu.Unlock()
	defer wg.Wait()
	defer a.stopAllChecks()
	defer a.stopReconciling()
	defer watch.stop()
	defer cancel() // before the waits: Run may end before ctx does
	defer a.conns.closeAll()
	if a.cfg.Registry == registry.ModeEtcd {
		return a.runEtcd(ctx)
	}

	lw := &leaderWatch{found: make(chan struct{}, 1), now: a.cfg.Mono}
	if a.cfg.Leaders != nil {
		lw.ch = a.cfg.Leaders(ctx)
	}
	a.lw.Store(lw)
	defer every(&wg, func() time.Duration { return max(a.heartbeat(), 250*time.Millisecond) }, func() {
		if in, ok := a.findLeader(ctx, lw.current(), lw.learnedAt()); ok && lw.offer(in) {
			a.log.Info("found a newer leader through the engines, not etcd", "leader", in.Machine, "leader_rev", in.Rev)
		}
	}).stop()
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		cur := lw.current()
		if cur.GRPCAddr == "" {
			lw.wait(ctx, nil)
			continue
		}
		start := a.cfg.Now()
		err := a.session(ctx, cur, lw)
		if errors.Is(err, ErrNameInUse) || errors.Is(err, ErrIncompatible) {
			if !a.refused(ctx, err) {
				return err
			}
			continue
		}
		if ctx.Err() != nil || a.hasLeft() {
			break
		}
		if a.cfg.Now().Sub(start) > 5*time.Second {
			backoff = 50 * time.Millisecond
		}
		a.log.Debug("leader stream ended; reconnecting", "leader", cur.Machine, "err", err, "backoff", backoff)
		if lw.current().Rev != cur.Rev {
			continue // a new leader: go to it at once
		}
		if a.conns.dropFailed(cur.GRPCAddr) {
			// The leader could not be reached: most likely it died, and
			// the leader source names the next one as it is elected.
			// Until then it is dialled again after the longest wait, at
			// random within it, not in waves.
			backoff = maxRetryDelay(a.heartbeat())
		}
		retry := time.NewTimer(retryDelay(backoff))
		lw.wait(ctx, retry.C) // or a new leader may have been elected
		retry.Stop()
		backoff = min(backoff*2, maxRetryDelay(a.heartbeat()))
	}
	return nil
}

// Leader is who leads, as the agent last learnt it (ok false while it knows
// of none): a daemon without etcd forwards API requests there.
func (a *Agent) Leader() (election.Info, bool) {
	lw := a.lw.Load()
	if lw == nil {
		return election.Info{}, false
	}
	in := lw.current()
	return in, in.Machine != ""
}

// refused reports a refusal of the machine's ID to Config.OnRefused and
// waits RefusedRetry (or until ctx is done) before the next try; false
// when there is no OnRefused, and Run is to return the refusal.
func (a *Agent) refused(ctx context.Context, err error) bool {
	if a.cfg.OnRefused == nil {
		return false
	}
	a.mu.Lock()
	a.wasRefused = true
	a.mu.Unlock()
	a.cfg.OnRefused(err)
	t := time.NewTimer(RefusedRetry)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return true
}

// joined tells Config.OnRefused that the machine's ID was taken, after a
// refusal.
func (a *Agent) joined() {
	a.mu.Lock()
	was := a.wasRefused
	a.wasRefused = false
	a.mu.Unlock()
	if was && a.cfg.OnRefused != nil {
		a.cfg.OnRefused(nil)
	}
}

// leaderWatch is who leads, as the agent knows it: from the leader source
// (Config.Leaders), read by Run's goroutine only, and from the engines'
// answers (findLeader).
type leaderWatch struct {
	ch    <-chan election.Info // nil once closed
	found chan struct{}        // signalled when the engines told of a newer leader
	now   func() monotime.Time // the agent's clock
	mu    sync.Mutex
	cur   election.Info
	// learned is when the agent learnt of a newer leader than it knew
	// (zero: never).
	learned monotime.Time
}

// learnedAt is when the agent last learnt of a newer leader.
func (w *leaderWatch) learnedAt() monotime.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.learned
}

func (w *leaderWatch) current() election.Info {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur
}

// wait waits until the leader may have changed (a value from the source,
// or an engine's answer), ctx is done, or timeout (nil: none) fires.
func (w *leaderWatch) wait(ctx context.Context, timeout <-chan time.Time) {
	select {
	case in, ok := <-w.ch:
		w.take(in, ok)
	case <-w.found:
	case <-timeout:
	case <-ctx.Done():
	}
}

// take is a value read from the source (ok false: it was closed).
func (w *leaderWatch) take(in election.Info, ok bool) {
	if !ok {
		w.ch = nil
		return
	}
	w.mu.Lock()
	if in.Machine == "" || in.Rev >= w.cur.Rev {
		if in.Rev > w.cur.Rev && w.now != nil {
			w.learned = w.now()
		}
		w.cur = in // never back to an older term an engine told of
	}
	w.mu.Unlock()
}

// offer is a leader the engines told of: taken, and Run told, if newer.
func (w *leaderWatch) offer(in election.Info) bool {
	w.mu.Lock()
	newer := in.Rev > w.cur.Rev
	if newer {
		w.cur = in
		if w.now != nil {
			w.learned = w.now()
		}
	}
	w.mu.Unlock()
	if newer {
		signal(w.found)
	}
	return newer
}

// session runs one stream to leader until it breaks, the leader changes
// (lw tells), or ctx ends.
func (a *Agent) session(ctx context.Context, leader election.Info, lw *leaderWatch) error {
	a.mu.Lock()
	a.conns.keep(append(append([]string{leader.GRPCAddr}, a.engines...), a.cfg.Servers...)...)
	cutOff := a.cfg.Mono().Sub(a.wordLocked()) > a.lostAfterLocked(want{})
	a.mu.Unlock()
	conn, err := a.conns.leaderConn(leader.GRPCAddr, leader.Rev, a.cfg.Now(), cutOff)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := agentpb.NewEngineClient(conn).Connect(sctx)
	if err != nil {
		return err
	}
	if err := stream.Send(&agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Hello{Hello: a.hello(leader.Rev)}}); err != nil {
		return err
	}
	errc := make(chan error, 2)
	recvErr := make(chan error, 1)
	snd := newSender(a, stream, errc)
	defer snd.stop()
	a.sender.Store(snd)
	defer a.sender.CompareAndSwap(snd, nil)
	a.mu.Lock()
	changed := len(a.dirty) > 0 || len(a.removed) > 0 // since the Hello
	a.mu.Unlock()
	if changed {
		snd.flush()
	}
	go func() {
		var clock sendClock
		for first := true; ; first = false {
			msg, err := stream.Recv()
			if err != nil {
				switch status.Code(err) {
				case codes.AlreadyExists:
					err = fmt.Errorf("%w: %s", ErrNameInUse, status.Convert(err).Message())
				case agentpb.CodeIncompatible:
					err = fmt.Errorf("%w: %s", ErrIncompatible, status.Convert(err).Message())
				}
				recvErr <- err
				errc <- err
				return
			}
			if first {
				a.joined() // the leader took the Hello
			}
			a.received(msg, clock.sent(msg.SentMonoNano, a.cfg.Mono()))
		}
	}()
	for {
		var err error
		select {
		case err = <-errc:
		case <-a.leaveNow:
			err = snd.leave()
		case <-a.resync:
			a.conns.redial(leader.GRPCAddr)
			return errors.New("units were killed for want of word from a leader; saying hello again, on a new connection")
		case in, ok := <-lw.ch:
			lw.take(in, ok)
			if lw.current().Rev != leader.Rev {
				return errors.New("leader changed")
			}
			continue
		case <-lw.found:
			if lw.current().Rev != leader.Rev {
				return errors.New("leader changed")
			}
			continue
		case <-ctx.Done():
			return ctx.Err()
		}
		if errors.Is(err, io.EOF) {
			// A Send that fails says io.EOF; the stream's status
			// (a refused Hello, say) comes from Recv.
			select {
			case err = <-recvErr:
			case <-time.After(time.Second):
			}
		}
		if errors.Is(err, errLeaveSent) {
			// The leader ends the stream once it has taken the Leave.
			select {
			case err = <-recvErr:
			case <-time.After(leaveAckTimeout):
				err = errors.New("the leader did not end the stream after the Leave")
			}
			if err == io.EOF {
				a.leftOnce.Do(func() { close(a.left) })
				return errLeaveSent
			}
			return fmt.Errorf("leaving: %w", err)
		}
		return err
	}
}

// protocol is the agent protocol the machine says it speaks.
func (a *Agent) protocol() int {
	if a.cfg.Machine.Protocol != 0 {
		return a.cfg.Machine.Protocol
	}
	return version.ProtocolVersion
}

func (a *Agent) hello(rev int64) *agentpb.Hello {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := &agentpb.Hello{LeaderRev: rev, Machine: &agentpb.Machine{
		Id: a.cfg.Machine.ID, Ip: a.cfg.Machine.IP, Metadata: a.cfg.Machine.Metadata,
		ApiAddr: a.cfg.Machine.APIAddr, Version: a.cfg.Machine.Version,
		CpuPercent: a.cfg.Machine.CPUPercent, MemoryBytes: a.cfg.Machine.MemoryBytes,
		Drivers:  a.cfg.Machine.Drivers.Names(),
		Instance: a.cfg.Machine.Instance,
		Protocol: int32(a.protocol()),
	}, FilesByHash: true}
	h.Units = a.statusesLocked(maps.Keys(a.haves), len(a.haves))
	sort.Slice(h.Units, func(i, j int) bool { return h.Units[i].Name < h.Units[j].Name })
	// The desired set held from the last leader, summed up: a leader
	// with the same set says so instead of sending it again.
	var d agentpb.WantsDigest
	for name, w := range a.wants {
		d.Add(name, w.Hash, string(w.State), w.Global)
	}
	h.WantsCount, h.WantsDigest = d.Count, d.Sum
	a.dirty, a.removed = emptied(a.dirty), emptied(a.removed)
	return h
}

// notReported are the states sent of a unit the driver has not reported.
var notReported = reportStates{"loaded", "inactive", "dead", ""}

// statusesLocked renders for the leader the statuses of the loaded units
// among names (at most n of them), all in one allocation: one a unit was
// 90,000 of the 2.2 million allocations of a bench's agents (1,000 agents,
// 100,000 units). Callers hold mu.
func (a *Agent) statusesLocked(names iter.Seq[string], n int) []*agentpb.UnitStatus {
	if n == 0 {
		return nil
	}
	all := make([]agentpb.UnitStatus, n)
	out := make([]*agentpb.UnitStatus, 0, n)
	for name := range names {
		h, ok := a.haves[name]
		if !ok {
			continue
		}
		u := &all[len(out)]
		s, ok := a.statuses[name]
		if !ok {
			s = report{hash: h.Hash, states: &notReported}
		}
		u.Name, u.Hash, u.Load, u.Active, u.Sub = name, s.hash, s.states[0], s.states[1], s.states[2]
		u.Pid, u.Result, u.Message, u.Applied, u.SinceUnixNano = s.pid, s.states[3], s.message, string(h.Applied), s.since
		u.Health = a.healthLocked(name, s)
		out = append(out, u)
	}
	return out
}

func (a *Agent) takeUpdate() *agentpb.AgentMessage {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.dirty) == 0 && len(a.removed) == 0 {
		return nil
	}
	u := &agentpb.StatusUpdate{Units: a.statusesLocked(maps.Keys(a.dirty), len(a.dirty))}
	for name := range a.removed {
		if _, ok := a.haves[name]; !ok {
			u.Removed = append(u.Removed, name)
		}
	}
	a.dirty, a.removed = emptied(a.dirty), emptied(a.removed)
	return &agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Update{Update: u}}
}

// emptiedFor returns m emptied to take n entries: cleared if it holds as
// many (a map keeps its room), else a new map made with room for n, which
// a full set of units then fills without the map growing step by step.
func emptiedFor[K comparable, V any](m map[K]V, n int) map[K]V {
	if len(m) < n {
		return make(map[K]V, n)
	}
	clear(m)
	return m
}

// emptied returns m emptied: cleared if small, or a new map, so that a
// burst of changes (a full set of units) does not leave each agent holding
// a table of its size for good (a map never shrinks).
func emptied(m map[string]bool) map[string]bool {
	if len(m) > 16 {
		return map[string]bool{}
	}
	clear(m)
	return m
}

// sendClock maps a leader's send times onto this machine's monotonic clock.
// The offset between the two clocks is estimated as the smallest difference
// of arrival and send time seen on the stream: transit only ever adds to it,
// so the estimate errs by the quickest transit (well under a millisecond
// on a LAN), never by a wait in a socket.
type sendClock struct {
	offset int64
	known  bool
}

// sent returns when a message sent at the leader's sentMono was sent, on
// this machine's clock, given that it arrived at now. A message without a
// send time counts from its arrival.
func (c *sendClock) sent(sentMono int64, now monotime.Time) monotime.Time {
	if sentMono == 0 {
		return now
	}
	off := int64(now) - sentMono
	if !c.known || off < c.offset {
		c.offset, c.known = off, true
	}
	return monotime.Time(sentMono + c.offset)
}

// adopt takes the units the driver already has (left running by an earlier
// daemon on this machine) as the agent's own, as they are: the leader's full
// set then keeps them, or unloads those no longer assigned here.
func (a *Agent) adopt() {
	states := a.cfg.Driver.States()
	rec, recorded := a.cfg.Driver.(driver.StartRecorder)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.started = a.cfg.Mono()
	for _, s := range states {
		applied := unit.Loaded
		launched := s.Running() || (s.Result != "" && s.Result != resultFenced)
		if recorded {
			// The unit may run because something else started it (a
			// socket): only the driver knows whether the agent did.
			if started, known := rec.Started(s.Name); known {
				launched = started && s.Result != resultFenced
			}
		}
		if launched {
			applied = unit.Launched // it was started, and may have ended since
		}
		a.haves[s.Name] = have{Hash: s.Hash, Applied: applied}
		a.statuses[s.Name] = compact(s)
	}
	if len(states) > 0 {
		a.log.Info("adopted the units the driver runs", "units", len(states))
	}
}

// received handles one message from a leader, sent at sent (on the
// machine's monotonic clock).
func (a *Agent) received(msg *agentpb.EngineMessage, sent monotime.Time) {
	as := msg.GetAssignments()
	a.setHeartbeat(msg.HeartbeatMs)
	a.mu.Lock()
	if sent > a.word {
		a.word = sent
	}
	if len(msg.Engines) > 0 {
		a.engines = msg.Engines
	}
	if as == nil {
		a.mu.Unlock()
		a.fence(false)
		return
	}
	if as.Full {
		if as.AgentTtlMs > 0 {
			a.leaderTTL = time.Duration(as.AgentTtlMs) * time.Millisecond
		}
		if len(a.fenced) > 0 {
			a.log.Info("leader reached again; units it assigns here run again", "killed", len(a.fenced))
		}
		clear(a.fenced)
		if !as.Unchanged { // else the set is the one held: as lists changes to it
			a.wants = emptiedFor(a.wants, len(as.Units))
			a.files = emptiedFor(a.files, len(as.Units))
		}
	}
	a.takeTexts(as)
	for _, name := range as.Removed {
		delete(a.wants, name)
		delete(a.files, name)
	}
	for _, name := range as.Destroyed {
		if _, ok := a.haves[name]; ok {
			a.destroyed[name] = true
		}
	}
	singleton := false // a singleton unit is assigned
	var stop []*health.Runner
	for _, as := range as.Units {
		if unit.IsTemplate(as.Name) {
			// A template is never run, only its instances (the leader
			// refuses to launch one): an assignment of one is a leader's error.
			a.log.Error("assigned a template unit; only its instances run", "unit", as.Name)
			continue
		}
		text, ok := a.textOf(as)
		if !ok {
			a.log.Error("assigned unit names a file the leader did not send; not running it", "unit", as.Name, "file_key", as.FileKey)
			continue
		}
		f, err := a.parseAssigned(as.Name, text)
		if err != nil {
			a.log.Error("assigned unit does not parse; not running it", "unit", as.Name, "err", err)
			continue
		}
		ds := unit.DesiredState(as.DesiredState)
		if ds != unit.Loaded && ds != unit.Launched {
			delete(a.wants, as.Name)
			continue
		}
		a.wants[as.Name] = want{Hash: f.Hash, State: ds, Global: as.Global || f.Fleet.Global,
			Singleton: f.Fleet.Singleton, LostAfter: f.Fleet.LostAfter}
		a.files[as.Name] = f
		// An adopted unit's checks start once its file is known.
		stop = a.syncChecksLocked(as.Name, stop)
		delete(a.kill, as.Name) // assigned here again: a later unload is an ordinary one
		delete(a.destroyed, as.Name)
		delete(a.fenced, as.Name)
		singleton = singleton || f.Fleet.Singleton
	}
	if singleton || a.minLost > 0 {
		// Else there was no singleton unit here and none came: minLost
		// stays 0. Looking through every unit wanted on each message was
		// 0.08 s of a bench's agents' 4.9 CPU-s (1,000 agents, 100,000
		// units, started and stopped).
		a.noteSingletonsLocked()
	}
	a.mu.Unlock()
	stopChecks(stop)
	a.fence(true)
	a.kickReconcile()
}

// noteSingletonsLocked recomputes minLost after wants changed. Callers
// hold mu.
func (a *Agent) noteSingletonsLocked() {
	a.minLost = 0
	for _, w := range a.wants {
		if w.Singleton && !w.Global {
			if d := a.lostAfterLocked(w); a.minLost == 0 || d < a.minLost {
				a.minLost = d
			}
		}
	}
	if had := a.singletons.Swap(a.minLost > 0); !had && a.minLost > 0 && a.watch != nil {
		a.watch.soon()
	}
}

// watchdogInterval is how often the watchdog looks: every half heartbeat
// while singleton units are wanted here, else once a minute.
func (a *Agent) watchdogInterval() time.Duration {
	if !a.singletons.Load() {
		return time.Minute
	}
	return max(a.cfg.HeartbeatInterval/2, 10*time.Millisecond)
}

// parseAssigned parses an assigned unit as unit.ParseStored does, but
// parses each template's text once for all its instances when they differ
// only by name (unit.Shareable): every such instance then shares the first
// one's file, and is given a copy with its own name only when it is
// loaded (load): a parsed file is several hundred bytes, and a
// machine of simulated agents holds a million instances. Callers hold mu.
func (a *Agent) parseAssigned(name, text string) (*unit.File, error) {
	if !unit.IsInstance(name) || unit.TypeOf(name) != "service" || strings.Contains(text, "%") {
		return unit.ParseStored(name, text)
	}
	// Keyed by the prefix, not unit.TemplateOf: every such unit is a
	// service, and TemplateOf builds a string each call (2.5 MB, 160,000
	// allocations for a bench's 100,000 units).
	k := [2]string{unit.Prefix(name), text}
	if proto := a.protos[k]; proto != nil {
		return proto, nil
	}
	f, err := unit.ParseStored(name, text)
	if err != nil {
		return nil, err
	}
	if len(a.protos) >= 64 {
		clear(a.protos) // templates come and go: keep the recent ones
	}
	a.protos[k] = f
	return f, nil
}

// takeTexts keeps the files as sends by key: a full set or a reset
// starts the table again (the first message of every stream is a full
// set). Callers hold mu.
func (a *Agent) takeTexts(as *agentpb.Assignments) {
	if as.Full || as.FilesReset || a.texts == nil {
		a.texts = make(map[string]string, len(as.Files))
	}
	maps.Copy(a.texts, as.Files)
}

// textOf is the text of as's file: its own, or the one sent under its
// key (false: none was). Callers hold mu.
func (a *Agent) textOf(as *agentpb.Assignment) (string, bool) {
	if as.File == "" && as.FileKey != "" {
		text, ok := a.texts[as.FileKey]
		return text, ok
	}
	return as.File, true
}

// sharedLoader is a driver that loads unit name from a file parsed for
// another instance of its template (parseAssigned) and keeps nothing of
// the file but what it reads at once: the sim driver. It is handed the
// shared file, not a copy named for the unit (load): in a bench of 1,000
// agents and 100,000 units the copies were 67 MB of the agents' 321 MB
// allocated. The exec, systemd and docker drivers keep the file they are
// given, and get the copy.
type sharedLoader interface {
	LoadShared(name string, f *unit.File) error
}

// findLeader asks the engines the leader named who leads, when word from
// the leader has stopped for longer than a few heartbeats: an agent cut
// off from etcd but not from the other daemons learns of a new leader this
// way. It returns the answer with the highest revision, if newer than cur.
// Run calls it every heartbeat (at least 250 ms apart). An agent given
// Servers asks them too, and asks at once while it knows no leader.
func (a *Agent) findLeader(ctx context.Context, cur election.Info, learned monotime.Time) (election.Info, bool) {
	stale := 2*a.heartbeat() + 250*time.Millisecond
	a.mu.Lock()
	// Silence counts from the last word, or from learning of a new leader
	// the agent is still reaching: once a leader dies, every agent of the
	// cluster falls silent, learns of the next leader from etcd, and
	// reconnects; had they asked every engine too, while they waited
	// for the new leader to take them back, their questions would have
	// taken the CPU it needed for that.
	quiet := a.cfg.Mono().Sub(max(a.wordLocked(), learned))
	var engines []string
	if quiet >= stale || len(a.cfg.Servers) > 0 && cur.GRPCAddr == "" {
		engines = slices.Clone(a.engines)
		for _, s := range a.cfg.Servers {
			if !slices.Contains(engines, s) {
				engines = append(engines, s)
			}
		}
	}
	a.mu.Unlock()
	if len(engines) == 0 {
		return election.Info{}, false
	}
	best, ok := a.askEngines(ctx, engines)
	return best, ok && best.Rev > cur.Rev
}

// askEngines asks each engine who leads and returns the answer with the
// highest election revision. An engine found unreachable is not asked
// again for a while (conns.ask).
func (a *Agent) askEngines(ctx context.Context, engines []string) (election.Info, bool) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	answers := make(chan *agentpb.LeaderInfo, len(engines))
	asked := 0
	for _, addr := range engines {
		conn := a.conns.ask(addr, a.cfg.Now())
		if conn == nil {
			continue // unreachable a moment ago (conns.ask)
		}
		asked++
		go func() {
			li, err := agentpb.NewEngineClient(conn).Leader(ctx, &agentpb.LeaderRequest{})
			a.conns.answered(addr, conn, err, a.cfg.Now())
			answers <- li
		}()
	}
	var best election.Info
	for range asked {
		if li := <-answers; li != nil && li.GrpcAddr != "" && li.Rev > best.Rev {
			best = election.Info{Machine: li.Machine, GRPCAddr: li.GrpcAddr, APIAddr: li.ApiAddr, Rev: li.Rev}
		}
	}
	return best, best.Rev > 0
}

// lostAfterLocked is a unit's LostAfter=: its own, or the shorter of the
// agent's TTL and the leader's. Callers hold mu.
func (a *Agent) lostAfterLocked(w want) time.Duration {
	if w.LostAfter > 0 {
		return w.LostAfter
	}
	ttl := a.cfg.TTL
	if a.leaderTTL > 0 && a.leaderTTL < ttl {
		ttl = a.leaderTTL
	}
	return ttl
}

// wordLocked is the time the cut-off policy counts from: the latest word
// from a leader, or the agent's start before any. Callers hold mu.
func (a *Agent) wordLocked() monotime.Time {
	if a.word == 0 {
		return a.started
	}
	return a.word
}

// fence hands the driver the deadline of the singleton units, if it can
// kill them by itself (driver.Fencer): the word plus the shortest of their
// LostAfter=. A fence that has not changed is not sent again, unless force
// (the singleton units may have changed).
func (a *Agent) fence(force bool) {
	f, ok := a.cfg.Driver.(driver.Fencer)
	if !ok {
		return
	}
	a.mu.Lock()
	if a.word == 0 {
		// No word yet from any leader since this agent started: the
		// deadline an earlier agent set stands, and must not be extended.
		a.mu.Unlock()
		return
	}
	var names []string
	shortest := time.Duration(-1)
	for name, w := range a.wants {
		if w.Singleton && w.State == unit.Launched {
			names = append(names, name)
			if d := a.lostAfterLocked(w); shortest < 0 || d < shortest {
				shortest = d
			}
		}
	}
	sort.Strings(names)
	var deadline monotime.Time
	if len(names) > 0 {
		deadline = a.word.Add(shortest)
	}
	key := fmt.Sprint(names)
	if !force && key == a.fencedUnits && deadline-a.fencedAt < monotime.Time(a.cfg.HeartbeatInterval/2) {
		a.mu.Unlock()
		return // renewed less than half a heartbeat ago
	}
	a.fencedAt, a.fencedUnits = deadline, key
	a.mu.Unlock()
	if err := f.Fence(deadline, names); err != nil {
		a.log.Error("could not hand the singleton units' deadline to the driver", "units", len(names), "err", err)
		return
	}
	if len(names) > 0 {
		a.kickReconcile() // a unit the driver killed at the old deadline may start again
	}
}

// watchdog kills each Singleton=true unit once its LostAfter= has passed
// without word from a current leader. Other units keep running however
// long the machine is cut off: the leader replaces them elsewhere. Run
// calls it every half heartbeat, on a timer of its own (every): it never
// waits for the driver, the reconciler or the stream.
func (a *Agent) watchdog() {
	a.mu.Lock()
	now, word := a.cfg.Mono(), a.wordLocked()
	if a.minLost == 0 || now.Sub(word) <= a.minLost {
		a.mu.Unlock()
		return // no singleton here, or word within every LostAfter=
	}
	var killed []string
	for name, w := range a.wants {
		if w.Singleton && !w.Global && now.Sub(word) > a.lostAfterLocked(w) {
			delete(a.wants, name)
			a.kill[name] = true
			a.fenced[name] = true
			killed = append(killed, name)
		}
	}
	a.noteSingletonsLocked()
	a.mu.Unlock()
	if len(killed) > 0 {
		sort.Strings(killed)
		a.log.Warn("no word from a current leader within LostAfter=; killing singleton units", "units", killed, "since", now.Sub(word).Round(time.Millisecond))
		a.kickReconcile()
		signal(a.resync)
	}
}

// load loads unit name from f (its own file, or one it shares with other
// instances: parseAssigned) on the driver, unless none of the machine's
// drivers can run it (a leader that does not know drivers placed it
// here): the exec driver must not be handed a .timer it would run as
// something else. A driver that keeps the file is given one named for the
// unit. f is never changed once parsed, so mu need not be held.
func (a *Agent) load(d driver.Driver, name string, f *unit.File) error {
	if err := a.runnable(name, f); err != nil {
		return err
	}
	if sl, ok := d.(sharedLoader); ok {
		return sl.LoadShared(name, f)
	}
	return d.Load(named(name, f))
}

// runnable says why none of the machine's drivers can run unit name (nil
// when one can).
func (a *Agent) runnable(name string, f *unit.File) error {
	if have := a.cfg.Machine.Drivers; have != 0 && !have.Runs(f.Drivers()) {
		return fmt.Errorf("this machine runs the %v driver; %s needs %s", have, name, unit.DriversReason(name, f.Drivers()))
	}
	return nil
}

// named returns f, or a copy of it named name.
func named(name string, f *unit.File) *unit.File {
	if f.Name != name {
		c := *f
		c.Name = name
		f = &c
	}
	return f
}

// loadBatch carries out the load actions of a pass, all in one LoadBatch
// (driver.BatchLoader); do then skips them. Each unit's outcome is the
// one do's load would have had.
func (a *Agent) loadBatch(bl driver.BatchLoader, acts []action) {
	var names []string
	var files, given []*unit.File // the parsed files, and those given to LoadBatch
	for _, act := range acts {
		if act.Kind != actLoad {
			continue
		}
		f := a.beginLoad(act.Name)
		if f == nil {
			continue
		}
		if err := a.runnable(act.Name, f); err != nil {
			a.loadFailed(act.Name, f, err)
			continue
		}
		names = append(names, act.Name)
		files = append(files, f)
		given = append(given, named(act.Name, f))
	}
	if len(given) == 0 {
		return
	}
	errs := bl.LoadBatch(given)
	for i, err := range errs {
		if err != nil {
			a.loadFailed(names[i], files[i], err)
		}
	}
}

// beginLoad records that unit name is being loaded and returns its file;
// nil when the leader no longer assigns it.
func (a *Agent) beginLoad(name string) *unit.File {
	a.mu.Lock()
	defer a.mu.Unlock()
	f := a.files[name]
	if f == nil {
		return nil
	}
	a.haves[name] = have{Hash: f.Hash, Applied: unit.Loaded}
	a.dirty[name] = true
	return f
}

// loadFailed reports a unit the driver did not load as failed.
func (a *Agent) loadFailed(name string, f *unit.File, err error) {
	// systemd shows a unit it cannot load as load=error; it is
	// reported failed so that whoever waits for it stops waiting.
	a.failed("load failed", name, err)
	a.mu.Lock()
	if h, ok := a.haves[name]; ok {
		h.Broken = true
		a.haves[name] = h
	}
	a.mu.Unlock()
	a.setStatus(unit.Status{Name: name, Hash: f.Hash, Load: "error", Active: "failed", Sub: "failed", Result: "load-error", Message: err.Error()})
	a.setApplied(name, unit.DesiredState(a.wantState(name)))
}

// failed logs an action's failure. Only a failure logs: a logger made
// With the unit for every action was a tenth of a bench's agents'
// allocations, and a closure doing this, made for every action (the
// unload's goroutine calls it), 7.5 MB of the 242 MB of 1,000 agents
// given 100,000 units.
func (a *Agent) failed(msg, name string, err error) {
	a.log.Error(msg, "unit", name, "err", err)
}

func (a *Agent) do(ctx context.Context, act action, wg *sync.WaitGroup) {
	d := a.cfg.Driver
	switch act.Kind {
	case actLoad:
		f := a.beginLoad(act.Name)
		if f == nil {
			return
		}
		if err := a.load(d, act.Name, f); err != nil {
			a.loadFailed(act.Name, f, err)
		}
	case actStart:
		a.mu.Lock()
		broken := a.haves[act.Name].Broken
		a.mu.Unlock()
		if broken {
			return // its load failed just now, in the same plan
		}
		a.setApplied(act.Name, unit.Launched)
		if err := d.Start(act.Name); err != nil {
			// Not started (a fenced singleton before new word, a start
			// limit): the next pass tries again.
			a.failed("start failed", act.Name, err)
			a.setApplied(act.Name, unit.Loaded)
		}
	case actStop:
		a.setApplied(act.Name, unit.Loaded)
		if err := d.Stop(act.Name); err != nil {
			a.failed("stop failed", act.Name, err)
		}
	case actUnload:
		a.mu.Lock()
		h := a.haves[act.Name]
		h.Busy = true
		a.haves[act.Name] = h
		kill := a.kill[act.Name]
		delete(a.kill, act.Name)
		a.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if k, ok := d.(driver.Killer); ok && kill {
				err = k.Kill(context.WithoutCancel(ctx), act.Name)
			} else {
				err = d.Unload(context.WithoutCancel(ctx), act.Name)
			}
			if err != nil && !errors.Is(err, driver.ErrUnknownUnit) {
				// The unit may still run: it stays the agent's, reported
				// as the driver says, and is unloaded again later. Taken
				// as gone, it ran on unknown to anyone (a second copy
				// once the leader had placed it elsewhere).
				a.failed("unload failed; trying again", act.Name, err)
				a.mu.Lock()
				if h, ok := a.haves[act.Name]; ok {
					h.Busy = false
					a.haves[act.Name] = h
				}
				if _, wanted := a.wants[act.Name]; kill && !wanted {
					a.kill[act.Name] = true
				}
				a.mu.Unlock()
				a.retryLater()
				return
			}
			a.retried()
			a.removeLogIfDestroyed(d, act.Name)
			a.mu.Lock()
			delete(a.haves, act.Name)
			delete(a.statuses, act.Name)
			delete(a.dirty, act.Name)
			delete(a.restarting, act.Name)
			delete(a.restarted, act.Name)
			a.removed[act.Name] = true
			stop := a.syncChecksLocked(act.Name, nil)
			a.mu.Unlock()
			stopChecks(stop)
			a.wake()
			a.kickReconcile()
		}()
	}
	a.wake()
}

// removeLogIfDestroyed removes the log of a unit just unloaded when the
// leader said it was destroyed and nothing assigned it here again since; a
// unit that moved or stopped keeps its log. The unit is still marked busy,
// so it is not loaded again meanwhile.
func (a *Agent) removeLogIfDestroyed(d driver.Driver, name string) {
	a.mu.Lock()
	_, wanted := a.wants[name]
	rm := a.destroyed[name] && !wanted
	delete(a.destroyed, name)
	a.mu.Unlock()
	lr, ok := d.(driver.LogRemover)
	if !rm || !ok {
		return
	}
	if err := lr.RemoveLog(name); err != nil {
		a.log.Warn("cannot remove the log of a destroyed unit", "unit", name, "err", err)
		return
	}
	a.log.Info("removed the log of a destroyed unit", "unit", name)
}

// wantState is the state the leader wants for a unit.
func (a *Agent) wantState(name string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return string(a.wants[name].State)
}

func (a *Agent) setApplied(name string, s unit.DesiredState) {
	a.mu.Lock()
	if h, ok := a.haves[name]; ok {
		h.Applied = s
		a.haves[name] = h
		a.dirty[name] = true
	}
	a.mu.Unlock()
}

func (a *Agent) setStatus(s unit.Status) {
	a.mu.Lock()
	if _, ok := a.haves[s.Name]; ok {
		a.statuses[s.Name] = compact(s)
		a.dirty[s.Name] = true
	}
	a.mu.Unlock()
}

// errLeaveSent ends a session whose Leave has been sent.
var errLeaveSent = errors.New("agent: left the cluster")

// leaveAckTimeout bounds the wait for the leader to end the stream after a
// Leave.
const leaveAckTimeout = 10 * time.Second

func (a *Agent) hasLeft() bool {
	select {
	case <-a.left:
		return true
	default:
		return false
	}
}

// Leave is fleet's shutdown (daemon --stop-units-on-exit): it stops the
// reconciler, unloads every unit (each stopped gracefully, within its stop
// timeout; all at once), then tells the leader that the machine leaves the
// cluster (a Leave on the stream; in etcd mode a presence key marked
// leaving, then the agent's lease revoked, which deletes its unit states).
// The leader purges the machine's unit states and places its units
// elsewhere at once. Leave returns once the leader has taken the Leave and
// the machine is named by no unit in the schedule in etcd, or with an error
// when ctx ends first (the units are stopped whatever happens; the leader
// then finds the machine lost after its units' LostAfter=). Run returns
// once the machine has left. Leave must be called while Run runs.
func (a *Agent) Leave(ctx context.Context) error {
	a.mu.Lock()
	a.leaving = true
	names := make([]string, 0, len(a.haves))
	for name := range a.haves {
		names = append(names, name)
	}
	a.mu.Unlock()
	sort.Strings(names)
	var (
		wg   sync.WaitGroup
		emu  sync.Mutex
		errs []error
	)
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.cfg.Driver.Unload(ctx, name); err != nil && !errors.Is(err, driver.ErrUnknownUnit) {
				emu.Lock()
				errs = append(errs, fmt.Errorf("unit %s: %w", name, err))
				emu.Unlock()
				return
			}
			a.mu.Lock()
			delete(a.haves, name)
			delete(a.statuses, name)
			a.removed[name] = true
			a.mu.Unlock()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("agent: stopping units before leaving: %w", err)
	}
	a.log.Info("units stopped; leaving the cluster", "units", len(names))
	a.leaveOnce.Do(func() { close(a.leaveNow) })
	select {
	case <-a.left:
	case <-ctx.Done():
		return fmt.Errorf("agent: no leader took this machine's Leave: %w", ctx.Err())
	}
	return a.waitUnscheduled(ctx)
}

// waitUnscheduled waits until no unit is scheduled to the machine in etcd:
// the leader has placed them elsewhere (or nowhere), so a leader elected
// after this daemon's engine resigns does not wait for them either.
func (a *Agent) waitUnscheduled(ctx context.Context) error {
	if a.cfg.Etcd == nil {
		return nil
	}
	for {
		n, err := registry.CountScheduled(ctx, a.cfg.Etcd, a.cfg.Keys, a.cfg.Machine.ID)
		if err == nil && n == 0 {
			return nil
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("agent: the leader has not yet placed this machine's units elsewhere: %w", ctx.Err())
		}
	}
}
