package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
)

// listFlags are the flags of the list commands.
type listFlags struct {
	full     bool
	noLegend bool
	fields   string
}

func (f *listFlags) register(cmd *cobra.Command, defaults, valid string) {
	cmd.Flags().BoolVarP(&f.full, "full", "l", false, "do not ellipsize machine IDs and hashes")
	cmd.Flags().BoolVar(&f.noLegend, "no-legend", false, "do not print a legend (column headers)")
	cmd.Flags().StringVar(&f.fields, "fields", defaults, "columns to print, comma-separated; valid fields: "+valid)
}

// unitRow is one line of list-units: a unit as one machine reports it.
type unitRow struct {
	Unit    string `json:"unit"`
	Machine string `json:"machine"`
	Load    string `json:"load"`
	Active  string `json:"active"`
	Sub     string `json:"sub"`
	Hash    string `json:"hash"`
	// Reason is why the unit is kept on its target machine, on that
	// machine's row (a drained machine it fits nowhere else than on).
	Reason string `json:"reason,omitempty"`
	// Health is the unit's health on that machine while active (see
	// apiv1.UnitState). Not in -o json, whose keys are fleetctl's field
	// names: GET /v1/unit-states has it.
	Health    string `json:"-"`
	machineIP string
}

func unitFields() []field[unitRow] {
	return []field[unitRow]{
		{"unit", func(r unitRow, _ bool) string { return r.Unit }},
		{"machine", func(r unitRow, full bool) string { return machineLegend(r.Machine, r.machineIP, full) }},
		{"load", func(r unitRow, _ bool) string { return dash(r.Load) }},
		{"active", func(r unitRow, _ bool) string { return dash(r.Active) }},
		{"sub", func(r unitRow, _ bool) string { return dash(r.Sub) }},
		{"hash", func(r unitRow, full bool) string { return shortHash(r.Hash, full) }},
		{"reason", func(r unitRow, _ bool) string { return dash(r.Reason) }},
		{"health", func(r unitRow, _ bool) string { return dash(r.Health) }},
	}
}

const defaultUnitFields = "unit,machine,active,sub,health"

// unitRows joins what the machines report (one row per unit and machine,
// so a global unit has a row per machine) with the units that no machine
// reports (a row with no state).
func unitRows(units []apiv1.Unit, states []apiv1.UnitState, machines []apiv1.Machine) []unitRow {
	ips := machineIPs(machines)
	rows := make([]unitRow, 0, len(states)+len(units))
	reported := map[string]bool{}
	reasons := map[[2]string]string{} // (unit, target machine) -> reason
	for _, u := range units {
		if u.Reason != "" && u.Machine != "" {
			reasons[[2]string{u.Name, u.Machine}] = u.Reason
		}
	}
	for _, s := range states {
		reported[s.Name] = true
		rows = append(rows, unitRow{
			Unit: s.Name, Machine: s.Machine, machineIP: ips[s.Machine],
			Load: s.Load, Active: s.Active, Sub: s.Sub, Hash: s.Hash, Reason: reasons[[2]string{s.Name, s.Machine}], Health: s.Health,
		})
	}
	for _, u := range units {
		// fleetctl listed what machines report; a unit that is wanted but
		// not reported yet (unplaced, or on its way) shows with "-".
		if !reported[u.Name] && u.DesiredState != "inactive" {
			rows = append(rows, unitRow{Unit: u.Name})
		}
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].Unit != rows[j].Unit {
			return rows[i].Unit < rows[j].Unit
		}
		return rows[i].Machine < rows[j].Machine
	})
	return rows
}

func machineIPs(machines []apiv1.Machine) map[string]string {
	ips := make(map[string]string, len(machines))
	for _, m := range machines {
		ips[m.ID] = m.IP
	}
	return ips
}

func newListUnitsCommand(g *Globals) *cobra.Command {
	var lf listFlags
	var watch bool
	cmd := &cobra.Command{
		Use:   "list-units [flags]",
		Short: "List the current state of units in the cluster",
		Long: `List the state of the units of the cluster as their machines report it, one
line per unit and machine. A unit that is loaded or launched but that no
machine reports yet shows "-"; units only submitted are not listed (see
list-unit-files). A unit kept where it runs for a reason (a drained machine
it fits nowhere else than on) has it in the reason field; unless that field
is printed, a line on standard error gives it. HEALTH is the unit's health
while active, as its machine judges it by the unit's [X-Check]: healthy,
unhealthy, or unknown until its checks decide; a unit without [X-Check] is
healthy while active (a Type=notify unit is active once it sent READY=1),
and unhealthy after its WatchdogSec= passed, until it starts again.

With --output json, print an array of objects with every field, full
machine IDs and hashes, and "" for what is not known; the keys are
fleetctl's, so health is not among them (GET /v1/unit-states has it).

With --watch, print the table, then a line for each row that changes, as it
changes, until interrupted (Ctrl-C); a row that goes away is printed once
more with "-" for its state. With --watch --output json, print every event
of the cluster from now on instead, one JSON object per line (see GET
/v1/events in docs/api.md).`,
		Example: `  flotilla list-units
  flotilla list-units --no-legend --fields unit,machine
  flotilla list-units --watch`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: g.runE(func(ctx context.Context, e *env, _ []string) error {
			fields, err := parseFields(lf.fields, unitFields())
			if err != nil {
				return err
			}
			if watch {
				return e.watchUnits(ctx, fields, lf.full, lf.noLegend)
			}
			rows, err := e.listUnits(ctx)
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.out, rows)
			}
			if err := writeTable(e.out, fields, rows, lf.full, lf.noLegend); err != nil {
				return err
			}
			if !hasField(fields, "reason") {
				for _, r := range rows {
					if r.Reason != "" {
						fmt.Fprintf(e.errOut, "Unit %s on %s: %s\n", r.Unit, r.Machine, r.Reason)
					}
				}
			}
			return nil
		}),
	}
	lf.register(cmd, defaultUnitFields, fieldNames(unitFields()))
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "after the table, print each row that changes until interrupted (with --output json: each event)")
	return cmd
}

