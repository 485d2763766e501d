package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/flotilla/flotilla/internal/registry"
)

// The leader is a core and its driver, in the manner of etcd's raft
// (Node over RawNode). The core is the decision state (decisionState) and
// the term's methods that change it: it is stepped with typed inputs and
// never waits for I/O. What it asks of the outside is typed output:
//
//   - etcd transactions (txn), queued on the term's outbox: the driver
//     commits them, in order, and steps the core with each one's outcome
//     (its continuation, then); what follows a write is never done before
//     the write is durable.
//   - messages to agents, queued on each machine's connection (the
//     connection's pending set, stream.go: a unit's latest assignment
//     wins), which the term's senders send once it is readied (wakeHold,
//     senders.go);
//   - answers to requests, on each request's buffered reply channel;
//   - views and snapshots for readers, published by pointer (views.go,
//     publish.go).
//
// The driver (this file) is the loop goroutine's: it waits for inputs
// (requests, the agents' inbox, timers, reads), reads the clock and the
// lease once an iteration and hands them to the core (t.now), performs
// the txns, and answers reads while etcd works. Decisions take their time
// from t.now alone; the system's clock is read here, by the streams and
// the etcd watch that stamp the inputs they queue, and to measure how long
// work took (passPhases, pacing).

// txn is an etcd write the core asks for: stages committed in order, each
// only once the one before it landed (unit files before the records that
// name them), fenced on the term.
type txn struct {
	stages [][]registry.Op
	// confirm has the driver confirm through etcd, after the stages, that
	// the term still leads (a request that changes nothing: confirmNoop).
	confirm bool
	// meanwhile is the core's work the driver runs while the txn is in
	// flight: a pass prepares its next part as the last one is written.
	meanwhile func()
	// then is the core's continuation with the outcome: how many stages
	// landed, and the error that stopped the rest (nil: all landed).
	then func(landed int, err error)
}

// emit queues tx for the driver (perform). It runs on the loop.
func (t *term) emit(tx *txn) { t.outbox = append(t.outbox, tx) }

// loop is the driver: the only goroutine that steps the core.
func (t *term) loop() {
	tick := time.NewTicker(t.e.cfg.HeartbeatInterval)
	defer tick.Stop()
	// recheck fires when the last pass said something would change by
	// time alone (a unit's LostAfter= ending), so it happens then, not up
	// to a heartbeat interval later.
	recheck := time.NewTimer(time.Hour)
	defer recheck.Stop()
	paced := time.NewTimer(time.Hour) // a pass an input asked for, waiting (pace.go)
	paced.Stop()
	defer paced.Stop()
	for {
		if checkInvariants {
			t.checkTerm() // after the load, and after each step
		}
		var round []*applyReq
		select {
		case <-recheck.C:
		case <-t.ctx.Done():
			t.failPending()
			return
		case r := <-t.reqs:
			round = append(round, r)
		case <-t.kick:
			if d := t.pace.wait(time.Now()); d > 0 {
				paced.Reset(d)
				continue
			}
		case <-paced.C:
		case <-tick.C:
		case <-t.inbox.wake:
			// Agents' reports and other inputs: applied, without a pass
			// unless one of them asks for one (poke).
			t.now = t.e.cfg.Now()
			t.applyInputs()
			continue
		case <-t.inbox.readWake:
			t.serveReads()
			continue
		}
		// Every request waiting joins the round, and goes before the next
		// pass whatever woke the loop: select picks at random among what
		// is ready, and a pass that pokes the next (the term's check of
		// its placements, a chunk a pass) would otherwise make a request
		// wait for a second pass half the time.
	queued:
		for {
			select {
			case r := <-t.reqs:
				round = append(round, r)
			default:
				break queued
			}
		}
		at, passed := t.iterate(round)
		if passed {
			paced.Stop() // the pass it waited for has run
		}
		if !at.IsZero() {
			// The timer is armed from the clock as it is now, after the
			// pass: at is a time, not a delay.
			recheck.Reset(max(at.Sub(t.e.cfg.Now()), 0) + time.Millisecond)
		}
	}
}

