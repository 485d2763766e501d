package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

func TestAgentsPerProcess(t *testing.T) {
	for _, tt := range []struct{ agents, cpus, want int }{
		{10_000, 2, 5_000}, // the shapes that measured fastest on 2 CPUs
		{2_000, 2, 2_000},
		{1_000, 2, 1_000},
		{200, 2, 200},
		{10_000, 1, 5_000}, // never more than MaxAgentsPerProcess
		{10_000, 8, 2_500}, // a process for every two CPUs
		{10_000, 32, 625},
		{1, 64, 1},
		{700, 16, 350}, // a process per 500 agents, rounded up
	} {
		if got := agentsPerProcess(tt.agents, tt.cpus); got != tt.want {
			t.Errorf("agentsPerProcess(%d agents, %d CPUs) = %d, want %d", tt.agents, tt.cpus, got, tt.want)
		}
	}
}

func TestAgentGOMAXPROCS(t *testing.T) {
	for _, tt := range []struct{ agents, per, cpus, want int }{
		{2_000, 2_000, 2, 2}, // one process: every CPU
		{10_000, 5_000, 2, 1},
		{2_000, 250, 2, 1}, // more processes than CPUs: one each
		{10_000, 2_500, 8, 2},
		{1, 1, 1, 1},
	} {
		if got := agentGOMAXPROCS(tt.agents, tt.per, tt.cpus); got != tt.want {
			t.Errorf("agentGOMAXPROCS(%d agents, %d a process, %d CPUs) = %d, want %d", tt.agents, tt.per, tt.cpus, got, tt.want)
		}
	}
}

// TestScaling: --scaling runs each size with the rest of the config (the
// sizes up to 100,000 units three times), and reports each size's median
// rate as a share of the first's; a size is all active only if every run
// of it was.
func TestScaling(t *testing.T) {
	var out bytes.Buffer
	cfg := Config{Binary: "/bin/true", Out: &out, JSON: true, Registries: []string{"grpc"}, Engines: 1}
	var sizes []string
	runs := map[int]int{}
	run := func(_ context.Context, c Config) ([]*Report, error) {
		if c.Engines != 1 || c.AgentsPerProcess != agentsPerProcess(c.Agents, runtime.NumCPU()) ||
			c.AgentGOMAXPROCS != agentGOMAXPROCS(c.Agents, c.AgentsPerProcess, runtime.NumCPU()) {
			t.Errorf("size %d: config not carried over: %+v", c.Units, c)
		}
		sizes = append(sizes, thousands(int64(c.Units))+"/"+thousands(int64(c.Agents)))
		// Slower as it grows; a repeated size's runs at 1, 1.3 and 0.8
		// times its rate (a size run once: the rate), whose median is the
		// rate; the second run of 100,000 units not all active.
		k := runs[c.Units]
		runs[c.Units]++
		rate := 50_000 * 20_000 / float64(c.Units) * []float64{1, 1.3, 0.8}[k]
		return []*Report{{Registry: "grpc", Units: c.Units, Agents: c.Agents, AgentsPerProcess: c.AgentsPerProcess,
			AgentGOMAXPROCS: c.AgentGOMAXPROCS, AllActive: c.Units < 1_000_000 && (c.Units != 100_000 || k != 1), UnitsPerSecond: rate}}, nil
	}
	err := runScaling(context.Background(), cfg, run)
	if !errors.Is(err, ErrNotAllActive) {
		t.Errorf("runScaling = %v, want ErrNotAllActive (the last size was not all active)", err)
	}
	if got := strings.Join(sizes, " "); got != "20,000/200 20,000/200 20,000/200 100,000/1,000 100,000/1,000 100,000/1,000 400,000/4,000 1,000,000/10,000" {
		t.Errorf("sizes run: %s", got)
	}
	var r ScalingReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, out.Bytes())
	}
	want := []float64{1, 0.2, 0.05, 0.02}
	wantRuns := []int{3, 3, 1, 1}
	wantActive := []bool{true, false, true, false}
	for i, s := range r.Steps {
		if d := s.Share - want[i]; d > 1e-9 || d < -1e-9 {
			t.Errorf("step %d (%d units): share %v, want %v", i, s.Units, s.Share, want[i])
		}
		if len(s.Rates) != wantRuns[i] || s.AllActive != wantActive[i] {
			t.Errorf("step %d (%d units): rates %v, all active %v; want %d rates, all active %v", i, s.Units, s.Rates, s.AllActive, wantRuns[i], wantActive[i])
		}
		if s.AgentsPerProcess != agentsPerProcess(s.Agents, runtime.NumCPU()) || s.AgentGOMAXPROCS < 1 {
			t.Errorf("step %d (%d units): shape %d agents per process, GOMAXPROCS %d", i, s.Units, s.AgentsPerProcess, s.AgentGOMAXPROCS)
		}
	}
	out.Reset()
	cfg.JSON = false
	clear(runs)
	runScaling(context.Background(), cfg, run)
	if !strings.Contains(out.String(), "1,000,000") || !strings.Contains(out.String(), "2%") || !strings.Contains(out.String(), "not all active") {
		t.Errorf("text report:\n%s", out.String())
	}
}