func (e *env) listUnits(ctx context.Context) ([]unitRow, error) {
	units, err := e.c.Units(ctx)
	if err != nil {
		return nil, err
	}
	states, err := e.c.UnitStates(ctx, client.UnitStateFilter{})
	if err != nil {
		return nil, err
	}
	machines, err := e.c.Machines(ctx)
	if err != nil {
		return nil, err
	}
	return unitRows(units.Units, states.States, machines.Machines), nil
}

// unitFileRow is one line of list-unit-files.
type unitFileRow struct {
	Unit   string `json:"unit"`
	Hash   string `json:"hash"`
	DState string `json:"dstate"`
	State  string `json:"state"`
	Target string `json:"tmachine"`
	Desc   string `json:"desc"`
	Reason string `json:"reason"`
	// The cut-off policy: "singleton" for Singleton=true units, and
	// LostAfter= ("" for the agent TTL).
	Policy    string `json:"policy,omitempty"`
	LostAfter string `json:"lostAfter,omitempty"`
	targetIP  string
}

func unitFileFields() []field[unitFileRow] {
	target := func(r unitFileRow, full bool) string { return machineLegend(r.Target, r.targetIP, full) }
	return []field[unitFileRow]{
		{"unit", func(r unitFileRow, _ bool) string { return r.Unit }},
		{"hash", func(r unitFileRow, full bool) string { return shortHash(r.Hash, full) }},
		{"dstate", func(r unitFileRow, _ bool) string { return dash(r.DState) }},
		{"state", func(r unitFileRow, _ bool) string { return dash(r.State) }},
		{"target", target},
		{"tmachine", target},
		{"desc", func(r unitFileRow, _ bool) string { return dash(r.Desc) }},
		{"reason", func(r unitFileRow, _ bool) string { return dash(r.Reason) }},
		{"policy", func(r unitFileRow, _ bool) string { return dash(r.Policy) }},
		{"lostafter", func(r unitFileRow, _ bool) string { return dash(r.LostAfter) }},
	}
}

const defaultUnitFileFields = "unit,hash,dstate,state,target"

func unitFileRows(units []apiv1.Unit, machines []apiv1.Machine) []unitFileRow {
	ips := machineIPs(machines)
	rows := make([]unitFileRow, 0, len(units))
	for _, u := range units {
		rows = append(rows, unitFileRow{
			Unit: u.Name, Hash: u.Hash, DState: u.DesiredState, State: u.CurrentState,
			Target: u.Machine, targetIP: ips[u.Machine], Desc: u.Description, Reason: u.Reason,
			Policy: unitPolicy(u), LostAfter: u.LostAfter,
		})
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Unit < rows[j].Unit })
	return rows
}

func newListUnitFilesCommand(g *Globals) *cobra.Command {
	var lf listFlags
	cmd := &cobra.Command{
		Use:   "list-unit-files [flags]",
		Short: "List the units that exist in the cluster",
		Long: `List every unit of the cluster, whether or not it is scheduled: its hash,
desired state (DSTATE), the state its machine reports (STATE) and the
machine it is scheduled to (TARGET).

A unit that is wanted but cannot be placed on any machine is reported below
the table, on standard error, unless the reason field is printed.

With --output json, print an array of objects with every field (the target
machine under "tmachine"), full machine IDs and hashes.`,
		Example: `  flotilla list-unit-files
  flotilla list-unit-files --fields unit,dstate,state,reason`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: g.runE(func(ctx context.Context, e *env, _ []string) error {
			fields, err := parseFields(lf.fields, unitFileFields())
			if err != nil {
				return err
			}
			units, err := e.c.Units(ctx)
			if err != nil {
				return err
			}
			machines, err := e.c.Machines(ctx)
			if err != nil {
				return err
			}
			rows := unitFileRows(units.Units, machines.Machines)
			if e.json {
				return writeJSON(e.out, rows)
			}
			if err := writeTable(e.out, fields, rows, lf.full, lf.noLegend); err != nil {
				return err
			}
			if !hasField(fields, "reason") {
				writeReasons(e.errOut, rows)
			}
			return nil
		}),
	}
	lf.register(cmd, defaultUnitFileFields, fieldNames(unitFileFields()))
	return cmd
}

