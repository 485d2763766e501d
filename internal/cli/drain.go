package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	apiv1 "github.com/flotilla/flotilla/api"
)

func newDrainCommand(g *Globals) *cobra.Command {
	var (
		lf          listFlags
		cancel      bool
		noBlock     bool
		timeout     time.Duration
		maxParallel int
	)
	var cmd *cobra.Command
	cmd = &cobra.Command{
		Use:   "drain [flags] MACHINE",
		Short: "Move every unit off a machine before maintenance",
		Long: `Drain a machine: it takes no more units, and each of its units moves to
another machine where it fits. A unit that fits on no other machine stays
where it runs, with its reason. A launched unit that is not Singleton= starts
on its new machine first, and its copy here stops once the new one is
active, so a drain never takes a service to zero; a Singleton= unit (or one
only loaded) stops here before it starts on the other machine (never both
at once). At most --max-parallel instances of one template are mid-move at
once; the others wait their turn, running. Global units stop here. The drain
is durable: the machine stays drained, across daemon and leader restarts,
until drain --cancel. MACHINE is a machine ID or a prefix of one.

By default drain waits until every unit that can move has moved (or
--block-timeout), then prints the machine and how many units moved and
stay, with each staying unit's reason. Its exit status says whether the
machine is empty: 0 when it is, 2 when units stay because they fit nowhere
else, 1 when --block-timeout passed with units still moving (and, as every
command, 4 when the cluster cannot be reached). --no-block returns once the
drain is recorded.`,
		Example: `  flotilla drain 113f16a7
  flotilla drain --max-parallel 3 113f16a7
  flotilla drain --cancel 113f16a7`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("give one machine (usage: %s)", cmd.UseLine())
			}
			return nil
		},
		SilenceUsage: true,
		RunE: g.runE(func(ctx context.Context, e *env, args []string) error {
			fields, err := parseFields(lf.fields, machineFields())
			if err != nil {
				return err
			}
			if maxParallel < 1 || maxParallel > apiv1.MaxDrainParallel {
				return fmt.Errorf("invalid --max-parallel %d: want 1 to %d", maxParallel, apiv1.MaxDrainParallel)
			}
			if cancel && cmd.Flags().Changed("max-parallel") {
				return fmt.Errorf("--max-parallel goes with a drain, not with --cancel")
			}
			drain := !cancel
			patch := apiv1.MachinePatch{Drain: &drain}
			if drain {
				patch.MaxParallel = maxParallel
			}
			if !drain || noBlock {
				m, err := e.setMetadata(ctx, args[0], patch)
				if err != nil {
					return err
				}
				return e.writeMachine(fields, lf, m)
			}
			id, err := e.resolveMachine(ctx, args[0])
			if err != nil {
				return err
			}
			before, _, err := e.machine(ctx, id)
			if err != nil {
				return err
			}
			if _, err := e.setMetadata(ctx, id, patch); err != nil {
				return err
			}
			m, waitErr := e.waitDrained(ctx, id, timeout)
			if waitErr != nil && m.ID == "" {
				return waitErr
			}
			s := drainSummary{machineRow: machineRows([]apiv1.Machine{m})[0], Staying: m.Staying, Waiting: drainWaiting(m)}
			s.Moved = max(before.Units+before.Moving-m.Units-m.Moving, 0)
			if s.Staying == nil {
				s.Staying = []apiv1.UnitReason{}
			}
			if e.json {
				err = writeJSON(e.out, s)
			} else {
				err = e.writeDrainSummary(fields, lf, s)
			}
			if err != nil {
				return err
			}
			if waitErr != nil {
				return waitErr
			}
			if len(s.Staying) > 0 {
				return &waitError{notStarted: true, msg: fmt.Sprintf("machine %s is not empty: %d of its units fit nowhere else and stay (see above)", id, len(s.Staying))}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&cancel, "cancel", false, "end the drain: the machine takes units again (nothing moves back by itself)")
	cmd.Flags().BoolVar(&noBlock, "no-block", false, "return once the drain is recorded, without waiting for the units to move")
	cmd.Flags().DurationVar(&timeout, "block-timeout", 5*time.Minute, "how long to wait for the units to move off")
	cmd.Flags().IntVar(&maxParallel, "max-parallel", 1, fmt.Sprintf("how many instances of one template may be mid-move at once (1 to %d)", apiv1.MaxDrainParallel))
	lf.register(cmd, defaultMachineFields+",units,draining", fieldNames(machineFields()))
	return cmd
}

// drainSummary is what a drain that waited prints: the machine, and how
// many of its units moved, are still to move, and stay.
type drainSummary struct {
	machineRow
	Moved   int                `json:"moved"`
	Waiting int                `json:"waiting"`
	Staying []apiv1.UnitReason `json:"staying"`
}

// drainWaiting is how many units a drain of m still waits for: those on
// it that do not stay, and those mid-move off it.
func drainWaiting(m apiv1.Machine) int {
	return m.Units - len(m.Staying) + m.Moving
}

func (e *env) writeMachine(fields []field[machineRow], lf listFlags, m apiv1.Machine) error {
	rows := machineRows([]apiv1.Machine{m})
	if e.json {
		return writeJSON(e.out, rows[0])
	}
	return writeTable(e.out, fields, rows, lf.full, lf.noLegend)
}

func (e *env) writeDrainSummary(fields []field[machineRow], lf listFlags, s drainSummary) error {
	if err := writeTable(e.out, fields, []machineRow{s.machineRow}, lf.full, lf.noLegend); err != nil {
		return err
	}
	fmt.Fprintf(e.out, "Units moved: %d, waiting: %d, staying: %d\n", s.Moved, s.Waiting, len(s.Staying))
	for _, u := range s.Staying {
		fmt.Fprintf(e.out, "Unit %s stays on %s: %s\n", u.Name, s.Machine, u.Reason)
	}
	return nil
}

// machine returns machine id as the cluster lists it, and whether it does.
func (e *env) machine(ctx context.Context, id string) (apiv1.Machine, bool, error) {
	l, err := e.c.Machines(ctx)
	if err != nil {
		return apiv1.Machine{}, false, err
	}
	for _, m := range l.Machines {
		if m.ID == id {
			return m, true, nil
		}
	}
	return apiv1.Machine{ID: id}, false, nil
}

// waitDrained waits until machine id's drain waits for no unit: each has
// moved, or stays because it fits nowhere else. After timeout it returns
// the machine as it is and an error (exit status 1).
func (e *env) waitDrained(ctx context.Context, id string, timeout time.Duration) (apiv1.Machine, error) {
	deadline := time.Now().Add(timeout)
	for {
		m, found, err := e.machine(ctx, id)
		if err != nil {
			return apiv1.Machine{}, err
		}
		if !found {
			return apiv1.Machine{ID: id, Draining: true}, nil
		}
		// Right after the drain is recorded, before the leader's next pass
		// has decided, a unit that will stay is not listed as staying yet:
		// it is waited for.
		if m.Draining && drainWaiting(m) == 0 {
			return m, nil
		}
		if time.Now().After(deadline) {
			return m, &waitError{msg: fmt.Sprintf("machine %s still has %d units to move after %v: see flotilla list-unit-files --fields unit,tmachine,reason", id, drainWaiting(m), timeout)}
		}
		select {
		case <-ctx.Done():
			return m, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
