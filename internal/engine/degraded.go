package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flotilla/flotilla/internal/election"
	"github.com/flotilla/flotilla/internal/registry"
)

// Degraded terms: the leader without etcd.
//
// A term acts for the cluster only while its election lease is known valid
// (election.Term.Valid). When it no longer is (renewals go unanswered, the
// session ends) or a write's outcome is unknown, the engine probes etcd
// with a linearizable read of its election key:
//
//  1. etcd answers and the key is gone (or another candidate leads): the
//     term ends as it always did; memory is dropped.
//  2. etcd answers and the key is still ours: renewals are late, not lost.
//     The term decides nothing and answers no read until the lease is
//     valid again (or the key goes, as in 1).
//  3. etcd does not answer: the term degrades. It keeps its memory and its
//     agents' streams and answers every read from memory, saying since
//     when etcd has been unreachable (EtcdUnreachableSince); it decides
//     nothing (no placement, no moves, no commits) and refuses every write
//     with an *EtcdUnreachableError.
//
// A degraded term never decides again. The engine campaigns anew meanwhile
// (Run); when it wins, the new term loads the cluster from etcd and
// replaces the degraded one (whose agent streams end, so agents reconnect
// to the new term); when etcd answers and another engine leads, the
// degraded term is dropped. Memory that may disagree with etcd (after a
// write of unknown outcome) is thus only ever read, never acted on.

// degradation is a term's view of its lease and of etcd.
type degradation struct {
	since atomic.Int64 // UnixNano when etcd was found unreachable; 0 while it answers
	once  sync.Once
	c     chan struct{} // closed when the term degrades
	lost  chan struct{} // closed when etcd answered that the lease is gone
}

func newDegradation() *degradation {
	return &degradation{c: make(chan struct{}), lost: make(chan struct{})}
}

// EtcdUnreachableError is the error of a write refused (or of unknown
// outcome) because etcd does not answer the leader. errors.Is(err,
// ErrUnavailable) holds for it.
type EtcdUnreachableError struct {
	// Since is when the leader found etcd unreachable.
	Since time.Time
	// MayHaveLanded is set when the write was sent and etcd did not answer:
	// it may or may not have been written.
	MayHaveLanded bool
}

func (e *EtcdUnreachableError) Error() string {
	since := e.Since.UTC().Format(time.RFC3339)
	if e.MayHaveLanded {
		return "etcd unreachable since " + since + ": the change may or may not have been written (etcd did not answer); " +
			"the leader reloads the cluster from etcd once it is back: read again then"
	}
	return "etcd unreachable since " + since + ": nothing was changed; the leader answers reads from its memory " +
		"and refuses writes until etcd answers again: retry then"
}

// Is makes errors.Is(err, ErrUnavailable) hold.
func (e *EtcdUnreachableError) Is(target error) bool { return target == ErrUnavailable }

// EtcdUnreachableSince reports whether this engine leads a degraded term
// (see degraded.go), and since when etcd has been unreachable.
func (e *Engine) EtcdUnreachableSince() (time.Time, bool) {
	if t := e.leader(); t != nil {
		return t.degradedSince()
	}
	return time.Time{}, false
}

// degradedSince reports whether the term is degraded, and since when.
func (t *term) degradedSince() (time.Time, bool) {
	if n := t.deg.since.Load(); n != 0 {
		return time.Unix(0, n), true
	}
	return time.Time{}, false
}

// leaseValid reports whether the term's lease is known valid now: only
// then may it decide, heartbeat as the cluster's voice, or answer reads as
// current. A degraded term's lease is never valid. The lease is the
// election's, timed by the system's clock as its renewals are: the loop
// checks it before it decides anything, as its driver would, and its
// decisions take the loop's clock (t.now).
func (t *term) leaseValid() bool {
	return t.deg.since.Load() == 0 && t.el.Valid(time.Now())
}

// degrade makes the term degraded (once): it keeps memory and streams and
// decides nothing from now on.
func (t *term) degrade(cause error) {
	t.deg.once.Do(func() {
		now := t.e.cfg.Now()
		t.deg.since.Store(now.UnixNano())
		t.e.cfg.Metrics.EtcdUnreachableSince.Set(float64(now.UnixNano()) / 1e9)
		t.e.log.Warn("etcd unreachable: serving reads from memory, refusing writes, deciding nothing until etcd is back",
			"leader_rev", t.info.Rev, "cause", cause)
		t.stopCommit() // send etcd nothing more (see term.commitCtx)
		t.changed()    // /v1/state says so
		close(t.deg.c)
	})
}

// unreachableErr is the error of a write while the term is degraded.
func (t *term) unreachableErr(mayHaveLanded bool) error {
	since, _ := t.degradedSince()
	return &EtcdUnreachableError{Since: since, MayHaveLanded: mayHaveLanded}
}

