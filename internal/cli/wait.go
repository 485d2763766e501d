package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
)

// Desired and current states of units, in fleet's vocabulary.
const (
	stateInactive = "inactive"
	stateLoaded   = "loaded"
	stateLaunched = "launched"
)

// waitTarget is a unit a command waits for.
type waitTarget struct {
	name string
	// changed tells that the command changed the unit's desired state;
	// then a failure report older than the change (equal to snapshot)
	// tells nothing about the outcome.
	changed  bool
	snapshot *apiv1.UnitState
	// running asks for the unit's process too: launched must also be
	// active, loaded inactive or failed. Agents report the state they
	// applied before the process has finished starting or stopping.
	running bool
	// hash, for a replaced unit, is the hash of its new file: until its
	// machine reports running that file, what it reports is of the old one.
	hash string
	// joinUntil is when a unit not placed because the leader knows no
	// machine counts as one that cannot be placed (before: pending).
	joinUntil time.Time
}

// verdict is where a unit stands on its way to a state.
type verdict int

const (
	pending verdict = iota
	reached
	unplaceable
	failed
	vanished
)

// judge tells where unit u (nil if it no longer exists) stands on its way to
// the state want.
func judge(t waitTarget, want string, u *apiv1.Unit) verdict {
	if u == nil {
		return vanished
	}
	stale := t.hash != "" && (u.State == nil || u.State.Hash != t.hash)
	if want == stateLaunched && u.State != nil && u.State.Active == "failed" && !stale {
		if t.changed && sameReport(t.snapshot, u.State) {
			return pending // the failure predates the change
		}
		return failed
	}
	if u.CurrentState == want && !stale {
		// A global unit has no one process to wait for: its state is that
		// every machine it runs on has carried out the desired state.
		if t.running && !u.Global && !processDone(want, u.State) {
			return pending
		}
		return reached
	}
	if want != stateInactive && u.Reason != "" && u.MovingFrom == "" && !strings.HasSuffix(u.Reason, movingReason) &&
		!joining(u.Reason, t.joinUntil) {
		return unplaceable
	}
	return pending
}

// noMachinesReason is the scheduler's reason for a unit not placed because
// the leader knows no machine (scheduler.NoMachines). A leader that has
// just begun (a new cluster, a failover) says so until the agents, its own
// daemon's among them, have said hello: a wait gives them joinGrace.
const noMachinesReason = "no machines available"

// joinGrace is how long a wait treats "no machines available" as machines
// still joining: as long as the CLI rides out a leader election.
const joinGrace = leaderRetry

// joining reports whether a unit not placed for reason may still be
// placed once machines join: the leader knew none, and it is before until.
func joining(reason string, until time.Time) bool {
	return reason == noMachinesReason && time.Now().Before(until)
}

// movingReason ends the engine's reason for a unit that left a machine it
// no longer fits and is placed again once it has stopped there ("stopping
// on M before it moves"): a unit on its way, not one that cannot be placed.
// Units carry MovingFrom for this; the words are still recognized from a
// leader that does not set it.
const movingReason = "before it moves"

// processDone reports whether the process of a unit whose machine applied
// the state want has caught up: running when launched, stopped (inactive or
// failed) when loaded.
func processDone(want string, st *apiv1.UnitState) bool {
	switch want {
	case stateLaunched:
		return st != nil && st.Active == "active"
	case stateLoaded:
		return st == nil || st.Active == "inactive" || st.Active == "failed"
	}
	return true
}

// sameReport reports whether a and b are the same agent report.
func sameReport(a, b *apiv1.UnitState) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// defaultPollMin and defaultPollMax bound the interval between polls.
const (
	defaultPollMin = 100 * time.Millisecond
	defaultPollMax = time.Second
	// maxPollErrors is how many polls in a row may fail because the
	// cluster is unavailable (e.g. electing a leader) before giving up.
	maxPollErrors = 10
)

// waitUnits polls the units of targets and the instances of ranges until
// each reaches the state want, cannot be placed, failed or vanished,
// printing fleetctl's line for each. It fails if any unit did not reach
// want.
func (e *env) waitUnits(ctx context.Context, targets []waitTarget, ranges []unitRange, want string, b block) error {
	return e.wait(ctx, waitSpec{targets: targets, ranges: ranges, want: want, timeout: b.timeout, attempts: b.attempts})
}

// block holds the flags that bound a wait: --block-timeout and fleetctl's
// --block-attempts.
type block struct {
	timeout  time.Duration
	attempts int
}

// register adds --block-timeout (its help given) and --block-attempts to fs.
func (b *block) register(fs *pflag.FlagSet, timeoutHelp string) {
	fs.DurationVar(&b.timeout, "block-timeout", 0, timeoutHelp)
	fs.IntVar(&b.attempts, "block-attempts", 0, "give up waiting after this many polls of the units' states, as fleetctl's --block-attempts (0 means no limit)")
}