// iterate steps the core through one iteration with the time it began:
// the round of requests, then, while the lease is valid, a pass and the
// deployments' steps. Each step's txns are performed before the next
// step. It returns when the next pass should run by time alone, and
// whether a pass ran.
func (t *term) iterate(round []*applyReq) (recheck time.Time, passed bool) {
	t.now = t.e.cfg.Now()
	if t.refuseDegraded(round) {
		return time.Time{}, false
	}
	if len(round) > 0 {
		t.applyRound(round, nil)
		t.perform()
	}
	if t.leaseValid() {
		passed = true
		t.pace.now = false // this is the pass asked for
		began := time.Now()
		t.reconcile(func(at time.Time) { recheck = at })
		t.perform()
		t.pace.passed(began, time.Now())
		if dat := t.deploy(); !dat.IsZero() && (recheck.IsZero() || dat.Before(recheck)) {
			recheck = dat
		}
		t.perform()
	}
	t.publishViewsIfChanged()
	return recheck, passed
}

// perform commits the txns the core queued, in order, stepping the core
// with each one's outcome; a continuation may queue more, performed in
// turn. It returns with the outbox empty.
func (t *term) perform() {
	for len(t.outbox) > 0 {
		tx := t.outbox[0]
		t.outbox[0] = nil
		t.outbox = t.outbox[1:]
		landed, err := t.write(tx)
		tx.then(landed, err)
	}
	t.outbox = nil
}

// write commits tx on a goroutine of its own while the loop runs the
// core's work meanwhile and then answers reads until etcd is done: a
// commit takes etcd's time (up to the transaction's timeout when etcd is
// slow or gone), and reads keep answering from memory meanwhile. The
// commit reads nothing of the core's state.
func (t *term) write(tx *txn) (landed int, err error) {
	if !tx.confirm && !tx.writes() {
		if tx.meanwhile != nil {
			tx.meanwhile()
		}
		return len(tx.stages), nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		landed, err = t.commitStages(tx)
	}()
	if tx.meanwhile != nil {
		tx.meanwhile()
	}
	t.serveUntil(done)
	return landed, err
}

// writes reports whether any stage of tx has an op.
func (tx *txn) writes() bool {
	for _, s := range tx.stages {
		if len(s) > 0 {
			return true
		}
	}
	return false
}

func (t *term) commitStages(tx *txn) (int, error) {
	for i, ops := range tx.stages {
		if err := t.commit(ops); err != nil {
			return i, err
		}
	}
	if tx.confirm {
		return len(tx.stages), t.confirmNoop()
	}
	return len(tx.stages), nil
}

// commit writes ops fenced on the term. A fenced write ends the term.
func (t *term) commit(ops []registry.Op) error {
	if len(ops) == 0 {
		return nil
	}
	// Each transaction has its own timeout (registry.CommitterConfig): a
	// large batch to a far etcd takes as long as it takes, an unreachable
	// etcd fails it within the timeout.
	err := t.committer.Commit(t.commitCtx, ops)
	if errors.Is(err, registry.ErrFenced) {
		t.cancel(err)
		return ErrNotLeader
	}
	if err != nil && t.ctx.Err() != nil {
		return ErrNotLeader
	}
	if err != nil && t.etcdLost(err) {
		return t.unreachableErr(true) // degraded: memory is kept, only read
	}
	if err != nil {
		// The outcome is unknown: a transaction that timed out may have
		// landed, and a write split over several may have landed in part
		// (registry.ErrPartial). Memory must not disagree with etcd, so the
		// term ends and the next one (this engine or another) starts from
		// what etcd holds. Agents keep their units meanwhile.
		t.e.log.Error("an etcd write failed; ending the term to reload from etcd", "err", err)
		t.cancel(err)
		return fmt.Errorf("%w: %w (the change may or may not have been written; the leader reloads the cluster from etcd, retry)", ErrUnavailable, err)
	}
	return nil
}

func (t *term) failPending() {
	for {
		select {
		case r := <-t.reqs:
			r.res <- applyRes{err: ErrNotLeader}
		default:
			return
		}
	}
}