// TestScalingShapeFlags: given flags win over the host's choice in every
// size, and --scaling-units replaces the sizes.
func TestScalingShapeFlags(t *testing.T) {
	var out bytes.Buffer
	cfg := Config{Binary: "/bin/true", Out: &out, Registries: []string{"grpc"}, Engines: 1,
		ScalingUnits: []int{200, 400, 1_000}, agentsPerProcessFlag: 3, agentGOMAXPROCSFlag: 1}
	var got []string
	err := runScaling(context.Background(), cfg, func(_ context.Context, c Config) ([]*Report, error) {
		got = append(got, fmt.Sprintf("%d/%d/%d/%d/%v", c.Units, c.Agents, c.AgentsPerProcess, c.AgentGOMAXPROCS, c.shapeChosen()))
		return []*Report{{Registry: "grpc", Units: c.Units, Agents: c.Agents, AllActive: true, UnitsPerSecond: 100}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.Join(got, " "); s != "200/2/3/1/[] 200/2/3/1/[] 200/2/3/1/[] 400/4/3/1/[] 400/4/3/1/[] 400/4/3/1/[] 1000/10/3/1/[] 1000/10/3/1/[] 1000/10/3/1/[]" {
		t.Errorf("sizes and shapes run: %s", s)
	}
	if !strings.Contains(out.String(), "100%") || strings.Count(out.String(), "\n") != 5 {
		t.Errorf("text report:\n%s", out.String())
	}
}

func TestChooseShape(t *testing.T) {
	c := Config{Agents: 2_000}
	if err := c.chooseShape(); err != nil {
		t.Fatal(err)
	}
	if c.AgentsPerProcess != agentsPerProcess(2_000, runtime.NumCPU()) || c.AgentGOMAXPROCS != agentGOMAXPROCS(2_000, c.AgentsPerProcess, runtime.NumCPU()) {
		t.Errorf("chosen: %d agents per process, GOMAXPROCS %d", c.AgentsPerProcess, c.AgentGOMAXPROCS)
	}
	if got := strings.Join(c.shapeChosen(), ","); got != "agents_per_process,agent_gomaxprocs" {
		t.Errorf("shapeChosen = %s", got)
	}
	for _, tt := range []struct {
		per, procs int
		want       string
	}{
		{MaxAgentsPerProcess + 1, 0, "--agents-per-process 5001: want 1 to 5000"},
		{0, -1, "--agent-gomaxprocs -1: want 1 to"},
		{0, runtime.NumCPU() + 1, fmt.Sprintf("--agent-gomaxprocs %d: want 1 to %d", runtime.NumCPU()+1, runtime.NumCPU())},
	} {
		c := Config{Agents: 10, agentsPerProcessFlag: tt.per, agentGOMAXPROCSFlag: tt.procs}
		if err := c.chooseShape(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("chooseShape(%d per process, GOMAXPROCS %d) = %v, want an error naming %q", tt.per, tt.procs, err, tt.want)
		}
	}
}

func TestScalingUnitsRefused(t *testing.T) {
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{Scaling: true, ScalingUnits: []int{200, 0}}, "--scaling-units: 0 units: want 1 to 1000000"},
		{Config{Scaling: true, ScalingUnits: []int{MaxUnits + 1}}, "--scaling-units: 1000001 units"},
		{Config{Agents: 1, Units: 1, ScalingUnits: []int{200}}, "add --scaling"},
	} {
		tt.cfg.Binary = "/bin/true"
		if err := Run(context.Background(), tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Run(%+v) = %v, want an error naming %q", tt.cfg, err, tt.want)
		}
	}
}
