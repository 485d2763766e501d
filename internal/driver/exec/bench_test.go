package execdriver

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/unit"
)

// BenchmarkStartStop1000 starts 1,000 units running /bin/sleep infinity,
// waits until every one is active, then stops them all and waits until
// every one is inactive: the exec driver's part of `flotilla bench driver`.
//
//	go test -run '^$' -bench StartStop1000 -benchtime 3x -cpuprofile cpu.out ./internal/driver/exec
func BenchmarkStartStop1000(b *testing.B) {
	const n = 1000
	var (
		mu      sync.Mutex
		cond    = sync.NewCond(&mu)
		current = make(map[string]string)
	)
	count := func(active string) int {
		c := 0
		for _, a := range current {
			if a == active {
				c++
			}
		}
		return c
	}
	d, err := New(Config{Dir: b.TempDir(), CgroupRoot: "/nonexistent", Notify: func(st unit.Status) {
		mu.Lock()
		current[st.Name] = st.Active
		mu.Unlock()
		cond.Broadcast()
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close(context.Background())
	files := make([]*unit.File, n)
	for i := range files {
		files[i] = newUnit(fmt.Sprintf("u%04d.service", i), []string{"/bin/sleep", "infinity"}, nil)
		if err := d.Load(files[i]); err != nil {
			b.Fatal(err)
		}
	}
	wait := func(active string) {
		deadline := time.AfterFunc(time.Minute, func() { cond.Broadcast() })
		defer deadline.Stop()
		start := time.Now()
		mu.Lock()
		defer mu.Unlock()
		for count(active) < n {
			if time.Since(start) > time.Minute {
				b.Fatalf("%d of %d units %s after a minute", count(active), n, active)
			}
			cond.Wait()
		}
	}
	b.ResetTimer()
	for range b.N {
		for _, f := range files {
			if err := d.Start(f.Name); err != nil {
				b.Fatal(err)
			}
		}
		wait("active")
		for _, f := range files {
			if err := d.Stop(f.Name); err != nil {
				b.Fatal(err)
			}
		}
		wait("inactive")
	}
}
