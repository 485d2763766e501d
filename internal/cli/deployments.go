package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/unit"
)

func newDeploymentCommand(g *Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "deployment",
		Short: "List, follow and steer the deployments of templates' new files",
		Long: `A template given a new file (submit, load or start with --replace, revert)
has its instances replaced by the leader, a few at a time, as the file's
[X-Update] section says: a deployment (docs/deployments.md). These commands
show and steer them.`,
	}
	var full, noLegend bool
	list := &cobra.Command{
		Use:          "list",
		Short:        "List the latest deployment of each template",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: g.runE(func(ctx context.Context, e *env, _ []string) error {
			l, err := e.c.Deployments(ctx)
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.out, l)
			}
			return writeTable(e.out, deploymentFields, l.Deployments, full, noLegend)
		}),
	}
	list.Flags().BoolVar(&full, "full", false, "do not shorten messages")
	list.Flags().BoolVar(&noLegend, "no-legend", false, "do not print a legend (column headers)")
	status := &cobra.Command{
		Use:          "status TEMPLATE",
		Short:        "Show a template's latest deployment",
		Args:         cobra.ExactArgs(1),
		SilenceUsage: true,
		RunE: g.runE(func(ctx context.Context, e *env, args []string) error {
			d, err := e.c.Deployment(ctx, unitName(args[0]))
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.out, d)
			}
			writeDeployment(e, d)
			return nil
		}),
	}
	cmd.AddCommand(list, status)
	for _, a := range []struct{ action, short string }{
		{"promote", "Let a deployment waiting on its canaries go on"},
		{"pause", "Pause a deployment: no more instances are replaced until resume"},
		{"resume", "Resume a paused deployment"},
		{"abort", "End a deployment where it is: its instances keep the file they have"},
	} {
		cmd.AddCommand(&cobra.Command{
			Use:          a.action + " TEMPLATE",
			Short:        a.short,
			Args:         cobra.ExactArgs(1),
			SilenceUsage: true,
			RunE: g.runE(func(ctx context.Context, e *env, args []string) error {
				d, err := e.c.ControlDeployment(ctx, unitName(args[0]), a.action)
				if err != nil {
					return err
				}
				fmt.Fprintf(e.out, "Deployment of %s version %d: %s\n", d.Unit, d.ToVersion, d.Status)
				return nil
			}),
		})
	}
	return cmd
}

var deploymentFields = []field[apiv1.Deployment]{
	{"template", func(d apiv1.Deployment, _ bool) string { return d.Unit }},
	{"version", func(d apiv1.Deployment, _ bool) string { return fmt.Sprintf("%d→%d", d.FromVersion, d.ToVersion) }},
	{"status", func(d apiv1.Deployment, _ bool) string { return d.Status }},
	{"done", func(d apiv1.Deployment, _ bool) string { return fmt.Sprintf("%d/%d", d.Done, len(d.Instances)) }},
	{"healthy", func(d apiv1.Deployment, _ bool) string { return fmt.Sprint(d.Healthy) }},
	{"updated", func(d apiv1.Deployment, _ bool) string { return d.Updated.Local().Format(time.DateTime) }},
	{"message", func(d apiv1.Deployment, full bool) string {
		if !full && len(d.Message) > 60 {
			return d.Message[:57] + "..."
		}
		return dash(d.Message)
	}},
}

func writeDeployment(e *env, d *apiv1.Deployment) {
	s := d.Strategy
	fmt.Fprintf(e.out, "Deployment of %s, version %d to %d: %s\n", d.Unit, d.FromVersion, d.ToVersion, d.Status)
	if d.Message != "" {
		fmt.Fprintf(e.out, "  %s\n", d.Message)
	}
	fmt.Fprintf(e.out, "  Instances: %d, done %d, with the new file %d, healthy now %d\n", len(d.Instances), d.Done, len(d.NewInstances), d.Healthy)
	if len(d.Canaries) > 0 {
		fmt.Fprintf(e.out, "  Canaries: %s (promoted: %v)\n", strings.Join(d.Canaries, ", "), d.Promoted)
	}
	fmt.Fprintf(e.out, "  Strategy: MaxParallel=%d MinHealthyTime=%s HealthyDeadline=%s ProgressDeadline=%s Canary=%d AutoPromote=%v AutoRevert=%v\n",
		s.MaxParallel, s.MinHealthyTime, s.HealthyDeadline, s.ProgressDeadline, s.Canary, s.AutoPromote, s.AutoRevert)
	fmt.Fprintf(e.out, "  Created %s, updated %s\n", d.Created.Local().Format(time.DateTime), d.Updated.Local().Format(time.DateTime))
}

