package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	apiv1 "github.com/flotilla/flotilla/api"
)

func newRestartCommand(g *Globals) *cobra.Command {
	var blk block
	cmd := &cobra.Command{
		Use:   "restart [flags] UNIT...",
		Short: "Restart one or more running units, one machine at a time",
		Long: `Restart one or more launched units with a rolling restart: one machine at a
time, in the order of the machines' IDs, the units of that machine are
stopped (their desired state set to loaded) and, once their processes have
stopped, started again; the next machine is only touched once every unit of
the previous one runs again ("Unit web@1.service restarted on
113f16a7.../10.0.0.1"). A unit runs again when its machine reports it
active, so a unit whose process exits by design (Type=oneshot) makes restart
wait until --block-timeout. A unit that moves to another machine meanwhile
is waited for where it runs.

Every unit named must exist and be launched on a machine; otherwise nothing
is changed. Global units are refused: their desired state applies to all
their machines at once, so they cannot be restarted one machine at a time
(stop and start them instead).

If a unit fails, cannot be placed or does not stop or start within
--block-timeout, restart stops there and fails, naming the unit and the
machine; the remaining machines are not touched. There is no --no-block:
restart has to wait to go on to the next machine.`,
		Example: `  flotilla restart web@1.service web@2.service web@3.service
  flotilla restart --block-timeout 2m web@{1..6}`,
		Args:         unitArgs,
		SilenceUsage: true,
		RunE: g.runE(func(ctx context.Context, e *env, args []string) error {
			if err := blk.check(); err != nil {
				return err
			}
			return e.restart(ctx, nameArgs(args), blk)
		}),
	}
	blk.register(cmd.Flags(), "on each machine, give up waiting for the units to stop, or to start again, after this long (0 means no limit)")
	return cmd
}

// restartGroup is the units restart handles on one machine.
type restartGroup struct {
	machine string
	units   []string
}

// restart restarts the units names machine by machine.
func (e *env) restart(ctx context.Context, names []string, blk block) error {
	groups, err := e.restartPlan(ctx, names)
	if err != nil {
		return err
	}
	machines := newMachineCache(e.c)
	for i, grp := range groups {
		if err := e.restartOn(ctx, grp, machines, blk); err != nil {
			var rest []string
			for _, later := range groups[i+1:] {
				rest = append(rest, machines.legend(ctx, later.machine, false))
			}
			switch len(rest) {
			case 0:
				return err
			case 1:
				return fmt.Errorf("%w; the remaining machine %s was not touched", err, rest[0])
			}
			return fmt.Errorf("%w; the %d remaining machines %s were not touched", err, len(rest), strings.Join(rest, ", "))
		}
	}
	return nil
}

// restartPlan checks that every unit of names can be restarted and groups
// them by machine, in the order of the machines' IDs.
func (e *env) restartPlan(ctx context.Context, names []string) ([]restartGroup, error) {
	known, err := e.fetchUnits(ctx, names)
	if err != nil {
		return nil, err
	}
	var (
		missing []string
		errs    []error
	)
	byMachine := map[string][]string{}
	for _, n := range names {
		u, ok := known[n]
		switch {
		case !ok:
			missing = append(missing, n)
		case u.Global:
			errs = append(errs, fmt.Errorf("cannot restart %s: it is a global unit, whose desired state applies to all its machines at once, so it cannot be restarted one machine at a time; stop and start it instead", n))
		case u.DesiredState != stateLaunched:
			errs = append(errs, fmt.Errorf("cannot restart %s: it is not launched (desired state %s); start it instead", n, u.DesiredState))
		case u.Machine == "":
			why := "is not scheduled to any machine yet"
			if u.Reason != "" {
				why = "cannot be placed: " + u.Reason
			}
			errs = append(errs, fmt.Errorf("cannot restart %s: it %s", n, why))
		default:
			byMachine[u.Machine] = append(byMachine[u.Machine], n)
		}
	}
	if err := notFound(missing); err != nil {
		errs = append([]error{fmt.Errorf("cannot restart: %w", err)}, errs...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	groups := make([]restartGroup, 0, len(byMachine))
	for _, id := range slices.Sorted(maps.Keys(byMachine)) {
		groups = append(groups, restartGroup{machine: id, units: byMachine[id]})
	}
	return groups, nil
}

// restartOn stops the units of grp, waits until their processes stopped,
// starts them again and waits until they run.
func (e *env) restartOn(ctx context.Context, grp restartGroup, machines *machineCache, blk block) error {
	legend := machines.legend(ctx, grp.machine, false)
	fail := func(err error, stopped bool) error {
		names := grp.units
		var we *waitError
		if errors.As(err, &we) && len(we.units) > 0 {
			names = we.units
		}
		err = fmt.Errorf("rolling restart halted at %s on machine %s: %w", strings.Join(names, ", "), legend, err)
		if stopped {
			err = fmt.Errorf("%w; %s left with desired state loaded: start %s with `flotilla start %s`",
				err, strings.Join(grp.units, ", "), them(len(grp.units)), strings.Join(grp.units, " "))
		}
		return err
	}

	snapshots, err := e.setDesired(ctx, grp.units, stateLoaded)
	if err != nil {
		return fail(err, false)
	}
	err = e.wait(ctx, waitSpec{
		targets:  restartTargets(grp.units, snapshots),
		want:     stateLoaded,
		timeout:  blk.timeout,
		attempts: blk.attempts,
		machines: machines,
		line: func(u *apiv1.Unit, machine string) string {
			return fmt.Sprintf("Unit %s stopped on %s", u.Name, machine)
		},
	})
	if err != nil {
		return fail(err, true)
	}

	snapshots, err = e.setDesired(ctx, grp.units, stateLaunched)
	if err != nil {
		return fail(err, true)
	}
	err = e.wait(ctx, waitSpec{
		targets:  restartTargets(grp.units, snapshots),
		want:     stateLaunched,
		timeout:  blk.timeout,
		attempts: blk.attempts,
		machines: machines,
		line: func(u *apiv1.Unit, machine string) string {
			return fmt.Sprintf("Unit %s restarted on %s", u.Name, machine)
		},
	})
	if err != nil {
		return fail(err, false)
	}
	return nil
}

// setDesired sets the desired state of the units names in one batch and
// returns their states as the batch left them.
func (e *env) setDesired(ctx context.Context, names []string, state string) (map[string]*apiv1.UnitState, error) {
	b := apiv1.Batch{Units: make([]apiv1.UnitChange, 0, len(names))}
	for _, n := range names {
		b.Units = append(b.Units, apiv1.UnitChange{Name: n, DesiredState: state})
	}
	res, err := e.c.Batch(ctx, b)
	if err != nil {
		return nil, err
	}
	e.warn(res.Warnings)
	snapshots := make(map[string]*apiv1.UnitState, len(res.Units))
	for _, u := range res.Units {
		snapshots[u.Name] = u.State
	}
	return snapshots, nil
}

// restartTargets are the units names to wait for, processes included,
// after restart changed their desired state.
func restartTargets(names []string, snapshots map[string]*apiv1.UnitState) []waitTarget {
	targets := make([]waitTarget, 0, len(names))
	for _, n := range names {
		targets = append(targets, waitTarget{name: n, changed: true, snapshot: snapshots[n], running: true})
	}
	return targets
}

func them(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}
