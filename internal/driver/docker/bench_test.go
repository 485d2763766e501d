package docker

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// BenchmarkStartStop starts $FLOTILLA_BENCH_CONTAINERS (default 100)
// container units through one driver, all at once as an agent would, waits
// until every one is active/running, then stops them all and waits until
// every one is inactive, then unloads them (removing the containers). It
// reports each phase in seconds per batch:
//
//	FLOTILLA_BENCH_CONTAINERS=1000 go test ./internal/driver/docker -run '^$' -bench StartStop -benchtime 1x -timeout 30m
func BenchmarkStartStop(b *testing.B) {
	n := 100
	if s := os.Getenv("FLOTILLA_BENCH_CONTAINERS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 || n > 5000 {
			b.Fatalf("FLOTILLA_BENCH_CONTAINERS=%q: want 1 to 5000", s)
		}
	}
	h := newHarness(b)
	d, err := New(h.config())
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		d.Close(ctx)
	}()
	files := make([]*unit.File, n)
	for i := range files {
		f, err := unit.ParseStored(fmt.Sprintf("bench-%d.service", i), "[X-Container]\nImage="+h.image+"\nCommand=run\n[Service]\nTimeoutStopSec=10\n")
		if err != nil {
			b.Fatal(err)
		}
		files[i] = f
	}
	b.ResetTimer()
	for range b.N {
		for _, f := range files {
			if err := d.Load(f); err != nil {
				b.Fatal(err)
			}
		}
		begin := time.Now()
		for _, f := range files {
			if err := d.Start(f.Name); err != nil {
				b.Fatal(err)
			}
		}
		waitAllStates(b, d, n, 20*time.Minute, func(s unit.Status) bool { return s.Active == "active" }, "active")
		started := time.Since(begin)
		begin = time.Now()
		for _, f := range files {
			if err := d.Stop(f.Name); err != nil {
				b.Fatal(err)
			}
		}
		waitAllStates(b, d, n, 20*time.Minute, func(s unit.Status) bool { return s.Active == "inactive" }, "inactive")
		stopped := time.Since(begin)
		begin = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		errs := make(chan error, n)
		for _, f := range files {
			go func() { errs <- d.Unload(ctx, f.Name) }()
		}
		for range files {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
		cancel()
		removed := time.Since(begin)
		b.ReportMetric(started.Seconds(), "start-s")
		b.ReportMetric(stopped.Seconds(), "stop-s")
		b.ReportMetric(removed.Seconds(), "remove-s")
		b.Logf("%d containers: started in %s, stopped in %s, removed in %s", n, started.Round(time.Millisecond), stopped.Round(time.Millisecond), removed.Round(time.Millisecond))
	}
}

func waitAllStates(b *testing.B, d *Driver, n int, within time.Duration, ok func(unit.Status) bool, what string) {
	b.Helper()
	waitfor.Until(b, within, fmt.Sprintf("%d units %s", n, what), func() error {
		good := 0
		for _, s := range d.States() {
			if ok(s) {
				good++
			} else if s.Active == "failed" {
				b.Fatalf("%s failed: %+v", s.Name, s)
			}
		}
		if good != n {
			return fmt.Errorf("only %d of %d", good, n)
		}
		return nil
	})
}