func hasField[T any](fields []field[T], name string) bool {
	for _, f := range fields {
		if f.name == name {
			return true
		}
	}
	return false
}

// writeReasons reports the units that cannot be placed.
func writeReasons(w io.Writer, rows []unitFileRow) {
	for _, r := range rows {
		if r.Reason != "" {
			fmt.Fprintf(w, "Unit %s cannot be placed: %s\n", r.Unit, r.Reason)
		}
	}
}

// machineRow is one line of list-machines.
type machineRow struct {
	Machine  string            `json:"machine"`
	IP       string            `json:"ip"`
	Metadata map[string]string `json:"metadata"`
	Leader   bool              `json:"leader"`
	Units    int               `json:"units"`
	Draining bool              `json:"draining,omitempty"`
	Drivers  []string          `json:"drivers"`
	// Version is the machine's release and short commit, Protocol the
	// agent protocol it speaks: what a rolling upgrade changes.
	Version  string `json:"version"`
	Protocol int    `json:"protocol,omitempty"`
}

func machineFields() []field[machineRow] {
	return []field[machineRow]{
		{"machine", func(r machineRow, full bool) string { return machineID(r.Machine, full) }},
		{"ip", func(r machineRow, _ bool) string { return dash(r.IP) }},
		{"metadata", func(r machineRow, _ bool) string { return formatMetadata(r.Metadata) }},
		{"leader", func(r machineRow, _ bool) string { return strconv.FormatBool(r.Leader) }},
		{"units", func(r machineRow, _ bool) string { return strconv.Itoa(r.Units) }},
		{"draining", func(r machineRow, _ bool) string { return strconv.FormatBool(r.Draining) }},
		{"drivers", func(r machineRow, _ bool) string { return dash(strings.Join(r.Drivers, ",")) }},
		{"version", func(r machineRow, _ bool) string { return dash(r.Version) }},
		{"protocol", func(r machineRow, _ bool) string {
			if r.Protocol == 0 {
				return "-"
			}
			return strconv.Itoa(r.Protocol)
		}},
	}
}

const defaultMachineFields = "machine,ip,metadata,drivers,version"

func machineRows(machines []apiv1.Machine) []machineRow {
	rows := make([]machineRow, 0, len(machines))
	for _, m := range machines {
		md := m.Metadata
		if md == nil {
			md = map[string]string{}
		}
		rows = append(rows, machineRow{Machine: m.ID, IP: m.IP, Metadata: md, Leader: m.Leader, Units: m.Units, Draining: m.Draining, Drivers: m.Drivers,
			Version: m.Version, Protocol: m.Protocol})
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Machine < rows[j].Machine })
	return rows
}

// formatMetadata shows metadata as fleetctl did: "k=v,k2=v2", sorted by key.
func formatMetadata(md map[string]string) string {
	if len(md) == 0 {
		return "-"
	}
	pairs := make([]string, 0, len(md))
	for k, v := range md {
		pairs = append(pairs, k+"="+v)
	}
	sort.Strings(pairs)
	return strings.Join(pairs, ",")
}

func newListMachinesCommand(g *Globals) *cobra.Command {
	var lf listFlags
	cmd := &cobra.Command{
		Use:   "list-machines [flags]",
		Short: "List the machines of the cluster",
		Long: `List the machines of the cluster: ID, IP, metadata, drivers and version
(release and short commit) by default; the leader field tells which
machine leads, units how many units it is target of, protocol the agent
protocol its daemon speaks (see "Versions and compatibility" in
docs/operations.md). set-metadata changes a machine's metadata.

With --output json, print an array of objects with every field, full
machine IDs and metadata as an object.`,
		Example: `  flotilla list-machines
  flotilla list-machines --full --fields machine,ip,leader`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: g.runE(func(ctx context.Context, e *env, _ []string) error {
			fields, err := parseFields(lf.fields, machineFields())
			if err != nil {
				return err
			}
			l, err := e.c.Machines(ctx)
			if err != nil {
				return err
			}
			rows := machineRows(l.Machines)
			if e.json {
				return writeJSON(e.out, rows)
			}
			return writeTable(e.out, fields, rows, lf.full, lf.noLegend)
		}),
	}
	lf.register(cmd, defaultMachineFields, fieldNames(machineFields()))
	return cmd
}

// unitPolicy names a unit's cut-off policy for list-unit-files: "singleton"
// (never on two machines at once), "global", or "" (kept running when cut
// off, replaced after LostAfter=).
func unitPolicy(u apiv1.Unit) string {
	switch {
	case u.Singleton:
		return "singleton"
	case u.Global:
		return "global"
	}
	return ""
}