// refuseDegraded answers the round's requests with the etcd error and
// returns true when the term is degraded: the loop then does nothing else.
func (t *term) refuseDegraded(round []*applyReq) bool {
	if t.deg.since.Load() == 0 {
		return false
	}
	err := t.unreachableErr(false)
	for _, r := range round {
		r.res <- applyRes{err: err}
	}
	return true
}

// etcdLost is told of a failed etcd write (of unknown outcome) and reports
// whether etcd is unreachable, degrading the term if so. When it returns
// false etcd answers, and the caller ends the term as before.
func (t *term) etcdLost(cause error) bool {
	if t.deg.since.Load() != 0 {
		return true
	}
	if reachable, _ := t.e.probeEtcd(t.info); reachable {
		return false
	}
	t.degrade(cause)
	return true
}

// confirmNoop confirms through etcd's consensus (a fenced transaction that
// reads the election key linearizably, registry.Committer.Confirm) that the
// term still leads, before a request that changes nothing is acknowledged:
// memory alone cannot tell a deposed leader from a current one, nor can an
// etcd member cut off from its quorum.
func (t *term) confirmNoop() error {
	err := t.committer.Confirm(t.commitCtx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, registry.ErrFenced):
		t.cancel(err)
		return ErrNotLeader
	case t.ctx.Err() != nil:
		return ErrNotLeader
	case t.etcdLost(err):
		return t.unreachableErr(false)
	}
	return fmt.Errorf("%w: confirming leadership before acknowledging a request that changes nothing: %w (nothing was changed; retry)", ErrUnavailable, err)
}

// probeTimeout bounds one probe of etcd: the election TTL, at least
// 500ms. An etcd that answers within a lease's life is slow, not gone: a
// leader starting a million units on a loaded 2-CPU host saw its probes
// take over 2 s (the bound was half the TTL, at most 2 s), degraded, and
// the next term spent a minute loading the cluster again.
func (e *Engine) probeTimeout() time.Duration {
	return max(e.cfg.ElectionTTL, 500*time.Millisecond)
}

// probeEtcd reads the term's election key linearizably: reachable is false
// when etcd did not answer in time; ours says the key is still the term's.
func (e *Engine) probeEtcd(in election.Info) (reachable, ours bool) {
	ctx, cancel := context.WithTimeout(context.Background(), e.probeTimeout())
	defer cancel()
	resp, err := e.cfg.ElectionClient.Get(ctx, in.Key)
	if err != nil {
		return false, false
	}
	return true, len(resp.Kvs) == 1 && resp.Kvs[0].CreateRevision == in.Rev
}

// watchLease follows the term's lease: when it is no longer known valid,
// it probes etcd and degrades the term (etcd unreachable), closes
// deg.lost (the key is gone), or waits for the next renewal (the key is
// still ours). It returns when the term ends or either happened.
func (t *term) watchLease() {
	el := t.el
	for {
		wait := max(time.Until(el.ValidUntil()), 0) + time.Millisecond
		if el.Valid(time.Now()) {
			wait = min(wait, t.e.cfg.HeartbeatInterval)
		} else {
			reachable, ours := t.e.probeEtcd(t.info)
			switch {
			case !reachable:
				t.degrade(errors.New("the election lease could not be renewed"))
				return
			case !ours:
				close(t.deg.lost)
				return
			}
			wait = 100 * time.Millisecond // renewals are late: look again soon
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-t.ctx.Done():
			timer.Stop()
			return
		case <-el.Done():
			timer.Stop()
			return
		}
	}
}

// reader returns the term that may answer reads: a term whose lease is
// known valid, or a degraded one (its answers say since when etcd has been
// unreachable). While the lease is unconfirmed and etcd is being probed
// (watchLease), a read waits for the outcome, up to the probe's timeout:
// a term that steps down, or stays unconfirmed, does not answer.
//
// That the term may answer when the read begins does not make the answer
// current: the term may degrade, or another leader be elected, while the
// read waits for the loop or is written out. An answer is vouched for when
// it is given (Read, Vouch).
func (e *Engine) reader() (*term, error) {
	t := e.leader()
	if t == nil {
		return nil, ErrNotLeader
	}
	if err := e.settle(t); err != nil {
		return nil, err
	}
	return t, nil
}

// settle returns once term t is degraded or its lease is known valid now,
// waiting for the outcome of a late renewal or of watchLease's probe up to
// the probe's timeout; ErrNotLeader (wrapped) when the term ended, etcd
// said its lease is gone, or it stays unconfirmed.
func (e *Engine) settle(t *term) error {
	deadline := time.Now().Add(e.probeTimeout() + 100*time.Millisecond)
	for {
		if t.deg.since.Load() != 0 || t.el.Valid(time.Now()) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: its election lease is not confirmed (etcd is slow to answer)", ErrNotLeader)
		}
		timer := time.NewTimer(20 * time.Millisecond)
		select {
		case <-timer.C:
		case <-t.deg.c:
		case <-t.deg.lost:
		case <-t.ctx.Done():
		}
		timer.Stop()
		if t.ctx.Err() != nil || isClosed(t.deg.lost) {
			return ErrNotLeader
		}
	}
}

