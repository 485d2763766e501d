package cputime

import (
	"runtime"
	"syscall"
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
	// The spin lasts until the process has used 100 ms of CPU, by
	// another clock (getrusage), not for a wall time: on a host busy
	// with other tests, 100 ms of wall time were once 12 ms of CPU.
	spun, ok := Of(func() {
		from := processCPU(t)
		for deadline := time.Now().Add(10 * time.Second); processCPU(t)-from < 100*time.Millisecond && time.Now().Before(deadline); {
		}
	})
	if !ok || spun < 50*time.Millisecond {
		t.Errorf("a spin of 100 ms of the process's CPU cost %v (ok %v), want most of it", spun, ok)
	}
}

// processCPU is the process's user and system CPU time so far.
func processCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
