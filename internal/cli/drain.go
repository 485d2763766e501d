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
		lf      listFlags
		cancel  bool
		noBlock bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "drain [flags] MACHINE",
		Short: "Move every unit off a machine before maintenance",
		Long: `Drain a machine: it takes no more units, and each of its units moves to
another machine where it fits, stopped on this one before it is started on
the other (never both at once). Global units stop there. The drain is
durable: the machine stays drained, across daemon and leader restarts, until
drain --cancel. MACHINE is a machine ID or a prefix of one.

By default drain waits until no unit is scheduled on the machine (units that
fit nowhere else stay, with their reason, and drain stops waiting after
--block-timeout); --no-block returns once the drain is recorded.`,
		Example: `  flotilla drain 113f16a7
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
			drain := !cancel
			m, err := e.setMetadata(ctx, args[0], apiv1.MachinePatch{Drain: &drain})
			if err != nil {
				return err
			}
			if drain && !noBlock {
				if m, err = e.waitDrained(ctx, m.ID, timeout); err != nil {
					return err
				}
			}
			rows := machineRows([]apiv1.Machine{m})
			if e.json {
				return writeJSON(e.out, rows[0])
			}
			return writeTable(e.out, fields, rows, lf.full, lf.noLegend)
		}),
	}
	cmd.Flags().BoolVar(&cancel, "cancel", false, "end the drain: the machine takes units again (nothing moves back by itself)")
	cmd.Flags().BoolVar(&noBlock, "no-block", false, "return once the drain is recorded, without waiting for the units to move")
	cmd.Flags().DurationVar(&timeout, "block-timeout", 5*time.Minute, "how long to wait for the units to move off")
	lf.register(cmd, defaultMachineFields+",units,draining", fieldNames(machineFields()))
	return cmd
}

// waitDrained waits until machine id has no unit scheduled, or timeout.
func (e *env) waitDrained(ctx context.Context, id string, timeout time.Duration) (apiv1.Machine, error) {
	deadline := time.Now().Add(timeout)
	for {
		l, err := e.c.Machines(ctx)
		if err != nil {
			return apiv1.Machine{}, err
		}
		var m apiv1.Machine
		found := false
		for _, x := range l.Machines {
			if x.ID == id {
				m, found = x, true
			}
		}
		if !found || m.Units == 0 {
			if !found {
				m = apiv1.Machine{ID: id, Draining: true}
			}
			return m, nil
		}
		if time.Now().After(deadline) {
			return m, fmt.Errorf("machine %s still has %d units after %v: see flotilla list-unit-files --fields unit,tmachine,reason", id, m.Units, timeout)
		}
		select {
		case <-ctx.Done():
			return m, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
