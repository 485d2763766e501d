package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/unit"
)

func newHistoryCommand(g *Globals) *cobra.Command {
	var (
		diff, full, noLegend bool
		keep                 int
	)
	cmd := &cobra.Command{
		Use:   "history UNIT [--diff A B]",
		Short: "List the versions of a unit's file, or diff two of them",
		Long: `List the versions of a unit's file, oldest first: every change of the file
of a template or of a unit of its own makes one (an instance shows its
template's, with * on the version its file was made from). The cluster keeps
the last 10 of each unit (flotilla history --keep N changes it), and every
tagged version besides.

With --diff A B, print the unified diff of the file of version A against
version B instead.`,
		Example: `  flotilla history web@.service
  flotilla history web@.service --diff 3 4
  flotilla history --keep 20`,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("keep") {
				return cobra.NoArgs(cmd, args)
			}
			if diff {
				return cobra.ExactArgs(3)(cmd, args)
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		SilenceUsage: true,
		RunE: g.runE(func(ctx context.Context, e *env, args []string) error {
			if keep >= 0 {
				c, err := e.c.SetVersionsConfig(ctx, apiv1.VersionsConfig{Keep: keep})
				if err != nil {
					return err
				}
				fmt.Fprintf(e.out, "The cluster keeps %d versions of each unit\n", c.Keep)
				return nil
			}
			if diff {
				return e.diffVersions(ctx, args[0], args[1], args[2])
			}
			return e.history(ctx, args[0], full, noLegend)
		}),
	}
	cmd.Flags().BoolVar(&diff, "diff", false, "print the unified diff of version A's file against version B's")
	cmd.Flags().BoolVar(&full, "full", false, "print full hashes")
	cmd.Flags().BoolVar(&noLegend, "no-legend", false, "do not print a legend (column headers)")
	cmd.Flags().IntVar(&keep, "keep", -1, "set how many versions of each unit the cluster keeps (1 to 100; 0: the default, 10)")
	return cmd
}

var versionFields = []field[apiv1.Version]{
	{"version", func(v apiv1.Version, _ bool) string {
		if v.Current {
			return strconv.Itoa(v.Version) + "*"
		}
		return strconv.Itoa(v.Version)
	}},
	{"hash", func(v apiv1.Version, full bool) string { return shortHash(v.Hash, full) }},
	{"when", func(v apiv1.Version, _ bool) string {
		if v.Time.IsZero() {
			return "-"
		}
		return v.Time.Local().Format(time.DateTime)
	}},
	{"by", func(v apiv1.Version, _ bool) string { return dash(v.By) }},
	{"tag", func(v apiv1.Version, _ bool) string { return dash(v.Tag) }},
	{"change", func(v apiv1.Version, _ bool) string { return v.Change }},
}

func (e *env) history(ctx context.Context, name string, full, noLegend bool) error {
	l, err := e.c.Versions(ctx, name, false)
	if err != nil {
		return err
	}
	if e.json {
		return writeJSON(e.out, l)
	}
	if l.Log != l.Unit {
		fmt.Fprintf(e.out, "%s follows the versions of its template %s:\n", l.Unit, l.Log)
	}
	return writeTable(e.out, versionFields, l.Versions, full, noLegend)
}

func (e *env) diffVersions(ctx context.Context, name, a, b string) error {
	var files [2]*apiv1.Version
	for i, s := range []string{a, b} {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return fmt.Errorf("version %q: want a version number (as history lists them)", s)
		}
		if files[i], err = e.c.Version(ctx, name, n); err != nil {
			return err
		}
	}
	label := func(v *apiv1.Version) string { return fmt.Sprintf("%s version %d", name, v.Version) }
	fmt.Fprint(e.out, unit.Diff(label(files[0]), label(files[1]), files[0].File, files[1].File))
	return nil
}

func newRevertCommand(g *Globals) *cobra.Command {
	var (
		checkIndex int64
		blk        block
		update     map[string]string
	)
	cmd := &cobra.Command{
		Use:   "revert UNIT [VERSION]",
		Short: "Give a unit the file of one of its earlier versions",
		Long: `Give a unit (a template, or a unit of its own) the file of one of its
versions, as history lists them: by default the newest earlier version with
another file. The file is replaced in place, as submit --replace does (the
unit keeps its desired state and its machine, which restarts it with the
file), and the revert is a new version. A template's instances that
followed its file are then replaced by a deployment, which the command
follows, as submit --replace does. Refused if the unit's versions changed while it was
asked for, or with --check-index if they changed since that index.`,
		Example: `  flotilla revert web@.service
  flotilla revert db.service 3`,
		Args:         cobra.RangeArgs(1, 2),
		SilenceUsage: true,
		RunE: g.runE(func(ctx context.Context, e *env, args []string) error {
			n := 0
			if len(args) == 2 {
				var err error
				if n, err = strconv.Atoi(args[1]); err != nil || n <= 0 {
					return fmt.Errorf("version %q: want a version number (as history lists them)", args[1])
				}
			}
			e.update = update
			return e.revert(ctx, args[0], n, indexFlag(checkIndex), blk)
		}),
	}
	addCheckIndex(cmd, &checkIndex)
	addUpdate(cmd, &update)
	blk.register(cmd.Flags(), "give up following the deployment after this long; it goes on (0 means no limit)")
	return cmd
}

