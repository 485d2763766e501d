package engine_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/engine"
	"github.com/flotilla/flotilla/internal/etcdtest"
	"github.com/flotilla/flotilla/internal/unit"
)

// BenchmarkApplyRange times one request starting a range of instances of
// a template (bench@{1..n}.service), then one stopping them (desired state
// loaded), on an engine leading over an embedded etcd. No agent runs: the
// instances stay unplaced. The reconcile passes that follow each request
// (the first writes every instance's record) are waited for outside the
// timing, with requests that change nothing. Run with -benchtime 1x:
//
//	go test -run '^$' -bench ApplyRange -benchtime 1x ./internal/engine
func BenchmarkApplyRange(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) { benchApplyRange(b, n) })
	}
}

func benchApplyRange(b *testing.B, n int) {
	srv := etcdtest.Start(b)
	cli := srv.Client(b)
	// A long lease: a busy host must not make the leader degrade.
	e := startEngine(b, cli, "grpc", "e1", func(c *engine.Config) {
		c.ElectionTTL = 10 * time.Second
		c.AgentTTL = engine.MinAgentTTL(c.ElectionTTL)
	})
	waitLeader(b, e)
	ctx := context.Background()
	tmpl := engine.Change{Name: "bench@.service", File: parse(b, "bench@.service", simple)}
	// The process's CPU time is given too: this host's other load makes
	// the wall time vary.
	var cpu time.Duration
	apply := func(c engine.Change) time.Duration {
		start, cpu0 := time.Now(), cpuTime()
		if err := e.Apply(ctx, []engine.Change{c}); err != nil {
			b.Fatal(err)
		}
		cpu = cpuTime() - cpu0
		return time.Since(start)
	}
	apply(tmpl)
	// settle waits for the passes that follow a request: a request that
	// changes nothing waits for the pass under way, and the next passes
	// can start only once it is answered; once one is answered at once,
	// the engine is idle.
	settle := func() (waited time.Duration) {
		for range 20 {
			d := apply(tmpl)
			waited += d
			if d < 100*time.Millisecond {
				break
			}
		}
		return waited
	}
	r := unit.Range{From: 1, To: n}
	var start, stop, startCPU, stopCPU time.Duration
	b.ResetTimer()
	for range b.N {
		s := apply(engine.Change{Name: "bench@.service", Range: &r, DesiredState: unit.Launched})
		sc := cpu
		b.StopTimer()
		w := settle()
		b.StartTimer()
		p := apply(engine.Change{Name: "bench@.service", Range: &r, DesiredState: unit.Loaded})
		pc := cpu
		b.StopTimer()
		w += settle()
		b.StartTimer()
		start, stop, startCPU, stopCPU = start+s, stop+p, startCPU+sc, stopCPU+pc
		b.Logf("%d instances: start %v (CPU %v), stop %v (CPU %v); waited for the passes after them: %v", n, s, sc, p, pc, w)
	}
	b.ReportMetric(float64(start.Milliseconds())/float64(b.N), "start-ms")
	b.ReportMetric(float64(stop.Milliseconds())/float64(b.N), "stop-ms")
	b.ReportMetric(float64(startCPU.Milliseconds())/float64(b.N), "start-cpu-ms")
	b.ReportMetric(float64(stopCPU.Milliseconds())/float64(b.N), "stop-cpu-ms")
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
