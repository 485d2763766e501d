package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
)

// agentsPerProcess is the most agents in one helper process when
// --agents-per-process is not given: as few processes as hold the agents
// (MaxAgentsPerProcess each), unless the host has CPUs to spare: then a
// process per 500 agents, up to one for every two CPUs (the engine and
// etcd want the other half). Each helper is a Go runtime of its own, with
// its own collector and scheduler: on a 2-CPU host, 2,000 agents cost 3.0
// CPU-s in one process, 4.4 in two, 3.4 in four and 4.6 in eight (best
// of five runs each), and 10,000 agents started a million units in 39.8
// s in two processes of 5,000 where twenty of 500 took 68 to 71 s
// (docs/benchmarks.md, "The agents' shape"). Hosts of more than 2 CPUs
// were not measured.
func agentsPerProcess(agents, cpus int) int {
	procs := max((agents+MaxAgentsPerProcess-1)/MaxAgentsPerProcess, min(max(cpus/2, 1), (agents+499)/500), 1)
	return (agents + procs - 1) / procs
}

// agentGOMAXPROCS is the GOMAXPROCS the bench gives each helper process
// of agents when --agent-gomaxprocs is not given: the host's CPUs shared
// among the processes, at least one each, so that the helpers together
// run no more threads of Go than the host has CPUs. On 2 CPUs, with 2,000
// agents in 2, 4 or 8 processes, GOMAXPROCS 1 was faster than 2 (the
// median of five runs, 8.7 s against 10.7 with two processes), and with
// one process 2 was (6.7 s against 7.2); the host was busy, so these
// differences are smaller than the runs' spread.
func agentGOMAXPROCS(agents, perProcess, cpus int) int {
	procs := (agents + perProcess - 1) / max(perProcess, 1)
	return max(cpus/max(procs, 1), 1)
}

// chooseShape sets AgentsPerProcess and AgentGOMAXPROCS for the run's
// size from their flags, choosing for the host those not given, and
// checks them.
func (c *Config) chooseShape() error {
	c.AgentsPerProcess, c.AgentGOMAXPROCS = c.agentsPerProcessFlag, c.agentGOMAXPROCSFlag
	cpus := runtime.NumCPU()
	if c.AgentsPerProcess == 0 {
		c.AgentsPerProcess = agentsPerProcess(c.Agents, cpus)
	}
	if c.AgentsPerProcess < 1 || c.AgentsPerProcess > MaxAgentsPerProcess {
		return fmt.Errorf("--agents-per-process %d: want 1 to %d", c.AgentsPerProcess, MaxAgentsPerProcess)
	}
	if c.AgentGOMAXPROCS == 0 {
		c.AgentGOMAXPROCS = agentGOMAXPROCS(c.Agents, c.AgentsPerProcess, cpus)
	}
	if c.AgentGOMAXPROCS < 1 || c.AgentGOMAXPROCS > cpus {
		return fmt.Errorf("--agent-gomaxprocs %d: want 1 to %d, the host's CPUs", c.AgentGOMAXPROCS, cpus)
	}
	return nil
}

// shape describes how the run's agents are spread, for the progress line.
func (c *Config) shape(nproc int) string {
	return describeShape(nproc, c.AgentsPerProcess, c.AgentGOMAXPROCS, c.shapeChosen(), runtime.NumCPU())
}

// describeShape says "2 processes of up to 5,000 agents, GOMAXPROCS 1
// each (chosen for 2 CPUs: --agents-per-process, --agent-gomaxprocs)".
func describeShape(nproc, perProcess, gomaxprocs int, chosen []string, cpus int) string {
	s := fmt.Sprintf("%d %s of up to %s agents, GOMAXPROCS %d each", nproc, plural(nproc, "process", "processes"),
		thousands(int64(perProcess)), gomaxprocs)
	if len(chosen) > 0 {
		flags := make([]string, len(chosen))
		for i, k := range chosen {
			flags[i] = "--" + strings.ReplaceAll(k, "_", "-")
		}
		s += fmt.Sprintf(" (chosen for %d CPUs: %s)", cpus, strings.Join(flags, ", "))
	}
	return s
}

// shapeChosen names, by their JSON keys, the parts of the agents' shape
// the bench chose for the host because their flags were not given.
func (c *Config) shapeChosen() []string {
	chosen := []string{}
	if c.agentsPerProcessFlag == 0 {
		chosen = append(chosen, "agents_per_process")
	}
	if c.agentGOMAXPROCSFlag == 0 {
		chosen = append(chosen, "agent_gomaxprocs")
	}
	return chosen
}

// ScalingUnits are the sizes --scaling runs by default.
var ScalingUnits = []int{20_000, 100_000, 400_000, 1_000_000}

// UnitsPerAgent is how many units an agent has in each size of
// --scaling: the agents grow with the units, so that every size asks the
// same of each agent and the share measures the cluster's size alone.
// 100 matches the million-unit figures' 10,000 agents.
const UnitsPerAgent = 100

