package cputime

import (
	"runtime"
	"testing"
	"time"
)

// TestOfCountsCPUNotWaits: a function that sleeps costs next to no CPU; one
// that spins costs about what it took.
func TestOfCountsCPUNotWaits(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("thread CPU time is read on Linux only")
	}
	slept, ok := Of(func() { time.Sleep(200 * time.Millisecond) })
	if !ok || slept > 50*time.Millisecond {
		t.Errorf("a 200 ms sleep cost %v (ok %v), want under 50 ms", slept, ok)
	}
	spun, ok := Of(func() {
		for start := time.Now(); time.Since(start) < 100*time.Millisecond; {
		}
	})
	if !ok || spun < 20*time.Millisecond {
		t.Errorf("a 100 ms spin cost %v (ok %v), want most of it", spun, ok)
	}
}
