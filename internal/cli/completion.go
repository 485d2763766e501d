package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/unit"
)

// completionTimeout bounds the API request behind one completion: a shell
// waiting on Tab must not hang on an unreachable cluster.
const completionTimeout = 2 * time.Second

// addCompletions makes cobra's completion command (bash, zsh, fish,
// powershell) complete, besides verbs and flags: unit names from the
// cluster for the verbs taking units, machine IDs for set-metadata,
// --fields of the list commands and --output.
func (g *Globals) addCompletions(root *cobra.Command) {
	fixed := func(values ...string) cobra.CompletionFunc {
		return cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp)
	}
	root.RegisterFlagCompletionFunc("output", fixed(outputTable+"\ttable with a legend", outputJSON+"\tJSON as the API returns it"))
	fields := map[string][]string{
		"list-units":      strings.Split(fieldNames(unitFields()), ","),
		"list-unit-files": strings.Split(fieldNames(unitFileFields()), ","),
		"list-machines":   strings.Split(fieldNames(machineFields()), ","),
		"set-metadata":    strings.Split(fieldNames(machineFields()), ","),
	}
	for _, cmd := range root.Commands() {
		if names, ok := fields[cmd.Name()]; ok {
			cmd.RegisterFlagCompletionFunc("fields", completeList(names))
		}
		switch cmd.Name() {
		case "load", "start":
			// These also take unit files: a word with a '/' completes
			// files. They refuse a template (start an instance of it).
			cmd.ValidArgsFunction = g.completeUnits(unitCompletion{files: true, noTemplates: true})
		case "stop", "restart":
			cmd.ValidArgsFunction = g.completeUnits(unitCompletion{noTemplates: true})
		case "unload", "destroy", "status":
			cmd.ValidArgsFunction = g.completeUnits(unitCompletion{})
		case "journal", "cat":
			cmd.ValidArgsFunction = g.completeUnits(unitCompletion{one: true})
		case "submit":
			cmd.ValidArgsFunction = func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
				return nil, cobra.ShellCompDirectiveDefault // unit files
			}
		case "set-metadata", "drain":
			cmd.ValidArgsFunction = g.completeMachines
		}
	}
}

// completeList completes the last item of a comma-separated list of names,
// leaving out those already given, and adds no space so that another ","
// may follow.
func completeList(names []string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		i := strings.LastIndexByte(toComplete, ',')
		head, given := toComplete[:i+1], strings.Split(toComplete[:i+1], ",")
		var out []cobra.Completion
		for _, n := range names {
			if !slices.Contains(given, n) && strings.HasPrefix(n, toComplete[i+1:]) {
				out = append(out, head+n)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	}
}

// completionClient is a client of the endpoint the command line names.
func (g *Globals) completionClient() (*client.Client, context.Context, context.CancelFunc, error) {
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	c, err := firstAnswering(ctx, g.Endpoint, []client.Option{client.WithTimeout(completionTimeout), client.WithUserAgent("flotilla-completion")})
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return c, ctx, cancel, nil
}

// unitCompletion says which unit names a command's arguments complete.
type unitCompletion struct {
	// files lets a word with a '/' (or no matching unit) complete file
	// names.
	files bool
	// one completes only the first argument.
	one bool
	// noTemplates leaves templates (web@.service) out: the command
	// refuses them.
	noTemplates bool
}

// completeUnits completes the names of the cluster's units, each described
// by its desired state, leaving out those already given and those uc
// leaves out.
func (g *Globals) completeUnits(uc unitCompletion) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		noUnits := cobra.ShellCompDirectiveNoFileComp
		if uc.files {
			noUnits = cobra.ShellCompDirectiveDefault
		}
		if (uc.one && len(args) > 0) || (uc.files && strings.ContainsRune(toComplete, '/')) {
			return nil, noUnits
		}
		c, ctx, cancel, err := g.completionClient()
		if err != nil {
			cobra.CompErrorln(err.Error())
			return nil, noUnits
		}
		defer cancel()
		l, err := c.Units(ctx)
		if err != nil {
			cobra.CompErrorln(err.Error())
			return nil, noUnits
		}
		var out []cobra.Completion
		for _, u := range l.Units {
			if strings.HasPrefix(u.Name, toComplete) && !slices.Contains(args, u.Name) && !(uc.noTemplates && unit.IsTemplate(u.Name)) {
				out = append(out, cobra.CompletionWithDesc(u.Name, u.DesiredState))
			}
		}
		if len(out) == 0 {
			return nil, noUnits
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeMachines completes the MACHINE of set-metadata and drain with the IDs of the
// cluster's machines, described by their IP.
func (g *Globals) completeMachines(_ *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp // KEY=VALUE
	}
	c, ctx, cancel, err := g.completionClient()
	if err != nil {
		cobra.CompErrorln(err.Error())
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer cancel()
	l, err := c.Machines(ctx)
	if err != nil {
		cobra.CompErrorln(err.Error())
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, m := range l.Machines {
		if strings.HasPrefix(m.ID, toComplete) {
			out = append(out, cobra.CompletionWithDesc(m.ID, fmt.Sprintf("%s, %d units", dash(m.IP), m.Units)))
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