// revert reverts unit name to version n and, for a template, follows the
// deployment that replaces its instances.
func (e *env) revert(ctx context.Context, name string, n int, checkIndex *int64, blk block) error {
	l, err := e.c.Revert(ctx, name, n, checkIndex, e.update)
	if err != nil {
		return err
	}
	cur := l.Versions[len(l.Versions)-1]
	fmt.Fprintf(e.out, "Unit %s %s: now version %d\n", name, cur.Change, cur.Version)
	if !unit.IsTemplate(name) {
		return nil
	}
	return e.followDeployments(ctx, []string{name}, false, blk)
}

func newTagCommand(g *Globals) *cobra.Command {
	var del bool
	cmd := &cobra.Command{
		Use:   "tag UNIT VERSION [NAME]",
		Short: "Name a version of a unit's file, keeping it",
		Long: `Name a version of a unit's file, as history lists them: a tagged version is
kept however many versions follow. --delete removes the version's tag.`,
		Example: `  flotilla tag web@.service 4 known-good
  flotilla tag --delete web@.service 4`,
		Args: func(cmd *cobra.Command, args []string) error {
			if del {
				return cobra.ExactArgs(2)(cmd, args)
			}
			return cobra.ExactArgs(3)(cmd, args)
		},
		SilenceUsage: true,
		RunE: g.runE(func(ctx context.Context, e *env, args []string) error {
			n, err := strconv.Atoi(args[1])
			if err != nil || n <= 0 {
				return fmt.Errorf("version %q: want a version number (as history lists them)", args[1])
			}
			tag := ""
			if !del {
				tag = args[2]
			}
			if _, err := e.c.Tag(ctx, args[0], n, tag); err != nil {
				return err
			}
			if del {
				fmt.Fprintf(e.out, "Version %d of %s untagged\n", n, args[0])
			} else {
				fmt.Fprintf(e.out, "Version %d of %s tagged %s\n", n, args[0], tag)
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&del, "delete", false, "remove the version's tag")
	return cmd
}

// addCheckIndex registers --check-index, read by indexFlag.
func addCheckIndex(cmd *cobra.Command, v *int64) {
	cmd.Flags().Int64Var(v, "check-index", -1, "refuse the change (nothing is changed) if any of its units changed since a plan gave this index (flotilla plan)")
}

// addUpdate registers --update, the [X-Update] options that override the
// templates' own for the deployments a command starts.
func addUpdate(cmd *cobra.Command, v *map[string]string) {
	cmd.Flags().StringToStringVar(v, "update", nil, "[X-Update] options for the deployments of templates this replaces, over their files' own: MaxParallel=2,Canary=1,AutoRevert=true,...")
}

func indexFlag(v int64) *int64 {
	if v < 0 {
		return nil
	}
	return &v
}

func newPlanCommand(g *Globals) *cobra.Command {
	var (
		replace bool
		update  map[string]string
	)
	cmd := &cobra.Command{
		Use:   "plan UNIT...",
		Short: "Show what starting units would do, changing nothing",
		Long: `Show what 'flotilla start --replace UNIT...' would do, changing nothing: for
each unit, whether it is new, changed (with the diff of its file against the
cluster's) or unchanged, and where it would run, whether it would be
restarted, or why no machine can take it. Ends with the check index: 'start
--check-index N' is refused if anything planned changed since.

Exit codes: 0 no changes, 5 changes, 2 some units could not be placed.`,
		Example: `  flotilla plan web@.service 'web@{1..3}.service'
  flotilla start --replace --check-index 42 web@.service 'web@{1..3}.service'`,
		Args:         unitArgs,
		SilenceUsage: true,
		RunE: g.runE(func(ctx context.Context, e *env, args []string) error {
			e.update = update
			return e.plan(ctx, args, replace)
		}),
	}
	addUpdate(cmd, &update)
	cmd.Flags().BoolVar(&replace, "replace", true, "plan as start --replace: files that differ replace the cluster's (false: as start, which refuses them)")
	return cmd
}

// planBatch is the batch start would send for args.
func (e *env) planBatch(ctx context.Context, args []string) (apiv1.Batch, error) {
	ranges, args, err := rangeArgs(args)
	if err != nil {
		return apiv1.Batch{}, err
	}
	var b apiv1.Batch
	if len(args) > 0 {
		refs, _, err := e.resolveUnitFiles(ctx, args)
		if err != nil {
			return b, err
		}
		for _, r := range refs {
			ch := apiv1.UnitChange{Name: r.Name, File: r.File, DesiredState: stateLaunched}
			if unit.IsTemplate(r.Name) {
				ch.DesiredState = "" // stored: its instances run
			}
			b.Units = append(b.Units, ch)
		}
	}
	tmpls, err := e.rangeTemplates(ctx, ranges)
	if err != nil {
		return b, err
	}
	b.Units = append(b.Units, tmpls...)
	for _, r := range ranges {
		b.Units = append(b.Units, apiv1.UnitChange{Name: r.name, DesiredState: stateLaunched})
	}
	return b, nil
}

func (e *env) plan(ctx context.Context, args []string, replace bool) error {
	b, err := e.planBatch(ctx, args)
	if err != nil {
		return err
	}
	b.Update = e.update
	p, err := e.c.Plan(ctx, b, replace)
	if err != nil {
		return err
	}
	if e.json {
		if err := writeJSON(e.out, p); err != nil {
			return err
		}
	} else {
		writePlan(e.out, p)
	}
	switch {
	case p.Counts["not-placed"] > 0:
		return &exitStatus{code: ExitNotStarted}
	case p.Counts["new"]+p.Counts["changed"]+p.Counts["destroyed"] > 0 || p.Counts["start"]+p.Counts["stop"]+p.Counts["move"] > 0:
		return &exitStatus{code: ExitPlanChanges}
	}
	return nil
}

// writePlan prints a plan for people: a line per unit, each changed file's
// diff, and the check index.
func writePlan(w io.Writer, p *apiv1.Plan) {
	for _, u := range p.Units {
		var what string
		switch u.Action {
		case "none":
			what = "no change"
			if u.Target != "" {
				what = "keeps running on " + u.Target
			}
		case "submit":
			what = "stored"
		case "update":
			what = "file updated (not running)"
		case "start":
			what = "starts on " + u.Target
		case "restart":
			what = "restarts on " + u.Target + " with the new file"
		case "move":
			what = "moves from " + u.Machine + " to " + u.Target
		case "stop":
			what = "stops on " + dash(u.Machine)
		case "destroy":
			what = "destroyed"
		case "not-placed":
			what = "cannot be placed: " + u.Reason
		default:
			what = u.Action
		}
		version := ""
		if u.Version > 0 {
			version = fmt.Sprintf(" (version %d)", u.Version)
		}
		if u.Deployment != "" {
			what += " (" + u.Deployment + ")"
		}
		fmt.Fprintf(w, "%s %s%s: %s\n", planMark(u.Change), u.Name, version, what)
		if u.Diff != "" {
			for _, line := range strings.SplitAfter(strings.TrimSuffix(u.Diff, "\n"), "\n") {
				fmt.Fprintf(w, "    %s", line)
			}
			fmt.Fprintln(w)
		}
	}
	if p.More > 0 {
		fmt.Fprintf(w, "... and %d more units\n", p.More)
	}
	fmt.Fprintf(w, "\n%d new, %d changed, %d unchanged; %d would start, %d restart, %d move, %d cannot be placed\n",
		p.Counts["new"], p.Counts["changed"], p.Counts["unchanged"], p.Counts["start"], p.Counts["restart"], p.Counts["move"], p.Counts["not-placed"])
	fmt.Fprintf(w, "Check index: %d (flotilla start --check-index %d ... refuses the change if any of these units changed since)\n", p.Index, p.Index)
}

func planMark(change string) string {
	switch change {
	case "new":
		return "+"
	case "changed":
		return "~"
	case "destroyed":
		return "-"
	}
	return "="
}

// exitStatus ends a command with an exit code and nothing to say: the
// command printed its outcome (plan's "changes").
type exitStatus struct{ code int }

func (e *exitStatus) Error() string { return "" }

// batch sends b (with ?replace=true when replace) as the command's first
// write, with its --check-index if it has one; later writes are not
// checked (the first changed the index).
func (e *env) batch(ctx context.Context, b apiv1.Batch, replace bool) (*apiv1.BatchResult, error) {
	opts := client.BatchOptions{Replace: replace, CheckIndex: e.checkIndex}
	e.checkIndex = nil
	if replace {
		b.Update = e.update
	}
	return e.c.BatchWith(ctx, b, opts)
}