// Read is a request answered from a leader's memory, from the moment it
// arrived (StartRead) to the moment it is answered (Vouch).
type Read struct{ t *term }

// StartRead begins a read as a request arrives: ok is false when this
// engine does not lead (the request goes to the leader).
func (e *Engine) StartRead() (rd Read, ok bool) {
	t := e.leader()
	return Read{t: t}, t != nil
}

// Vouch says, as the read rd is answered, what the answer is worth:
//
//   - current (zero since, nil error): the term that answered still leads
//     and its lease is known valid now, after the request arrived and
//     after its memory was read, so no other leader can have acknowledged
//     a write the answer misses. (A term is installed once and never comes
//     back, so the term that leads both when the request arrived and now
//     answered every read of the request.)
//   - stale since a time (ok set): the term is degraded, or was while the
//     answer was made; the answer is its memory, and since is when it found
//     etcd unreachable.
//   - an error wrapping ErrNotLeader: the term ended, or its lease stays
//     unconfirmed: nothing can be said for the answer, which must not be
//     given.
//
// It waits, like a read, for a late renewal or for etcd's probe, at most
// the probe's timeout.
func (e *Engine) Vouch(rd Read) (since time.Time, stale bool, err error) {
	t := rd.t
	if t == nil {
		return time.Time{}, false, ErrNotLeader
	}
	if since, ok := t.degradedSince(); ok {
		return since, true, nil
	}
	if e.leader() != t {
		return time.Time{}, false, fmt.Errorf("%w: its term ended while the request was answered", ErrNotLeader)
	}
	if err := e.settle(t); err != nil {
		return time.Time{}, false, err
	}
	if since, ok := t.degradedSince(); ok {
		return since, true, nil
	}
	return time.Time{}, false, nil
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// install makes t the current term, stopping a degraded term it replaces.
func (e *Engine) install(t *term) {
	old := e.term.Swap(t)
	e.cfg.Metrics.IsLeader.Set(1)
	e.cfg.Metrics.EtcdUnreachableSince.Set(0)
	e.cfg.Metrics.DoubtUntil.Set(0)
	if old != nil && old != t {
		e.log.Info("etcd is back: the new term replaces the degraded one", "old_rev", old.info.Rev, "leader_rev", t.info.Rev)
		old.stop()
	}
}

// drop forgets term t (if it is still current) and stops it.
func (e *Engine) drop(t *term) {
	if e.term.CompareAndSwap(t, nil) {
		e.cfg.Metrics.IsLeader.Set(0)
		e.cfg.Metrics.EtcdUnreachableSince.Set(0)
		e.cfg.Metrics.DoubtUntil.Set(0)
	}
	t.stop()
}

// keepDegraded decides, once a term's lead has ended, whether the term
// stays as a degraded term: it does when it degraded, or when its session
// ended and etcd does not answer. Then it gives up the election (its
// renewals stop; the lease expires, or is revoked if etcd comes back
// first) and follows the election until another engine leads.
func (e *Engine) keepDegraded(ctx context.Context, t *term, el *election.Term) bool {
	if ctx.Err() != nil || t.ctx.Err() != nil {
		return false
	}
	if t.deg.since.Load() == 0 {
		select {
		case <-el.Done():
		default:
			return false // etcd answered that the lease is gone
		}
		if reachable, _ := e.probeEtcd(t.info); reachable {
			return false
		}
		t.degrade(fmt.Errorf("the election term ended: %w", el.Err()))
	}
	go func() {
		rctx, cancel := context.WithTimeout(context.Background(), e.probeTimeout())
		el.Resign(rctx)
		cancel()
	}()
	go e.followDegraded(ctx, t)
	return true
}

// followDegraded drops the degraded term t once etcd answers and another
// engine leads. It returns when t is replaced or stopped.
func (e *Engine) followDegraded(ctx context.Context, t *term) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.ctx.Done():
			return
		case <-tick.C:
		}
		pctx, cancel := context.WithTimeout(ctx, e.probeTimeout())
		asked := time.Now()
		in, _, ok, err := election.Current(pctx, e.cfg.ElectionClient, e.cfg.Keys.Election())
		cancel()
		e.log.Debug("degraded: asked etcd who leads", "leader", in.Machine, "err", err, "took_ms", time.Since(asked).Milliseconds())
		if err == nil && ok && in.Rev != t.info.Rev && in.Machine != e.cfg.Machine {
			e.log.Warn("etcd is back and another engine leads: dropping the degraded term's memory", "leader", in.Machine, "leader_rev", in.Rev)
			e.drop(t)
			return
		}
	}
}
