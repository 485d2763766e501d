package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	apiv1 "github.com/flotilla/flotilla/api"
)

func newSubmitCommand(g *Globals) *cobra.Command {
	var (
		replace    bool
		blk        block
		checkIndex int64
		update     map[string]string
	)
	cmd := &cobra.Command{
		Use:   "submit UNIT...",
		Short: "Upload one or more units to the cluster without starting them",
		Long: `Upload one or more units to the cluster without scheduling or starting them.

A UNIT is the path of a unit file (the unit is named after the file's base
name) or, for an instance such as web@1.service, of its template
web@.service. Submitting a unit the cluster already has with the same file
changes nothing; with a different file the cluster refuses (destroy the unit
first), unless --replace: then the unit is replaced in place, keeping its
desired state, and where it runs it is restarted with the new file, one
machine at a time (see start). All units are submitted at once: if one is
refused, none is.`,
		Example: `  flotilla submit hello.service
  flotilla submit units/*.service
  flotilla submit --replace units/web@.service units/web@{1..3}.service`,
		Args:         unitArgs,
		SilenceUsage: true,
		RunE: g.runE(func(ctx context.Context, e *env, args []string) error {
			if err := blk.check(); err != nil {
				return err
			}
			e.checkIndex, e.update = indexFlag(checkIndex), update
			return e.submit(ctx, args, replace, blk)
		}),
	}
	cmd.Flags().BoolVar(&replace, "replace", false, replaceHelp)
	addCheckIndex(cmd, &checkIndex)
	addUpdate(cmd, &update)
	blk.register(cmd.Flags(), "with --replace, on each machine, give up waiting for the replaced units after this long (0 means no limit)")
	return cmd
}

func (e *env) submit(ctx context.Context, args []string, replace bool, blk block) error {
	refs, known, err := e.resolveUnitFiles(ctx, args)
	if err != nil {
		return err
	}
	var roll []replaceGroup
	templates := changedTemplates(refs, known)
	if replace {
		refs, roll = rollingPlan(refs, known)
	}
	var b apiv1.Batch
	for _, r := range refs {
		if r.Path != "" {
			b.Units = append(b.Units, apiv1.UnitChange{Name: r.Name, File: r.File})
		}
	}
	if len(b.Units) > 0 {
		res, err := e.batch(ctx, b, replace)
		if err != nil {
			return err
		}
		e.warn(res.Warnings)
		for _, ch := range b.Units {
			if _, existed := known[ch.Name]; !existed {
				fmt.Fprintf(e.out, "Unit %s %s\n", ch.Name, stateInactive)
			}
		}
	}
	if err := e.roll(ctx, roll, "", blk); err != nil {
		return err
	}
	if !replace {
		return nil
	}
	return e.followDeployments(ctx, templates, false, blk)
}

// resolveUnitFiles resolves the UNIT arguments of submit, load and start,
// reading unit files, and returns the units the cluster already has.
func (e *env) resolveUnitFiles(ctx context.Context, args []string) ([]unitRef, map[string]apiv1.Unit, error) {
	refs, err := readUnitArgs(args)
	if err != nil {
		return nil, nil, err
	}
	known, err := e.fetchUnits(ctx, lookupNames(refs))
	if err != nil {
		return nil, nil, err
	}
	if err := e.completeRefs(ctx, refs, known); err != nil {
		return nil, nil, err
	}
	return refs, known, nil
}

func (e *env) warn(warnings []string) {
	for _, w := range warnings {
		fmt.Fprintf(e.errOut, "WARNING: %s\n", w)
	}
}

// stateVerb describes one of the commands that change desired states.
type stateVerb struct {
	name    string // command name, as in "Triggered unit X start"
	target  string // desired state it sets
	submits bool   // it submits unit files first
	short   string
	long    string
	example string
}

func loadVerb() stateVerb {
	return stateVerb{
		name: "load", target: stateLoaded, submits: true,
		short: "Schedule one or more units in the cluster, first submitting them if necessary",
		long: `Schedule one or more units to machines of the cluster and have them loaded
there, but not started; units given as files are submitted first. A running
unit is stopped. Waits until every unit is loaded unless --no-block. A range
of a template's instances ('web@{1..100}.service', quoted) submits its
template from the current directory (or the range's) when the cluster lacks
it.`,
		example: `  flotilla load hello.service
  flotilla load 'units/web@{1..3}.service'`,
	}
}

