package agent

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flotilla/flotilla/internal/driver"
)

// The agent's own goroutines are few and waiting ones cost memory: a host
// of simulated agents (flotilla bench) runs 5,000 agents a process, and
// each goroutine parked on a channel or a ticker holds a stack (4-8 KiB)
// and a descriptor. So work that only waits for time (the watchdog, the
// question who leads) runs on a timer, in a goroutine of its own only
// while it runs, and the reconciler runs only while there is something to
// reconcile (kickReconcile). The watchdog's timer fires whatever the rest
// of the agent is doing (a driver stuck in a call, a stream that blocks).

// periodic runs a function every interval, on a timer (every).
type periodic struct {
	mu       sync.Mutex
	t        *time.Timer
	interval func() time.Duration
	stopped  bool
	running  bool
	wg       *sync.WaitGroup
}

// every runs f every interval() (read again after each run), each time in
// a goroutine of its own, until stop is called; runs never overlap. The
// first run comes at a random point of the first interval, so that the
// timers of agents started together (thousands in a bench's process) do
// not all fire at once, each starting a goroutine. wg counts the timer
// until it is stopped and any run in progress has ended.
func every(wg *sync.WaitGroup, interval func() time.Duration, f func()) *periodic {
	p := &periodic{interval: interval, wg: wg}
	wg.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.t = time.AfterFunc(1+rand.N(interval()), func() {
		p.mu.Lock()
		if p.stopped { // stop found the timer fired: this run releases wg
			p.mu.Unlock()
			wg.Done()
			return
		}
		p.running = true
		p.mu.Unlock()
		f()
		p.mu.Lock()
		defer p.mu.Unlock()
		p.running = false
		if p.stopped {
			wg.Done()
			return
		}
		p.t.Reset(p.interval())
	})
	return p
}

// stop ends the runs; one under way finishes (wg tells when).
func (p *periodic) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	p.stopped = true
	if p.t.Stop() { // it will not run again: nothing else releases wg
		p.wg.Done()
	}
}

// soon has the next run come within interval() from now, for an interval
// just shortened. interval must not wait for the caller's locks.
func (p *periodic) soon() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || p.running {
		return // a run under way reads the interval when it ends
	}
	if p.t.Stop() { // else it fires now
		p.t.Reset(p.interval())
	}
}

// reconciler runs the agent's reconciliation passes: in a goroutine
// started by kickReconcile when none runs, which passes until no kick came
// during its last pass, and only while Run runs.
type reconciler struct {
	mu      sync.Mutex
	ctx     context.Context // Run's while it runs; nil otherwise
	kicked  bool            // a pass is due
	running bool            // a goroutine is passing
	// wg counts the running goroutine and the unloads it started in the
	// background.
	wg sync.WaitGroup
	// retry is the pass due after a driver's call failed (retryLater), and
	// retryWait the wait before the next such pass.
	retry     *time.Timer
	retryWait time.Duration
}

// Waits before a pass made again after a failed unload: the first, then
// doubled while unloads keep failing, up to the last.
const (
	retryFirst = time.Second
	retryMost  = 30 * time.Second
)

// retryLater has the reconciler make a pass after a wait, once: an unload
// failed, and the pass tries it again. The wait doubles from retryFirst to
// retryMost while unloads keep failing (retried), so a driver that keeps
// failing is not asked in a loop.
func (a *Agent) retryLater() {
	r := &a.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.retry != nil {
		return // one is due
	}
	r.retryWait = min(max(2*r.retryWait, retryFirst), retryMost)
	r.retry = time.AfterFunc(r.retryWait, func() {
		r.mu.Lock()
		r.retry = nil
		r.mu.Unlock()
		a.kickReconcile()
	})
}

// retried says an unload succeeded: the next failure waits retryFirst.
func (a *Agent) retried() {
	a.rec.mu.Lock()
	a.rec.retryWait = 0
	a.rec.mu.Unlock()
}

// kickReconcile has the reconciler make a pass: at once if Run runs and no
// pass is under way, after the current pass otherwise, or when Run starts.
func (a *Agent) kickReconcile() {
	r := &a.rec
	r.mu.Lock()
	r.kicked = true
	ctx := r.ctx
	start := ctx != nil && !r.running
	if start {
		r.running = true
		r.wg.Add(1)
	}
	r.mu.Unlock()
	if start {
		go a.reconcile(ctx)
	}
}

// startReconciling lets kicks start passes under ctx (Run's), and makes
// one if a kick came before.
func (a *Agent) startReconciling(ctx context.Context) {
	a.rec.mu.Lock()
	a.rec.ctx = ctx
	kicked := a.rec.kicked
	a.rec.mu.Unlock()
	if kicked {
		a.kickReconcile()
	}
}

// stopReconciling makes no pass after the current one, and waits for it and
// for the unloads it started. ctx (Run's) must be done.
func (a *Agent) stopReconciling() {
	a.rec.mu.Lock()
	a.rec.ctx = nil
	a.rec.mu.Unlock()
	a.rec.wg.Wait()
}

// maxPooledActs bounds the slices of actions kept for later passes
// (actsPool): a machine's first pass over a large set of units should not
// leave its slice held.
const maxPooledActs = 1024

// reconcile applies the plan, again as long as kicks come while it does.
func (a *Agent) reconcile(ctx context.Context) {
	r := &a.rec
	defer r.wg.Done()
	for {
		r.mu.Lock()
		if !r.kicked || r.ctx == nil || ctx.Err() != nil {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.kicked = false
		r.mu.Unlock()
		a.pass(ctx, &r.wg)
	}
}

// passWorkers is how many of a pass's starts and stops a driver that
// loads in batches (driver.BatchLoader) is given at once.
const passWorkers = 8

// batchPass carries out a pass's actions on a driver that loads in
// batches: every load in one LoadBatch, then the starts, stops and
// unloads from up to passWorkers goroutines. A unit's start still comes
// after its load, and is skipped when the load failed.
func (a *Agent) batchPass(ctx context.Context, bl driver.BatchLoader, acts []action, wg *sync.WaitGroup) {
	a.loadBatch(bl, acts)
	rest := make([]action, 0, len(acts))
	for _, act := range acts {
		if act.Kind != actLoad {
			rest = append(rest, act)
		}
	}
	var next atomic.Int64
	var workers sync.WaitGroup
	for range min(len(rest), passWorkers) {
		workers.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(rest) {
					return
				}
				a.do(ctx, rest[i], wg)
			}
		})
	}
	workers.Wait()
}

// pass plans and carries out one reconciliation pass; wg counts the
// unloads it starts in the background.
func (a *Agent) pass(ctx context.Context, wg *sync.WaitGroup) {
	a.mu.Lock()
	if a.leaving {
		a.mu.Unlock()
		return // Leave stops the units; nothing is started again
	}
	buf := actsPool.Get().(*[]action)
	acts := appendPlan((*buf)[:0], a.wants, a.haves)
	a.mu.Unlock()
	if bl, ok := a.cfg.Driver.(driver.BatchLoader); ok {
		a.batchPass(ctx, bl, acts, wg)
	} else {
		for _, act := range acts {
			a.do(ctx, act, wg)
		}
	}
	if cap(acts) <= maxPooledActs {
		clear(acts) // the names are not kept alive
		*buf = acts
		actsPool.Put(buf)
	}
}
