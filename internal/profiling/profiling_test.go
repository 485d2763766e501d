package profiling

import (
	"context"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/waitfor"
)

// TestOnSignals: SIGUSR1 starts a CPU profile, SIGUSR2 ends it and writes
// the heap profile; both files are whole once they exist.
func TestOnSignals(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := OnSignals(ctx, dir, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	self, _ := os.FindProcess(os.Getpid())
	self.Signal(syscall.SIGUSR1)
	// The profile starts into a temporary file, renamed when it ends.
	waitfor.True(t, 10*time.Second, "the CPU profile started", func() bool {
		started, _ := filepath.Glob(filepath.Join(dir, CPUFile+".*"))
		return len(started) > 0
	})
	self.Signal(syscall.SIGUSR2)
	waitfor.Until(t, 10*time.Second, "the profiles written", func() error {
		cpu, err := os.Stat(filepath.Join(dir, CPUFile))
		if err != nil {
			return err
		}
		heap, err := os.Stat(filepath.Join(dir, HeapFile))
		if err != nil {
			return err
		}
		if cpu.Size() == 0 || heap.Size() == 0 {
			t.Fatalf("profiles of %d and %d bytes", cpu.Size(), heap.Size())
		}
		return nil
	})
	// The memory classes are written before the heap profile.
	mem, err := os.ReadFile(filepath.Join(dir, MemoryFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/memory/classes/total:bytes ", "/memory/classes/heap/stacks:bytes ", "/sched/goroutines:goroutines ",
		schedLatencies + " p99 ", schedLatencies + " max ", gcPauses + " p50 "} {
		if !strings.Contains(string(mem), want) {
			t.Errorf("%s has no %q:\n%s", MemoryFile, want, mem)
		}
	}
}

// TestQuantile: a quantile is the upper bound of the bucket it falls in,
// the finite one for a bucket open above; 0 with nothing counted.
func TestQuantile(t *testing.T) {
	buckets := []float64{0, 1, 2, 4, math.Inf(1)}
	for _, tc := range []struct {
		counts []uint64
		q      float64
		want   float64
	}{
		{[]uint64{0, 0, 0, 0}, 0.5, 0},
		{[]uint64{10, 0, 0, 0}, 0.99, 1},
		{[]uint64{50, 49, 1, 0}, 0.5, 1},
		{[]uint64{50, 49, 1, 0}, 0.99, 2},
		{[]uint64{50, 49, 1, 0}, 1, 4},
		{[]uint64{1, 0, 0, 1}, 1, 4},
	} {
		if got := quantile(buckets, tc.counts, tc.q); got != tc.want {
			t.Errorf("quantile(%v, %v) = %v, want %v", tc.counts, tc.q, got, tc.want)
		}
	}
}

// TestWindowCounts: the quantiles are of what happened since the
// window's start, not since the process began.
func TestWindowCounts(t *testing.T) {
	buckets := []float64{0, 1, 2, math.Inf(1)}
	now, from := []uint64{100, 5, 0}, []uint64{100, 0, 0}
	if got := quantile(buckets, windowCounts(now, from), 0.5); got != 2 {
		t.Errorf("p50 of the window = %v, want 2 (its 5 waits were 1-2 s)", got)
	}
	if got := quantile(buckets, windowCounts(now, nil), 0.5); got != 1 {
		t.Errorf("p50 without a window = %v, want 1", got)
	}
}
