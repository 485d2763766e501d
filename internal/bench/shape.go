package bench

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"text/tabwriter"
)

// agentsPerProcess is the shape the bench picks when --agents-per-process
// is not given: a helper process of simulated agents per 500 agents, but
// no more processes than the host has CPUs, and no more than
// MaxAgentsPerProcess agents in one. Each helper is a Go runtime of its
// own, with its own collector and scheduler; on a 2-CPU host 1,000 agents
// ran fastest in two processes (four took 1.8 times as long), and 10,000
// agents in two processes of 5,000 started a million units in 39.8 s where
// twenty processes of 500 took 68 to 71 s (docs/benchmarks.md).
func agentsPerProcess(agents, cpus int) int {
	procs := min(max(cpus, 1), (agents+499)/500)
	procs = max(procs, (agents+MaxAgentsPerProcess-1)/MaxAgentsPerProcess, 1)
	return (agents + procs - 1) / procs
}

// scalingSteps are the sizes --scaling runs, units and agents in the
// proportions of the figures docs/benchmarks.md keeps: 20,000 on 100
// agents, then 100 units an agent up to a million on 10,000.
var scalingSteps = []struct{ Units, Agents int }{
	{20_000, 100},
	{100_000, 1_000},
	{400_000, 4_000},
	{1_000_000, 10_000},
}

// ScalingStep is one size of a --scaling run.
type ScalingStep struct {
	Units          int     `json:"units"`
	Agents         int     `json:"agents"`
	AllActive      bool    `json:"all_active"`
	UnitsPerSecond float64 `json:"units_per_second"`
	// Share is the step's rate as a share of the first step's: 1 is
	// linear, below 1 the cost of a unit grows with the cluster.
	Share float64 `json:"share"`
}

// ScalingReport is what --scaling prints after the runs' own reports: with
// --json, one object {"scaling": [...]} on its own line.
type ScalingReport struct {
	Registry string        `json:"registry"`
	Steps    []ScalingStep `json:"scaling"`
}

// runScaling runs each of scalingSteps with the rest of cfg, printing each
// run's report as it ends, then the rates as shares of the first.
func runScaling(ctx context.Context, cfg Config, run func(context.Context, Config) ([]*Report, error)) error {
	byRegistry := map[string]*ScalingReport{}
	var order []string
	var notAll bool
	for _, s := range scalingSteps {
		c := cfg
		c.Units, c.Agents = s.Units, s.Agents
		c.AgentsPerProcess = cfg.agentsPerProcessFlag
		if c.AgentsPerProcess == 0 {
			c.AgentsPerProcess = agentsPerProcess(c.Agents, runtime.NumCPU())
		}
		rs, err := run(ctx, c)
		if err != nil && err != ErrNotAllActive {
			return err
		}
		for _, r := range rs {
			sr := byRegistry[r.Registry]
			if sr == nil {
				sr = &ScalingReport{Registry: r.Registry}
				byRegistry[r.Registry] = sr
				order = append(order, r.Registry)
			}
			st := ScalingStep{Units: r.Units, Agents: r.Agents, AllActive: r.AllActive, UnitsPerSecond: r.UnitsPerSecond}
			if len(sr.Steps) > 0 && sr.Steps[0].UnitsPerSecond > 0 {
				st.Share = st.UnitsPerSecond / sr.Steps[0].UnitsPerSecond
			} else if len(sr.Steps) == 0 {
				st.Share = 1
			}
			sr.Steps = append(sr.Steps, st)
			notAll = notAll || !r.AllActive
		}
	}
	for _, reg := range order {
		if err := printScaling(cfg.Out, byRegistry[reg], cfg.JSON); err != nil {
			return err
		}
	}
	if notAll {
		return ErrNotAllActive
	}
	return nil
}

func printScaling(w io.Writer, r *ScalingReport, asJSON bool) error {
	if asJSON {
		return printJSONLine(w, r)
	}
	fmt.Fprintf(w, "scaling (%s): each size's rate as a share of the first\n", r.Registry)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "UNITS\tAGENTS\tUNITS/S\tSHARE\t")
	for _, s := range r.Steps {
		rate := fmt.Sprintf("%.0f", s.UnitsPerSecond)
		if !s.AllActive {
			rate += " (not all active)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f%%\t\n", thousands(int64(s.Units)), thousands(int64(s.Agents)), rate, 100*s.Share)
	}
	return tw.Flush()
}
