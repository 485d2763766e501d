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
// time), then every c.Interval; each bounded by
// c.Timeout, all of a run at the same time, and reports each change of the
// tracked health (by c.HealthyAfter and c.UnhealthyAfter) to report, from
// the runner's goroutine. now is the clock the tracker is given (nil:
// time.Now).
//
// restarted says the unit was just restarted for being unhealthy: it stays
// Unhealthy (not Unknown) until its checks pass, so further failures do not
// turn it unhealthy again (a restart is once per turn), and its first run
// comes an Interval after the start, to give it time to come up.
func Start(c *unit.Check, probes []Probe, now func() time.Time, restarted bool, report Report) *Runner {
	state, first := Unknown, time.Duration(0)
	if restarted {
		state, first = Unhealthy, c.Interval
	}
	return start(c, probes, now, state, first, report)
}

// Resume is Start for checks that ran in another runner until now (of a
// process that handed its units over to a new image of itself): the
// tracked health begins at state (Unknown, Healthy or Unhealthy; another
// is Unknown), so that it is not reported again, and the first run comes
// after a random part of c.Interval, as the second run after a Start.
func Resume(c *unit.Check, probes []Probe, now func() time.Time, state string, report Report) *Runner {
	switch state {
	case Healthy, Unhealthy:
	default:
		state = Unknown
	}
	return start(c, probes, now, state, time.Duration(rand.Int64N(int64(c.Interval)))+1, report)
}

// start runs probes first after first (at once when 0), then as Start
// says, tracking the health from state.
func start(c *unit.Check, probes []Probe, now func() time.Time, state string, first time.Duration, report Report) *Runner {
	if now == nil {
		now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Runner{cancel: cancel, done: make(chan struct{})}
	t := NewTracker(c.HealthyAfter, c.UnhealthyAfter)
	t.state = state
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

func (r *Runner) loop(ctx context.Context, c *unit.Check, probes []Probe, t *Tracker, now func() time.Time, first time.Duration, report Report) {
	defer close(r.done)
	tick := time.NewTicker(max(first, c.Interval))
	defer tick.Stop()
	phased := first > 0 // the ticker's phase is set: by the wait, or after the first run
	if first > 0 {
		tick.Reset(first)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		tick.Reset(c.Interval)
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
			phased = true
			// The second run comes after (0, Interval], the next ones
			// every Interval from it.
			tick.Reset(time.Duration(rand.Int64N(int64(c.Interval))) + 1)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			tick.Reset(c.Interval)
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
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
		pctx, cancel := context.WithTimeoutCause(ctx, timeout, errTimeout)
		defer cancel()
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