func startVerb() stateVerb {
	return stateVerb{
		name: "start", target: stateLaunched, submits: true,
		short: "Start one or more units in the cluster, first submitting and loading them if necessary",
		long: `Start one or more units in the cluster; units given as files are submitted
first, and units not yet scheduled are scheduled. Waits until every unit
runs unless --no-block; a unit that cannot be placed on any machine or fails
to start is reported and makes the command fail (exit code 2). A range of a
template's instances ('web@{1..100}.service', quoted) is waited for as its
instances would be; its template is submitted from the current directory
(or the range's) when the cluster lacks it.`,
		example: `  flotilla start hello.service
  flotilla start --block-timeout 2m units/*.service`,
	}
}

func stopVerb() stateVerb {
	return stateVerb{
		name: "stop", target: stateLoaded,
		short: "Stop one or more units in the cluster",
		long: `Stop one or more running units, leaving them loaded on their machines so
that they can be started again. Waits until every unit is stopped unless
--no-block.`,
		example: `  flotilla stop hello.service`,
	}
}

func unloadVerb() stateVerb {
	return stateVerb{
		name: "unload", target: stateInactive,
		short: "Unschedule one or more units in the cluster",
		long: `Stop one or more units and unload them from their machines; they stay in the
cluster, inactive, until started, loaded or destroyed. Waits until every
unit is inactive unless --no-block.`,
		example: `  flotilla unload hello.service`,
	}
}

func newStateCommand(g *Globals, v stateVerb) *cobra.Command {
	var (
		noBlock    bool
		replace    bool
		blk        block
		checkIndex int64
		update     map[string]string
	)
	cmd := &cobra.Command{
		Use:          v.name + " [flags] UNIT...",
		Short:        v.short,
		Long:         v.long,
		Example:      v.example,
		Args:         unitArgs,
		SilenceUsage: true,
		RunE: g.runE(func(ctx context.Context, e *env, args []string) error {
			if err := blk.check(); err != nil {
				return err
			}
			e.checkIndex, e.update = indexFlag(checkIndex), update
			return e.changeState(ctx, v, args, noBlock, blk, replace)
		}),
	}
	cmd.Flags().BoolVar(&noBlock, "no-block", false, "do not wait until the units are "+v.target)
	blk.register(cmd.Flags(), "give up waiting after this long (0 means no limit)")
	if v.submits {
		cmd.Flags().BoolVar(&replace, "replace", false, replaceHelp)
		addCheckIndex(cmd, &checkIndex)
		addUpdate(cmd, &update)
	} else {
		checkIndex = -1
	}
	return cmd
}