// check refuses negative values.
func (b block) check() error {
	if b.timeout < 0 {
		return fmt.Errorf("invalid --block-timeout %s: must not be negative", b.timeout)
	}
	if b.attempts < 0 {
		return fmt.Errorf("invalid --block-attempts %d: must not be negative", b.attempts)
	}
	return nil
}

// waitSpec says what to wait for.
type waitSpec struct {
	targets []waitTarget
	// ranges are ranges of instances, counted rather than polled one by
	// one (pollRange).
	ranges []unitRange
	want   string
	// timeout > 0 bounds the wait.
	timeout time.Duration
	// attempts > 0 bounds the number of polls (fleetctl's --block-attempts).
	attempts int
	// line is what to print of a unit that reached want, given the legend
	// of its machine; nil means reachedLine.
	line func(u *apiv1.Unit, machine string) string
	// machines gives machine legends; nil means a new cache.
	machines *machineCache
}

// waitError ends a wait in which some units did not reach the state.
type waitError struct {
	units []string // the units that did not, in the order they were found out
	msg   string
	// notStarted tells that a unit could not be placed or failed to start
	// (ExitNotStarted).
	notStarted bool
}

func (e *waitError) Error() string { return e.msg }

// wait polls the units of w.targets until each reaches the state w.want,
// cannot be placed, failed or vanished, printing a line for each. It
// returns a *waitError if any unit did not reach w.want, or if the wait
// timed out or was interrupted.
func (e *env) wait(ctx context.Context, w waitSpec) error {
	parent := ctx
	if w.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.timeout)
		defer cancel()
	}
	interval, maxInterval := e.g.pollMin, e.g.pollMax
	if interval <= 0 {
		interval = defaultPollMin
	}
	if maxInterval <= 0 {
		maxInterval = defaultPollMax
	}
	machines := w.machines
	if machines == nil {
		machines = newMachineCache(e.c)
	}
	line := w.line
	if line == nil {
		line = reachedLine
	}
	want := w.want
	joinUntil := time.Now().Add(joinGrace)
	pendingTargets := slices.Clone(w.targets)
	for i := range pendingTargets {
		pendingTargets[i].joinUntil = joinUntil
	}
	pendingRanges := newRangeWaits(w.ranges, joinUntil)
	var o outcome
	pollErrors := 0
	polls := 0
	for {
		polls++
		err := e.pollTargets(ctx, &pendingTargets, want, machines, line, &o)
		if err == nil {
			err = e.pollRanges(ctx, &pendingRanges, want, machines, &o)
		}
		switch {
		case err == nil:
			pollErrors = 0
		case ctx.Err() == nil && client.IsUnavailable(err) && pollErrors < maxPollErrors:
			pollErrors++
		case ctx.Err() == nil:
			return fmt.Errorf("wait for units: %w", err)
		}
		if len(pendingTargets) == 0 && len(pendingRanges) == 0 {
			break
		}
		pendingNames := func() []string {
			names := targetNames(pendingTargets)
			for _, r := range pendingRanges {
				if r.progress == "" { // not counted yet
					names = append(names, r.name)
					continue
				}
				names = append(names, fmt.Sprintf("%s (%s)", r.name, r.progress))
			}
			return names
		}
		if w.attempts > 0 && polls >= w.attempts {
			names := pendingNames()
			return &waitError{units: append(o.problems, names...), notStarted: o.notStarted,
				msg: fmt.Sprintf("gave up after %d attempts (--block-attempts) waiting for units to become %s: %s", w.attempts, want, strings.Join(names, ", "))}
		}
		select {
		case <-ctx.Done():
			names := pendingNames()
			werr := &waitError{units: append(o.problems, names...), notStarted: o.notStarted}
			if parent.Err() != nil {
				werr.msg = fmt.Sprintf("interrupted while waiting for units to become %s: %s (their desired state is set)", want, strings.Join(names, ", "))
			} else {
				werr.msg = fmt.Sprintf("timed out after %s waiting for units to become %s: %s", w.timeout, want, strings.Join(names, ", "))
			}
			return werr
		case <-time.After(interval):
		}
		interval = min(2*interval, maxInterval)
	}
	if o.failures > 0 {
		total := len(w.targets)
		for _, r := range w.ranges {
			total += r.n
		}
		return &waitError{
			units:      o.problems,
			notStarted: o.notStarted,
			msg:        fmt.Sprintf("%d of %d units did not become %s: %s", o.failures, total, want, strings.Join(o.problems, ", ")),
		}
	}
	return nil
}

