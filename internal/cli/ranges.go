package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/unit"
)

// unitRange is a UNIT argument naming a range of a template's instances,
// "web@{1..1000}.service" (quoted, so that the shell leaves it alone).
type unitRange struct {
	name     string // as the API takes it
	n        int    // how many instances
	template string // web@.service
	arg      string // as given, maybe with a directory
}

// rangeArgs separates the ranges of instances among UNIT arguments from
// the other arguments.
func rangeArgs(args []string) (ranges []unitRange, rest []string, err error) {
	for _, arg := range args {
		if !strings.Contains(arg, "{") {
			rest = append(rest, arg)
			continue
		}
		name := unitName(arg)
		tmpl, r, _, err := unit.ParseRange(name)
		if err != nil {
			return nil, nil, err
		}
		ranges = append(ranges, unitRange{name: name, n: r.Len(), template: tmpl, arg: arg})
	}
	return ranges, rest, nil
}

// rangeTemplates returns the templates to submit before ranges can be
// loaded or started, as for a single instance (completeRefs): a range
// given with a directory (units/web@{1..3}.service) submits the template
// file there (units/web@.service); a bare range uses the cluster's
// template, else the file in the current directory.
func (e *env) rangeTemplates(ctx context.Context, ranges []unitRange) ([]apiv1.UnitChange, error) {
	var names []string
	for _, r := range ranges {
		if !isPath(r.arg) && !slices.Contains(names, r.template) {
			names = append(names, r.template)
		}
	}
	known := map[string]apiv1.Unit{}
	if len(names) > 0 {
		var err error
		if known, err = e.fetchUnits(ctx, names); err != nil {
			return nil, err
		}
	}
	var changes []apiv1.UnitChange
	seen := map[string]bool{}
	for _, r := range ranges {
		p := filepath.Join(filepath.Dir(r.arg), r.template)
		if _, ok := known[r.template]; (ok && !isPath(r.arg)) || seen[r.template] {
			continue
		}
		seen[r.template] = true
		data, err := readIfExists(p)
		if err != nil {
			return nil, err
		}
		if data == nil {
			if isPath(r.arg) {
				return nil, fmt.Errorf("unit file %s not found, nor its template %s", r.arg, p)
			}
			return nil, fmt.Errorf("units %s not found: their template %s is neither in the cluster nor a file here", r.name, r.template)
		}
		changes = append(changes, apiv1.UnitChange{Name: r.template, File: string(data)})
	}
	return changes, nil
}

// rangeWait is a range of instances a command waits for. A range is
// counted in the leader's state (GET /v1/state with the range as the unit
// filter), a page at a time, so that a range of a million instances costs
// the leader counts, not a million units a poll.
type rangeWait struct {
	unitRange
	// reported holds the instances reported as unplaceable or failed;
	// the first maxRangeLines of them are reported one by one.
	reported map[string]bool
	problems int    // instances that cannot be placed or failed, at the last poll
	progress string // where the range stands, for a wait that gives up
	// joinUntil: as waitTarget's.
	joinUntil time.Time
}

// maxRangeLines is how many instances of a range that cannot be placed or
// failed are reported one by one; the others are counted.
const maxRangeLines = 10

// rangePage is how many instances of a range a poll reads at once.
const rangePage = 1000

func newRangeWaits(ranges []unitRange, joinUntil time.Time) []*rangeWait {
	ws := make([]*rangeWait, len(ranges))
	for i, r := range ranges {
		ws[i] = &rangeWait{unitRange: r, reported: map[string]bool{}, joinUntil: joinUntil}
	}
	return ws
}

