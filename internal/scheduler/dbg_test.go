package scheduler

import (
	"testing"
	"time"
)

func TestDbgBench(t *testing.T) {
	start := time.Now()
	c, placed := benchCluster()
	t.Log("build", time.Since(start), len(placed), len(c.pats.byGlob))
	c.SetOptions(Options{Roles: map[string]RolePolicy{
		"web":   {Weight: 2},
		"batch": {Quota: Resources{CPUPercent: 800_000, MemoryBytes: 16 << 40}},
	}})
	pending := probes(10_000)
	ds := c.Allocate(pending)
	reasons := map[string]int{}
	for _, d := range ds {
		if d.Machine == "" {
			reasons[d.Reason[:min(80, len(d.Reason))]]++
		}
	}
	for r, n := range reasons {
		t.Log(n, r)
	}
	t.Log(c.Shares())
}
