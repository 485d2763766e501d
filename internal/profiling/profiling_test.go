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
	time.Sleep(200 * time.Millisecond) // the CPU profile starts
	self.Signal(syscall.SIGUSR2)
	deadline := time.Now().Add(10 * time.Second)
	for {
		cpu, err1 := os.Stat(filepath.Join(dir, CPUFile))
		heap, err2 := os.Stat(filepath.Join(dir, HeapFile))
		if err1 == nil && err2 == nil {
			if cpu.Size() == 0 || heap.Size() == 0 {
				t.Fatalf("profiles of %d and %d bytes", cpu.Size(), heap.Size())
			}
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
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("profiles not written within 10s: %v, %v", err1, err2)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