// outcome gathers the units a wait found would not reach its state.
type outcome struct {
	problems   []string // their names, in the order found out
	failures   int      // how many (a range's are counted, not all named)
	notStarted bool     // one could not be placed or failed (ExitNotStarted)
}

func (o *outcome) add(notStarted bool, names ...string) {
	o.problems = append(o.problems, names...)
	o.failures += len(names)
	o.notStarted = o.notStarted || notStarted
}

// pollTargets polls the units of *pending once, judging each: those that
// reached want are reported with line and those that did not with why
// (added to o), and *pending keeps the others.
func (e *env) pollTargets(ctx context.Context, pending *[]waitTarget, want string, machines *machineCache, line func(*apiv1.Unit, string) string, o *outcome) error {
	if len(*pending) == 0 {
		return nil
	}
	units, err := e.fetchUnits(ctx, targetNames(*pending))
	if err != nil {
		return err
	}
	var still []waitTarget
	for _, t := range *pending {
		var u *apiv1.Unit
		if found, ok := units[t.name]; ok {
			u = &found
		}
		switch judge(t, want, u) {
		case reached:
			fmt.Fprintln(e.out, line(u, machines.legend(ctx, u.Machine, false)))
		case unplaceable:
			o.add(true, t.name)
			fmt.Fprintf(e.errOut, "Unit %s cannot be placed: %s\n", u.Name, u.Reason)
		case failed:
			o.add(true, t.name)
			fmt.Fprintln(e.errOut, failedLine(u, machines.legend(ctx, u.State.Machine, false)))
		case vanished:
			o.add(false, t.name)
			fmt.Fprintf(e.errOut, "Unit %s was destroyed while waiting for it to become %s\n", t.name, want)
		default:
			still = append(still, t)
		}
	}
	*pending = still
	return nil
}

// pollRanges polls the ranges of *pending once (pollRange): those settled
// leave it, reported as reached when all their instances did, else added
// to o.
func (e *env) pollRanges(ctx context.Context, pending *[]*rangeWait, want string, machines *machineCache, o *outcome) error {
	var still []*rangeWait
	for i, r := range *pending {
		done, err := e.pollRange(ctx, r, want, machines)
		if err != nil {
			*pending = append(still, (*pending)[i:]...)
			return err
		}
		if !done {
			still = append(still, r)
			continue
		}
		if r.problems == 0 {
			fmt.Fprintln(e.out, rangeDone(r, want))
			continue
		}
		names := r.rangeProblems()
		o.add(true, names...)
		o.failures += r.problems - len(names)
	}
	*pending = still
	return nil
}

func targetNames(ts []waitTarget) []string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.name
	}
	return names
}

// reachedLine is fleetctl's report of a unit that reached its state:
// "Unit hello.service launched on 113f16a7.../172.17.8.103".
func reachedLine(u *apiv1.Unit, machine string) string {
	if u.CurrentState == stateInactive || u.Machine == "" {
		return fmt.Sprintf("Unit %s %s", u.Name, u.CurrentState)
	}
	return fmt.Sprintf("Unit %s %s on %s", u.Name, u.CurrentState, machine)
}

// failedLine reports a unit that failed to start.
func failedLine(u *apiv1.Unit, machine string) string {
	s := fmt.Sprintf("Unit %s failed on %s", u.Name, machine)
	if u.State.Result != "" {
		s += " (Result: " + u.State.Result + ")"
	}
	if u.State.Message != "" {
		s += ": " + u.State.Message
	}
	return s
}

// machineCache looks up the IPs of machines for their legends, fetching
// the machine list when first needed and once more for a machine it does
// not know. Errors only make legends shorter.
type machineCache struct {
	c       *client.Client
	byID    map[string]apiv1.Machine
	fetches int
}

func newMachineCache(c *client.Client) *machineCache {
	return &machineCache{c: c, byID: map[string]apiv1.Machine{}}
}

func (m *machineCache) legend(ctx context.Context, id string, full bool) string {
	if id == "" {
		return "-"
	}
	if _, ok := m.byID[id]; !ok && m.fetches < 2 {
		m.fetches++
		if l, err := m.c.Machines(ctx); err == nil {
			for _, ms := range l.Machines {
				m.byID[ms.ID] = ms
			}
		}
	}
	return machineLegend(id, m.byID[id].IP, full)
}

// machineLegend is fleetctl's way to show a machine: the first 8 characters
// of its ID and "..." unless full, then "/" and the IP when known.
func machineLegend(id, ip string, full bool) string {
	if id == "" {
		return "-"
	}
	s := machineID(id, full)
	if ip != "" {
		s += "/" + ip
	}
	return s
}

func machineID(id string, full bool) string {
	if full || len(id) <= 8 {
		return id
	}
	return id[:8] + "..."
}