// deploymentError ends a command whose deployment did not succeed; revert
// is the deployment that rolled it back, if one did.
type deploymentError struct {
	d, revert *apiv1.Deployment
}

func (e *deploymentError) Error() string {
	msg := fmt.Sprintf("the deployment of %s version %d %s: %s", e.d.Unit, e.d.ToVersion, e.d.Status, e.d.Message)
	if r := e.revert; r != nil {
		msg = fmt.Sprintf("the deployment of %s failed and was rolled back to its former file (version %d): %s", e.d.Unit, r.ToVersion, r.Status)
	}
	return msg
}

// changedTemplates are the units among refs whose change makes a
// deployment: templates whose file changes, and running units of their own
// (not instances, not Global=) whose file changes.
func changedTemplates(refs []unitRef, known map[string]apiv1.Unit) []string {
	var out []string
	for _, r := range refs {
		cur, ok := known[r.Name]
		if !ok || r.Path == "" || unit.IsInstance(r.Name) || !fileChanged(r, cur) {
			continue
		}
		if unit.IsTemplate(r.Name) || cur.DesiredState == stateLaunched && !cur.Global {
			out = append(out, r.Name)
		}
	}
	return out
}

// followDeployments follows the deployments the command's write started
// for templates (those whose current version's deployment is theirs),
// printing a line as each progresses, until each ends; with noBlock it
// only says they started. Interrupted, it leaves them running.
func (e *env) followDeployments(ctx context.Context, templates []string, noBlock bool, blk block) error {
	var mine []*apiv1.Deployment
	for _, tmpl := range templates {
		l, err := e.c.Versions(ctx, tmpl, false)
		if err != nil {
			return err
		}
		d, err := e.c.Deployment(ctx, tmpl)
		if client.IsNotFound(err) {
			continue // no instance to replace
		}
		if err != nil {
			return err
		}
		if cur := l.Versions[len(l.Versions)-1]; d.ToVersion == cur.Version {
			mine = append(mine, d)
		}
	}
	for _, d := range mine {
		if noBlock {
			fmt.Fprintf(e.out, "Deployment of %s version %d started (%d instances): flotilla deployment status %s\n", d.Unit, d.ToVersion, len(d.Instances), d.Unit)
			continue
		}
		if err := e.followDeployment(ctx, d, blk); err != nil {
			return err
		}
	}
	return nil
}

func (e *env) followDeployment(ctx context.Context, d *apiv1.Deployment, blk block) error {
	if blk.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, blk.timeout)
		defer cancel()
	}
	interval := e.g.pollMax
	if interval <= 0 {
		interval = defaultPollMax
	}
	last := ""
	ours := d
	var revert *apiv1.Deployment
	for polls := 1; ; polls++ {
		line := fmt.Sprintf("Deployment of %s version %d: %s, %d of %d done", d.Unit, d.ToVersion, d.Status, d.Done, len(d.Instances))
		if d.Status == "waiting-for-promotion" {
			line += " (flotilla deployment promote " + d.Unit + ")"
		}
		if line != last {
			fmt.Fprintln(e.out, line)
			last = line
		}
		switch {
		case revert != nil && !d.Active():
			return &deploymentError{d: ours, revert: d}
		case d.Status == "succeeded":
			return nil
		case !d.Active():
			return &deploymentError{d: d}
		case blk.attempts > 0 && polls >= blk.attempts:
			return fmt.Errorf("gave up after %d polls; the deployment of %s goes on (flotilla deployment status %s)", polls, d.Unit, d.Unit)
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("gave up after %v; the deployment of %s goes on (flotilla deployment status %s)", blk.timeout, d.Unit, d.Unit)
			}
			return fmt.Errorf("interrupted; the deployment of %s goes on (flotilla deployment status %s)", d.Unit, d.Unit)
		case <-time.After(interval):
		}
		next, err := e.c.Deployment(ctx, d.Unit)
		switch {
		case err != nil && ctx.Err() == nil && client.IsUnavailable(err):
			continue // a leader election: poll again
		case err != nil && ctx.Err() == nil:
			return err
		case err == nil:
			if next.ToVersion != d.ToVersion && !next.Revert {
				return fmt.Errorf("the deployment of %s version %d was superseded by version %d's", d.Unit, d.ToVersion, next.ToVersion)
			}
			if next.Revert && next.ToVersion != d.ToVersion { // ours failed and is being rolled back
				fmt.Fprintf(e.out, "Deployment of %s version %d failed: %s\n", d.Unit, d.ToVersion, next.Message)
				revert = next
			}
			d = next
		}
	}
}