// changeState sets the desired state of the units of args to v.target in
// one batch (submitting unit files first for load and start) and waits.
func (e *env) changeState(ctx context.Context, v stateVerb, args []string, noBlock bool, blk block, replace bool) error {
	var (
		refs  []unitRef
		known map[string]apiv1.Unit
		err   error
	)
	ranges, args, err := rangeArgs(args)
	if err != nil {
		return err
	}
	switch {
	case len(args) == 0:
	case v.submits:
		refs, known, err = e.resolveUnitFiles(ctx, args)
	default:
		refs, known, err = e.resolveExisting(ctx, args)
	}
	if err != nil {
		return err
	}
	if v.name == "stop" {
		var inactive []string
		for _, r := range refs {
			if known[r.Name].DesiredState == stateInactive {
				inactive = append(inactive, r.Name)
			}
		}
		if len(inactive) > 0 {
			return fmt.Errorf("cannot stop %s: not loaded on any machine (desired state inactive)", strings.Join(inactive, ", "))
		}
	}

	var templates []string
	if replace && v.submits {
		templates = changedTemplates(refs, known)
	}
	var roll []replaceGroup
	if replace && !noBlock {
		refs, roll = rollingPlan(refs, known)
	}
	b := apiv1.Batch{Units: make([]apiv1.UnitChange, 0, len(refs)+len(ranges))}
	for _, r := range refs {
		b.Units = append(b.Units, apiv1.UnitChange{Name: r.Name, File: r.File, DesiredState: v.target})
	}
	if v.submits {
		tmpls, err := e.rangeTemplates(ctx, ranges)
		if err != nil {
			return err
		}
		b.Units = append(b.Units, tmpls...)
	}
	for _, r := range ranges {
		b.Units = append(b.Units, apiv1.UnitChange{Name: r.name, DesiredState: v.target})
	}
	var res *apiv1.BatchResult
	switch {
	case len(b.Units) == 0:
		res = &apiv1.BatchResult{}
	default:
		res, err = e.batch(ctx, b, replace)
	}
	if err != nil {
		return err
	}
	e.warn(res.Warnings)

	if noBlock {
		for _, r := range refs {
			fmt.Fprintf(e.out, "Triggered unit %s %s\n", r.Name, v.name)
		}
		for _, r := range ranges {
			fmt.Fprintf(e.out, "Triggered units %s %s (%d units)\n", r.name, v.name, r.n)
		}
		return e.followDeployments(ctx, templates, true, blk)
	}
	after := make(map[string]apiv1.Unit, len(res.Units))
	for _, u := range res.Units {
		after[u.Name] = u
	}
	targets := make([]waitTarget, 0, len(refs))
	for _, r := range refs {
		before, existed := known[r.Name]
		// running: start waits until the unit runs (or fails), stop until
		// it has stopped, as the tour says; its machine reports "launched"
		// as soon as it has begun.
		t := waitTarget{name: r.Name, changed: !existed || before.DesiredState != v.target, running: true}
		if u, ok := after[r.Name]; ok {
			t.snapshot = u.State
			if existed && u.Hash != before.Hash {
				t.changed, t.hash = true, u.Hash // replaced
			}
		} else {
			t.snapshot = before.State
		}
		targets = append(targets, t)
	}
	if err := e.waitUnits(ctx, targets, ranges, v.target, blk); err != nil {
		return err
	}
	if err := e.roll(ctx, roll, v.target, blk); err != nil {
		return err
	}
	return e.followDeployments(ctx, templates, false, blk)
}

// resolveExisting resolves UNIT arguments to names of units the cluster
// has, and fails naming those it has not.
func (e *env) resolveExisting(ctx context.Context, args []string) ([]unitRef, map[string]apiv1.Unit, error) {
	names := nameArgs(args)
	known, err := e.fetchUnits(ctx, names)
	if err != nil {
		return nil, nil, err
	}
	var missing []string
	refs := make([]unitRef, 0, len(names))
	for _, n := range names {
		if _, ok := known[n]; !ok {
			missing = append(missing, n)
		}
		refs = append(refs, unitRef{Arg: n, Name: n})
	}
	if err := notFound(missing); err != nil {
		return nil, nil, err
	}
	return refs, known, nil
}

// notFound returns the error for units that do not exist, or nil.
func notFound(names []string) error {
	switch len(names) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("unit %s does not exist", names[0])
	}
	return fmt.Errorf("units %s do not exist", strings.Join(names, ", "))
}

func newDestroyCommand(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "destroy UNIT...",
		Short: "Destroy one or more units in the cluster",
		Long: `Remove one or more units from the cluster: their machines stop and unload
them. Destroyed units cannot be started again unless submitted again. Units
that do not exist are skipped with a note, so that destroy can be repeated.`,
		Example:      `  flotilla destroy hello.service`,
		Args:         unitArgs,
		SilenceUsage: true,
		RunE: g.runE(func(ctx context.Context, e *env, args []string) error {
			return e.destroy(ctx, args)
		}),
	}
}

func (e *env) destroy(ctx context.Context, args []string) error {
	ranges, args, err := rangeArgs(args)
	if err != nil {
		return err
	}
	names := nameArgs(args)
	known := map[string]apiv1.Unit{}
	if len(names) > 0 {
		if known, err = e.fetchUnits(ctx, names); err != nil {
			return err
		}
	}
	var b apiv1.Batch
	for _, r := range ranges {
		b.Destroy = append(b.Destroy, r.name)
	}
	for _, n := range names {
		if _, ok := known[n]; ok {
			b.Destroy = append(b.Destroy, n)
		} else {
			fmt.Fprintf(e.errOut, "Unit %s does not exist, nothing to destroy\n", n)
		}
	}
	if len(b.Destroy) == 0 {
		return nil
	}
	res, err := e.c.Batch(ctx, b)
	if err != nil {
		return err
	}
	e.warn(res.Warnings)
	for _, n := range b.Destroy {
		fmt.Fprintf(e.out, "Destroyed %s\n", n)
	}
	return nil
}
