package health

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/flotilla/flotilla/internal/unit"
)

// Report is told each change of a unit's health: the new state, and when
// a run failed, why (the first failing probe's error, named).
type Report func(state string, reason error)

// Runner runs a unit's probes every Interval, from Start until Stop: the
// caller starts it when the unit becomes active and stops it when the unit
// is no longer active, unloaded or replaced.
type Runner struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs probes at once, then after a random part of c.Interval (so
// that the runs of units whose checks started together, as after a daemon
// restart, spread over the interval instead of coming all at once, every
// time), then every c.Interval; each bounded by c.Timeout, all of a run at
// the same time, and reports each change of the tracked health (by
// c.HealthyAfter and c.UnhealthyAfter) to report, from the runner's
// goroutine. now is the clock the tracker is given (nil: time.Now).
//
// The runs after the first fall on the instants of a grid of the clock
// (every slotOf(c.Interval)), the same for every runner of the process:
// spread over the interval, the runs of many runners still come together
// a few at a time, so that the process wakes once for several of them
// (with 1,000 units checked every 5 s, 4 times a second fewer than 200).
//
// restarted says the unit was just restarted for being unhealthy: it stays
// Unhealthy (not Unknown) until its checks pass, so further failures do not
// turn it unhealthy again (a restart is once per turn), and its first run
// comes an Interval after the start (give or take a slot), to give it time
// to come up.
//
// Failures within c.StartPeriod of Start do not count until a run passes
// (Tracker.StartPeriod): the unit became active then.
func Start(c *unit.Check, probes []Probe, now func() time.Time, restarted bool, report Report) *Runner {
	if restarted {
		return start(c, probes, now, Unhealthy, c.Interval, time.Time{}, report)
	}
	return start(c, probes, now, Unknown, 0, time.Time{}, report)
}

// Resume is Start for checks that ran in another runner until now (of a
// process that handed its units over to a new image of itself): the
// tracked health begins at state (Unknown, Healthy or Unhealthy; another
// is Unknown), so that it is not reported again, and the first run comes
// after a random part of c.Interval, as the second run after a Start.
// activeSince is when the unit became active: a unit still Unknown within
// c.StartPeriod of it is still coming up (a pass ended the period for one
// Healthy or Unhealthy).
func Resume(c *unit.Check, probes []Probe, now func() time.Time, state string, activeSince time.Time, report Report) *Runner {
	switch state {
	case Healthy, Unhealthy:
	default:
		state = Unknown
	}
	return start(c, probes, now, state, -1, activeSince, report)
}

// start runs probes first after first (at once when 0, a random part of
// the interval when negative), then as Start says, tracking the health
// from state, with the start period counted from activeSince (zero: now)
// while state is Unknown (a unit that passed is past it; one restarted
// for being unhealthy stays Unhealthy through failures anyway).
func start(c *unit.Check, probes []Probe, now func() time.Time, state string, first time.Duration, activeSince time.Time, report Report) *Runner {
	if now == nil {
		now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Runner{cancel: cancel, done: make(chan struct{})}
	t := NewTracker(c.HealthyAfter, c.UnhealthyAfter)
	t.state = state
	if c.StartPeriod > 0 && state == Unknown {
		if activeSince.IsZero() {
			activeSince = now()
		}
		t.StartPeriod(activeSince.Add(c.StartPeriod))
	}
	go r.loop(ctx, c, probes, t, now, first, report)
	return r
}

// Stop ends the runner, killing the probes under way, and returns once its
// goroutine has: report is not called after Stop returns. It must not be
// called from report.
func (r *Runner) Stop() {
	r.cancel()
	<-r.done
}

// slotOf is the spacing of the grid the runs of checks every interval
// fall on: a twentieth of the interval, between 10 and 250 ms. Each
// instant of the grid is a wakeup of the checker (and of the probe
// spawner) for the checks that fall on it, so the coarser the grid the
// fewer wakeups, each doing more: at a hundredth (50 ms for 5 s), half of
// the supervisor's CPU for 1,000 Exec= checks was the runtime waking
// and parking its threads (docs/benchmarks.md).
func slotOf(interval time.Duration) time.Duration {
	return min(max(interval/20, 10*time.Millisecond), 250*time.Millisecond)
}

// onGrid returns the last instant of the grid of slot at or before at,
// or, when that is not after from, the first instant of the grid after
// from (within a slot of at either way).
func onGrid(from, at time.Time, slot time.Duration) time.Time {
	// Truncate works on the wall clock and drops the monotonic reading:
	// take the offset from from, and add it to from, which has one.
	g := from.Add(at.Truncate(slot).Sub(from))
	if !g.After(from) {
		return g.Add(slot)
	}
	return g
}

func (r *Runner) loop(ctx context.Context, c *unit.Check, probes []Probe, t *Tracker, now func() time.Time, first time.Duration, report Report) {
	defer close(r.done)
	slot := slotOf(c.Interval)
	spread := func(from time.Time) time.Time {
		return onGrid(from, from.Add(time.Duration(rand.Int64N(int64(c.Interval)))+1), slot)
	}
	start := time.Now()
	next := start // the next run
	phased := first != 0
	switch {
	case first < 0:
		next = spread(start)
	case first > 0:
		next = onGrid(start, start.Add(first), slot)
	}
	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	if next.After(start) {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
	}
	for {
		err := RunAll(ctx, probes, c.Timeout)
		if ctx.Err() != nil {
			return // stopped meanwhile: the outcome is not the unit's
		}
		if state, changed := t.Observe(err == nil, now()); changed {
			report(state, err)
		}
		if !phased {
			// The second run comes after (0, Interval], the next ones
			// every Interval from it.
			phased = true
			next = spread(next)
		} else {
			next = next.Add(c.Interval)
		}
		if late := time.Since(next); late >= 0 { // a run outlasted the interval: skip what was missed
			next = next.Add((late/c.Interval + 1) * c.Interval)
		}
		timer.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
	}
}

// RunAll runs probes at the same time, each bounded by timeout, and returns
// nil when all passed, or the first failure in probe order, named.
func RunAll(ctx context.Context, probes []Probe, timeout time.Duration) error {
	if len(probes) == 0 {
		return errNoProbes
	}
	if len(probes) == 1 { // the usual case: no goroutine to start
		pctx := &deadlineCtx{parent: ctx, deadline: time.Now().Add(timeout)}
		defer pctx.cancel()
		if err := probes[0].Run(pctx); err != nil {
			return &ProbeError{Probe: probes[0].Name, Err: err}
		}
		return nil
	}
	errs := make([]error, len(probes))
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Go(func() {
			pctx, cancel := context.WithTimeoutCause(ctx, timeout, errTimeout)
			defer cancel()
			errs[i] = p.Run(pctx)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return &ProbeError{Probe: probes[i].Name, Err: err}
		}
	}
	return nil
}

// errTimeout is the cause of a probe's context ending at Timeout=.
var errTimeout = errors.New("Timeout= passed")

// ProbeError is a failed probe's error.
type ProbeError struct {
	Probe string
	Err   error
}

func (e *ProbeError) Error() string { return e.Probe + ": " + e.Err.Error() }
func (e *ProbeError) Unwrap() error { return e.Err }

// deadlineCtx is ctx with a deadline, whose timer is made only when it is
// asked whether it is done: a TCP= probe on loopback, done within its
// connect call, never asks, and a timer made and stopped at every run of
// every unit's checks was 7% of what they cost.
type deadlineCtx struct {
	parent   context.Context
	deadline time.Time

	once sync.Once
	ctx  context.Context
	stop context.CancelFunc
}

func (c *deadlineCtx) init() {
	c.once.Do(func() { c.ctx, c.stop = context.WithDeadlineCause(c.parent, c.deadline, errTimeout) })
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *deadlineCtx) Done() <-chan struct{}       { c.init(); return c.ctx.Done() }
func (c *deadlineCtx) Err() error                  { c.init(); return c.ctx.Err() }
func (c *deadlineCtx) Value(key any) any           { c.init(); return c.ctx.Value(key) } // context.Cause finds the inner context through Value

// cancel releases the timer, if it was made; one not made never is, and
// the context is done from then on.
func (c *deadlineCtx) cancel() {
	c.once.Do(func() { c.ctx, c.stop = canceledCtx, func() {} })
	c.stop()
}

// canceledCtx is a context that is done.
var canceledCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()
