package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/unit"
)

// unitRange is a UNIT argument naming a range of a template's instances,
// "web@{1..1000}.service" (quoted, so that the shell leaves it alone).
type unitRange struct {
	name string // as the API takes it
	n    int    // how many instances
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
		_, r, _, err := unit.ParseRange(name)
		if err != nil {
			return nil, nil, err
		}
		ranges = append(ranges, unitRange{name: name, n: r.Len()})
	}
	return ranges, rest, nil
}

// waitRanges waits until every instance of ranges has reached what verb v
// asks, counting them in the leader's state (GET /v1/state with the range
// as the unit filter, one unit a page: a count, cheap for the leader):
// start waits until all are active, and fails when some fail; stop and
// unload until none is active; load until none is left unplaced.
func (e *env) waitRanges(ctx context.Context, ranges []unitRange, v stateVerb, blk block) error {
	if len(ranges) == 0 {
		return nil
	}
	var deadline time.Time
	if blk.timeout > 0 {
		deadline = time.Now().Add(blk.timeout)
	}
	count := func(r unitRange, state string) (int, error) {
		st, err := e.c.State(ctx, client.StateFilter{Unit: r.name, State: state, Limit: 1})
		if err != nil {
			return 0, err
		}
		return st.Total, nil
	}
	for _, r := range ranges {
		for attempt := 1; ; attempt++ {
			var done bool
			var what string
			switch v.target {
			case stateLaunched:
				active, err := count(r, "active")
				if err != nil {
					return err
				}
				failed, err := count(r, "failed")
				if err != nil {
					return err
				}
				if failed > 0 {
					return fmt.Errorf("%d of the %d units of %s failed (flotilla list-units --fields unit,active,sub shows which)", failed, r.n, r.name)
				}
				done, what = active == r.n, fmt.Sprintf("%d of %d active", active, r.n)
			case stateLoaded, stateInactive:
				if v.name == "load" {
					unplaced, err := count(r, "unplaced")
					if err != nil {
						return err
					}
					done, what = unplaced == 0, fmt.Sprintf("%d of %d not placed yet", unplaced, r.n)
					break
				}
				running := 0
				for _, s := range []string{"active", "activating", "deactivating"} {
					n, err := count(r, s)
					if err != nil {
						return err
					}
					running += n
				}
				done, what = running == 0, fmt.Sprintf("%d of %d still running", running, r.n)
			}
			if done {
				fmt.Fprintf(e.out, "Units %s %s (%d units)\n", r.name, v.target, r.n)
				break
			}
			if (!deadline.IsZero() && time.Now().After(deadline)) || (blk.attempts > 0 && attempt >= blk.attempts) {
				return fmt.Errorf("gave up waiting for %s to be %s: %s", r.name, v.target, what)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
		}
	}
	return nil
}
