package api

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/flotilla/flotilla/internal/cputime"
)

// WholeStateShare is the budget of the leader's /v1/state answers without
// limit= (the whole state, or a filtered view of any size): serving them
// takes at most this share of one core (over a few answers: each is
// charged the mean cost of answers, smooth), whatever the number of
// clients and however fast they poll. Each such answer starts only once the cost of
// the ones before it allows (pacer), so a client polling back to back
// waits between answers instead of taking the leader's CPU. Pages
// (limit=), answers 304 Not Modified and every other endpoint are never
// held back: they are how a client reads without waiting.
//
// Why 5%. Producing states may take a quarter of a core
// (SnapshotInterval, internal/engine), and scheduling needs the rest;
// copying the same state out again and again, whole, is the bulk read that
// Kubernetes' API priority and fairness charges by the work it takes and
// queues rather than let it crowd out the rest, and it gets a small
// share. It must be small because the budget counts only the leader's
// writes: a client on the leader's host costs about as much again to read
// each answer. Eight back-to-back pollers of 20,000 units (3.5 MB
// answers) took 0.6 CPU-s from the leader and 1 CPU-s themselves during
// a 0.85 s start of those units on a 2-CPU host, nearly doubling it; at
// 5% the same start is slowed by 8% (medians of 3 runs, within the host's
// noise) while 10% slowed it by up to 11%, and the eight pollers still get
// about 65 whole states a second between them (a 3.5 MB answer costs the
// leader about 0.75 ms). docs/benchmarks.md, "/v1/state under polling",
// has the figures.
const WholeStateShare = 0.05

// pacer admits paced answers one after another so that their cost stays
// within share of the time. Waiters are admitted in the order they came;
// one holding back never keeps another from writing: only the start of an
// answer is paced, not its write, so a slow client (whose write costs the
// leader little but lasts long) holds up no one.
type pacer struct {
	share float64
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
	cost  func(r *http.Request, write func()) time.Duration // writeCost

	turn chan struct{} // held by the one waiter whose turn is next

	mu   sync.Mutex
	next time.Time     // when the next answer may start
	mean time.Duration // what answers cost of late (smooth): the charge
	seen bool          // mean is set
}

// smooth is the weight of an answer's cost in the mean cost each answer
// is charged. The charges add up to what the answers cost (less at most
// 1/smooth answers' worth not charged yet), so the share holds over a few
// answers rather than each: one costly answer (the first copy of a new
// state, of memory the kernel has not sent from yet, cost 5 to 10 times
// the next ones on the bench's host) no longer holds the next waiter back
// 20 times its cost on its own, and a poller, which waits for the answers
// of the others before its own, waits about the mean.
const smooth = 8

func newPacer(share float64) *pacer {
	return &pacer{share: share, now: time.Now, sleep: sleepCtx, cost: writeCost, turn: make(chan struct{}, 1)}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wait returns when an answer may start, or ctx's error when ctx ends
// first; then call done with what the answer cost. The start reserves
// the mean cost of answers, divided by share (the answer's charge and the
// pause after it that keeps the share), and done corrects the reservation
// to the mean with this answer's cost in it; no credit is kept from quiet
// spells, so answers never come in a burst.
func (p *pacer) wait(ctx context.Context) (done func(cost time.Duration), err error) {
	select {
	case p.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-p.turn }()
	p.mu.Lock()
	next := p.next
	p.mu.Unlock()
	if d := next.Sub(p.now()); d > 0 {
		if err := p.sleep(ctx, d); err != nil {
			return nil, err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	guess := p.mean
	p.next = later(p.next, p.now()).Add(p.pause(guess))
	return func(cost time.Duration) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.seen {
			p.mean += (cost - p.mean) / smooth
		} else {
			p.mean, p.seen = cost, true
		}
		p.next = p.next.Add(p.pause(p.mean) - p.pause(guess))
	}, nil
}

// pause is how far an answer costing cost moves the next one's start.
func (p *pacer) pause(cost time.Duration) time.Duration {
	return time.Duration(float64(cost) / p.share)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// writeCost runs write, an answer to r, and returns what it cost the
// leader: the CPU time of the thread that wrote it, which counts the
// copies into the kernel and (on loopback) the kernel's sending them on,
// but not the time a slow client takes to read. Where that cannot be
// measured (other systems than Linux; HTTP/2, whose frames another
// goroutine writes), the time the write took.
func writeCost(r *http.Request, write func()) time.Duration {
	if r.ProtoMajor >= 2 {
		start := time.Now()
		write()
		return time.Since(start)
	}
	d, _ := cputime.Of(write)
	return d
}
