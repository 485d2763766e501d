package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/unit"
)

const replaceHelp = "replace units whose file differs from the cluster's in place (fleetctl's --replace): where such units run, " +
	"they are restarted with the new file one machine at a time, the next machine once they run again (with --no-block, all at once); " +
	"a template's instances made from its file are replaced with it (flotilla plan shows which)"

// replaceGroup is the changed units of one machine, replaced together.
type replaceGroup struct {
	machine string
	refs    []unitRef
}

// rollingPlan splits refs into those sent in one batch (new, unchanged,
// or not scheduled to a machine) and the changed units scheduled to a
// machine, grouped by machine in the order of the machines' IDs, to be
// replaced one machine at a time. Global units are replaced at once: their
// file is one for all their machines.
func rollingPlan(refs []unitRef, known map[string]apiv1.Unit) (rest []unitRef, groups []replaceGroup) {
	byMachine := map[string][]unitRef{}
	for _, r := range refs {
		u, ok := known[r.Name]
		if !ok || r.Path == "" || u.Machine == "" || u.Global || u.DesiredState == stateInactive || !fileChanged(r, u) {
			rest = append(rest, r)
			continue
		}
		byMachine[u.Machine] = append(byMachine[u.Machine], r)
	}
	for _, id := range slices.Sorted(maps.Keys(byMachine)) {
		groups = append(groups, replaceGroup{machine: id, refs: byMachine[id]})
	}
	return rest, groups
}

// fileChanged reports whether r's file differs in meaning from unit u's
// (their hashes differ). A file that does not parse counts as changed: the
// cluster then names what is wrong with it.
func fileChanged(r unitRef, u apiv1.Unit) bool {
	f, err := unit.Parse(r.Name, []byte(r.File))
	return err != nil || f.Hash != u.Hash
}

// roll replaces the units of groups machine by machine: each machine's
// units in one batch (with ?replace=true, desired state target, or theirs
// when target is ""), then waits until their machine runs the new file in
// the desired state before going on. A unit that fails, cannot be placed
// or is not replaced within the block limits halts the roll there.
func (e *env) roll(ctx context.Context, groups []replaceGroup, target string, blk block) error {
	machines := newMachineCache(e.c)
	for i, grp := range groups {
		if err := e.replaceOn(ctx, grp, target, machines, blk); err != nil {
			var rest []string
			for _, later := range groups[i+1:] {
				rest = append(rest, machines.legend(ctx, later.machine, false))
			}
			if len(rest) > 0 {
				return fmt.Errorf("%w; not replaced yet on %s: run the command again to go on", err, strings.Join(rest, ", "))
			}
			return err
		}
	}
	return nil
}

func (e *env) replaceOn(ctx context.Context, grp replaceGroup, target string, machines *machineCache, blk block) error {
	b := apiv1.Batch{Units: make([]apiv1.UnitChange, 0, len(grp.refs))}
	for _, r := range grp.refs {
		b.Units = append(b.Units, apiv1.UnitChange{Name: r.Name, File: r.File, DesiredState: target})
	}
	res, err := e.c.ReplaceBatch(ctx, b)
	if err != nil {
		return fmt.Errorf("replace on machine %s: %w", machines.legend(ctx, grp.machine, false), err)
	}
	e.warn(res.Warnings)
	// One wait per desired state (submit keeps each unit's own).
	byState := map[string][]waitTarget{}
	for _, u := range res.Units {
		if u.DesiredState == stateInactive {
			continue
		}
		byState[u.DesiredState] = append(byState[u.DesiredState],
			waitTarget{name: u.Name, changed: true, snapshot: u.State, hash: u.Hash, running: true})
	}
	var errs []error
	for _, want := range slices.Sorted(maps.Keys(byState)) {
		err := e.wait(ctx, waitSpec{
			targets: byState[want], want: want, timeout: blk.timeout, attempts: blk.attempts, machines: machines,
			line: func(u *apiv1.Unit, machine string) string {
				return fmt.Sprintf("Unit %s replaced, %s on %s", u.Name, u.CurrentState, machine)
			},
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("rolling replace halted on machine %s: %w", machines.legend(ctx, grp.machine, false), err)
	}
	return nil
}
