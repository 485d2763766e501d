package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
)

func newSetMetadataCommand(g *Globals) *cobra.Command {
	var (
		lf      listFlags
		removes []string
	)
	cmd := &cobra.Command{
		Use:   "set-metadata [flags] MACHINE [KEY=VALUE...]",
		Short: "Set or remove metadata of a machine",
		Long: `Set metadata keys of a machine to values, or remove them with --remove; other
keys are kept. MACHINE is a machine ID or a prefix of one that names a
single machine, as list-machines shows it ("113f16a7..." will do).

The change is durable and overrides what the machine's daemon was started
with (--metadata). Units whose MachineMetadata= no longer holds on the
machine move to another machine; units that could not be placed may now be.

Prints the machine with its resulting metadata as list-machines does; with
--output json, as an object.`,
		Example: `  flotilla set-metadata 113f16a7 role=web az=eu-1
  flotilla set-metadata 113f16a7 --remove maintenance
  flotilla set-metadata 113f16a7 disk=ssd --remove role,az`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("no machine given (usage: %s)", cmd.UseLine())
			}
			return nil
		},
		SilenceUsage: true,
		RunE: g.runE(func(ctx context.Context, e *env, args []string) error {
			fields, err := parseFields(lf.fields, machineFields())
			if err != nil {
				return err
			}
			patch, err := metadataPatch(args[1:], removes)
			if err != nil {
				return err
			}
			m, err := e.setMetadata(ctx, args[0], patch)
			if err != nil {
				return err
			}
			rows := machineRows([]apiv1.Machine{m})
			if e.json {
				return writeJSON(e.out, rows[0])
			}
			return writeTable(e.out, fields, rows, lf.full, lf.noLegend)
		}),
	}
	cmd.Flags().StringSliceVar(&removes, "remove", nil, "remove metadata key KEY (repeatable, or comma-separated)")
	lf.register(cmd, defaultMachineFields, fieldNames(machineFields()))
	return cmd
}

// metadataPatch turns KEY=VALUE arguments and --remove keys into the body
// of PATCH /v1/machines/{id}.
func metadataPatch(sets, removes []string) (apiv1.MachinePatch, error) {
	if len(sets) == 0 && len(removes) == 0 {
		return apiv1.MachinePatch{}, fmt.Errorf("nothing to change: give KEY=VALUE arguments or --remove KEY")
	}
	md := make(map[string]*string, len(sets)+len(removes))
	for _, arg := range sets {
		k, v, ok := strings.Cut(arg, "=")
		switch {
		case !ok:
			return apiv1.MachinePatch{}, fmt.Errorf("invalid metadata %q: want KEY=VALUE (to remove a key, use --remove KEY)", arg)
		case k == "":
			return apiv1.MachinePatch{}, fmt.Errorf("invalid metadata %q: empty key", arg)
		case v == "":
			return apiv1.MachinePatch{}, fmt.Errorf("invalid metadata %q: empty value (to remove key %s, use --remove %s)", arg, k, k)
		}
		if err := checkMetadataKey(k); err != nil {
			return apiv1.MachinePatch{}, err
		}
		if old, dup := md[k]; dup && *old != v {
			return apiv1.MachinePatch{}, fmt.Errorf("metadata key %s is given twice: %s=%s and %s=%s", k, k, *old, k, v)
		}
		md[k] = &v
	}
	for _, k := range removes {
		switch {
		case k == "":
			return apiv1.MachinePatch{}, fmt.Errorf("invalid --remove: empty key")
		case strings.Contains(k, "="):
			return apiv1.MachinePatch{}, fmt.Errorf("invalid --remove %q: want a key, not KEY=VALUE", k)
		}
		if err := checkMetadataKey(k); err != nil {
			return apiv1.MachinePatch{}, err
		}
		if v, set := md[k]; set && v != nil {
			return apiv1.MachinePatch{}, fmt.Errorf("metadata key %s is both set (%s=%s) and removed (--remove %s)", k, k, *v, k)
		}
		md[k] = nil
	}
	return apiv1.MachinePatch{Metadata: md}, nil
}

// checkMetadataKey refuses what can never be a metadata key; the server
// checks the rest.
func checkMetadataKey(k string) error {
	if strings.ContainsAny(k, " \t\n,") {
		return fmt.Errorf("invalid metadata key %q: it may not contain spaces or commas", k)
	}
	return nil
}

// setMetadata applies patch to the machine arg names.
func (e *env) setMetadata(ctx context.Context, arg string, patch apiv1.MachinePatch) (apiv1.Machine, error) {
	id, err := e.resolveMachine(ctx, arg)
	if err != nil {
		return apiv1.Machine{}, err
	}
	m, err := e.c.PatchMachine(ctx, id, patch)
	switch {
	case client.IsNotFound(err):
		return apiv1.Machine{}, fmt.Errorf("machine %s is not part of the cluster (see flotilla list-machines)", id)
	case err != nil:
		return apiv1.Machine{}, fmt.Errorf("set metadata of machine %s: %w", id, err)
	}
	return m, nil
}

// resolveMachine turns a MACHINE argument into a machine ID: an ID of the
// cluster, or the only one it is a prefix of (list-machines' "113f16a7..."
// included). An argument that matches no machine is returned as is, for
// the server to judge.
func (e *env) resolveMachine(ctx context.Context, arg string) (string, error) {
	prefix := strings.TrimSuffix(arg, "...")
	if prefix == "" {
		return "", fmt.Errorf("invalid machine %q: want a machine ID or a prefix of one", arg)
	}
	l, err := e.c.Machines(ctx)
	if err != nil {
		return "", err
	}
	var matches []string
	for _, m := range l.Machines {
		if m.ID == prefix {
			return m.ID, nil
		}
		if strings.HasPrefix(m.ID, prefix) {
			matches = append(matches, m.ID)
		}
	}
	switch len(matches) {
	case 0:
		return prefix, nil
	case 1:
		return matches[0], nil
	}
	sort.Strings(matches)
	return "", fmt.Errorf("machine %s is ambiguous: it begins the IDs of %s", arg, strings.Join(matches, ", "))
}