// pollRange finds out where the instances of r stand on their way to the
// state want, as judge does for a single unit, and reports those newly
// found unplaceable or failed. It tells whether every instance has reached
// want or cannot: start waits until every instance is active, failed or
// cannot be placed; load and stop until none runs and every instance is
// placed or cannot be; unload until none runs.
func (e *env) pollRange(ctx context.Context, r *rangeWait, want string, machines *machineCache) (settled bool, err error) {
	count := func(states ...string) (int, error) {
		n := 0
		for _, s := range states {
			st, err := e.c.State(ctx, client.StateFilter{Unit: r.name, State: s, Limit: 1})
			if err != nil {
				return 0, err
			}
			n += st.Total
		}
		return n, nil
	}
	switch want {
	case stateLaunched:
		active, err := count("active")
		if err != nil {
			return false, err
		}
		failed, err := e.rangeFailed(ctx, r, machines)
		if err != nil {
			return false, err
		}
		unplaceable, _, err := e.rangeUnplaceable(ctx, r)
		if err != nil {
			return false, err
		}
		r.problems = failed + unplaceable
		r.progress = fmt.Sprintf("%d of %d active", active, r.n)
		return active+failed+unplaceable >= r.n, nil
	case stateLoaded:
		running, err := count("active", "activating", "deactivating")
		if err != nil {
			return false, err
		}
		unplaceable, unplaced, err := e.rangeUnplaceable(ctx, r)
		if err != nil {
			return false, err
		}
		r.problems = unplaceable
		r.progress = fmt.Sprintf("%d of %d still running, %d not placed yet", running, r.n, unplaced-unplaceable)
		return running == 0 && unplaced == unplaceable, nil
	}
	running, err := count("active", "activating", "deactivating")
	if err != nil {
		return false, err
	}
	r.progress = fmt.Sprintf("%d of %d still running", running, r.n)
	return running == 0, nil
}

// rangeUnplaceable counts the instances of r that are not placed, and
// among them those that cannot be (judge's unplaceable: a reason, and not
// on their way to another machine), reporting those newly found. It reads
// the unplaced instances a page at a time and stops at the first one still
// waiting for the scheduler: the range is not settled then.
func (e *env) rangeUnplaceable(ctx context.Context, r *rangeWait) (unplaceable, unplaced int, err error) {
	// The first page is one instance: while instances wait for the
	// scheduler, a poll reads no more.
	f := client.StateFilter{Unit: r.name, State: "unplaced", Limit: 1}
	for ; ; f.Limit = rangePage {
		st, err := e.c.State(ctx, f)
		if err != nil {
			return 0, 0, err
		}
		unplaced = st.Total
		for _, u := range st.Units {
			if u.Reason == "" || strings.HasSuffix(u.Reason, movingReason) || joining(u.Reason, r.joinUntil) {
				return unplaceable, unplaced, nil
			}
			unplaceable++
			if e.reportRange(r, u.Name) {
				fmt.Fprintf(e.errOut, "Unit %s cannot be placed: %s\n", u.Name, u.Reason)
			}
		}
		if st.Next == "" {
			return unplaceable, unplaced, nil
		}
		f.After = st.Next
	}
}

// rangeFailed counts the instances of r that failed, reporting those newly
// found as a single unit's failure is.
func (e *env) rangeFailed(ctx context.Context, r *rangeWait, machines *machineCache) (int, error) {
	st, err := e.c.State(ctx, client.StateFilter{Unit: r.name, State: "failed", Limit: maxRangeLines})
	if err != nil {
		return 0, err
	}
	var show []string
	for _, u := range st.Units {
		if e.reportRange(r, u.Name) {
			show = append(show, u.Name)
		}
	}
	if len(show) > 0 {
		units, err := e.fetchUnits(ctx, show)
		if err != nil {
			return 0, err
		}
		for _, name := range show {
			if u, ok := units[name]; ok && u.State != nil {
				fmt.Fprintln(e.errOut, failedLine(&u, machines.legend(ctx, u.State.Machine, false)))
			}
		}
	}
	return st.Total, nil
}

// reportRange records that instance name of r cannot be placed or failed,
// and tells whether to report it line by line: the first time, among the
// first maxRangeLines.
func (e *env) reportRange(r *rangeWait, name string) bool {
	if r.reported[name] {
		return false
	}
	r.reported[name] = true
	return len(r.reported) <= maxRangeLines
}

// rangeProblems names the instances of r that cannot be placed or failed,
// for the error that ends the wait: those reported, then how many more.
func (r *rangeWait) rangeProblems() []string {
	names := make([]string, 0, len(r.reported)+1)
	for name := range r.reported {
		names = append(names, name)
	}
	slices.Sort(names)
	if len(names) > maxRangeLines {
		names = names[:maxRangeLines]
	}
	if more := r.problems - len(names); more > 0 {
		names = append(names, fmt.Sprintf("%d more of %s (flotilla list-unit-files --fields unit,state,reason shows them)", more, r.name))
	}
	return names
}

// rangeDone is what a wait prints of a range whose instances all reached
// want.
func rangeDone(r *rangeWait, want string) string {
	return fmt.Sprintf("Units %s %s (%d units)", r.name, want, r.n)
}
