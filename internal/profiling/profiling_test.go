package profiling

import (
	"context"
	"io"
	"log/slog"
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
	for _, want := range []string{"/memory/classes/total:bytes ", "/memory/classes/heap/stacks:bytes ", "/sched/goroutines:goroutines "} {
		if !strings.Contains(string(mem), want) {
			t.Errorf("%s has no %q:\n%s", MemoryFile, want, mem)
		}
	}
}
