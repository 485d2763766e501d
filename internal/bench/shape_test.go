package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"
)

func TestAgentsPerProcess(t *testing.T) {
	for _, tt := range []struct{ agents, cpus, want int }{
		{10_000, 2, 5_000}, // the shapes that measured fastest on 2 CPUs
		{1_000, 2, 500},
		{100, 2, 100},      // the 20,000-unit figures' shape
		{10_000, 1, 5_000}, // never more than MaxAgentsPerProcess
		{10_000, 8, 1_250},
		{1, 64, 1},
		{700, 16, 350}, // a process per 500 agents, rounded up
	} {
		if got := agentsPerProcess(tt.agents, tt.cpus); got != tt.want {
			t.Errorf("agentsPerProcess(%d agents, %d CPUs) = %d, want %d", tt.agents, tt.cpus, got, tt.want)
		}
	}
}

// TestScaling: --scaling runs each size with the rest of the config, and
// reports each rate as a share of the first.
func TestScaling(t *testing.T) {
	var out bytes.Buffer
	cfg := Config{Binary: "/bin/true", Out: &out, JSON: true, Registries: []string{"grpc"}, Engines: 1}
	var sizes []string
	run := func(_ context.Context, c Config) ([]*Report, error) {
		if c.Engines != 1 || c.AgentsPerProcess != agentsPerProcess(c.Agents, runtime.NumCPU()) {
			t.Errorf("size %d: config not carried over: %+v", c.Units, c)
		}
		sizes = append(sizes, thousands(int64(c.Units))+"/"+thousands(int64(c.Agents)))
		rate := 50_000 * 20_000 / float64(c.Units) // slower as it grows
		return []*Report{{Registry: "grpc", Units: c.Units, Agents: c.Agents, AllActive: c.Units < 1_000_000, UnitsPerSecond: rate}}, nil
	}
	err := runScaling(context.Background(), cfg, run)
	if !errors.Is(err, ErrNotAllActive) {
		t.Errorf("runScaling = %v, want ErrNotAllActive (the last size was not all active)", err)
	}
	if got := strings.Join(sizes, " "); got != "20,000/100 100,000/1,000 400,000/4,000 1,000,000/10,000" {
		t.Errorf("sizes run: %s", got)
	}
	var r ScalingReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, out.Bytes())
	}
	want := []float64{1, 0.2, 0.05, 0.02}
	for i, s := range r.Steps {
		if d := s.Share - want[i]; d > 1e-9 || d < -1e-9 {
			t.Errorf("step %d (%d units): share %v, want %v", i, s.Units, s.Share, want[i])
		}
	}
	out.Reset()
	cfg.JSON = false
	runScaling(context.Background(), cfg, run)
	if !strings.Contains(out.String(), "1,000,000") || !strings.Contains(out.String(), "2%") || !strings.Contains(out.String(), "not all active") {
		t.Errorf("text report:\n%s", out.String())
	}
}