// scalingUnits are the sizes --scaling runs: ScalingUnits unless
// --scaling-units gives others.
func (c *Config) scalingUnits() []int {
	if len(c.ScalingUnits) > 0 {
		return c.ScalingUnits
	}
	return ScalingUnits
}

// scalingAgents is the agents a --scaling size of units runs on: one per
// UnitsPerAgent units, rounded up, at most MaxAgents.
func scalingAgents(units int) int {
	return min(max((units+UnitsPerAgent-1)/UnitsPerAgent, 1), MaxAgents)
}

// scalingRuns is how many times --scaling runs a size of units: three
// up to repeatUnder units, once above. A run of 20,000 units takes well
// under a second, and its rate moved by a tenth from one run to the next
// on a quiet host, which moved every share as much (docs/benchmarks.md,
// session 25); the median of three is the size's rate. Larger runs take
// long enough to be steadier, and too long to repeat by default.
func scalingRuns(units int) int {
	if units <= repeatUnder {
		return 3
	}
	return 1
}

// repeatUnder is the largest size of units --scaling runs three times.
const repeatUnder = 100_000

// ScalingStep is one size of a --scaling run.
type ScalingStep struct {
	Units            int  `json:"units"`
	Agents           int  `json:"agents"`
	AgentsPerProcess int  `json:"agents_per_process"`
	AgentGOMAXPROCS  int  `json:"agent_gomaxprocs"`
	AllActive        bool `json:"all_active"`
	// UnitsPerSecond is the median of Rates, the rates of the size's
	// runs (scalingRuns).
	UnitsPerSecond float64   `json:"units_per_second"`
	Rates          []float64 `json:"rates"`
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

// runScaling runs each size of cfg.ScalingUnits (default ScalingUnits),
// scalingRuns times, on scalingAgents agents, with the rest of cfg and a
// fresh cluster each run, printing each run's report as it ends, then the
// sizes' median rates as shares of the first's.
func runScaling(ctx context.Context, cfg Config, run func(context.Context, Config) ([]*Report, error)) error {
	byRegistry := map[string]*ScalingReport{}
	var order []string
	var notAll bool
	for _, units := range cfg.scalingUnits() {
		c := cfg
		c.Units, c.Agents = units, scalingAgents(units)
		if err := c.chooseShape(); err != nil {
			return err
		}
		var (
			first  []*Report // the size's first run's reports, one a registry
			rates  = map[string][]float64{}
			active = map[string]bool{} // in every run
		)
		for i := range scalingRuns(units) {
			rs, err := run(ctx, c)
			if err != nil && err != ErrNotAllActive {
				// The sizes measured so far are still worth their table.
				for _, reg := range order {
					printScaling(cfg.Out, byRegistry[reg], cfg.JSON)
				}
				return err
			}
			if i == 0 {
				first = rs
			}
			for _, r := range rs {
				rates[r.Registry] = append(rates[r.Registry], r.UnitsPerSecond)
				active[r.Registry] = r.AllActive && (i == 0 || active[r.Registry])
			}
		}
		for _, r := range first {
			sr := byRegistry[r.Registry]
			if sr == nil {
				sr = &ScalingReport{Registry: r.Registry}
				byRegistry[r.Registry] = sr
				order = append(order, r.Registry)
			}
			st := ScalingStep{Units: r.Units, Agents: r.Agents, AgentsPerProcess: r.AgentsPerProcess, AgentGOMAXPROCS: r.AgentGOMAXPROCS,
				AllActive: active[r.Registry], UnitsPerSecond: median(rates[r.Registry]), Rates: rates[r.Registry]}
			if len(sr.Steps) > 0 && sr.Steps[0].UnitsPerSecond > 0 {
				st.Share = st.UnitsPerSecond / sr.Steps[0].UnitsPerSecond
			} else if len(sr.Steps) == 0 {
				st.Share = 1
			}
			sr.Steps = append(sr.Steps, st)
			notAll = notAll || !st.AllActive
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

// median returns the median of xs (the mean of the middle two of an even
// count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

func printScaling(w io.Writer, r *ScalingReport, asJSON bool) error {
	if asJSON {
		return printJSONLine(w, r)
	}
	fmt.Fprintf(w, "scaling (%s): each size's rate (the median of its runs) as a share of the first's\n", r.Registry)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "UNITS\tAGENTS\tPER PROCESS\tGOMAXPROCS\tRUNS\tUNITS/S\tSHARE\t")
	for _, s := range r.Steps {
		rate := thousands(int64(math.Round(s.UnitsPerSecond)))
		if !s.AllActive {
			rate += " (not all active)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%.0f%%\t\n", thousands(int64(s.Units)), thousands(int64(s.Agents)),
			thousands(int64(s.AgentsPerProcess)), s.AgentGOMAXPROCS, len(s.Rates), rate, 100*s.Share)
	}
	return tw.Flush()
}
