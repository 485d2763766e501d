package bench

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/waitfor"
)

func TestReadProcStatsSelf(t *testing.T) {
	before, err := readProcStats(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if before.PeakRSS < 1<<20 {
		t.Errorf("this test's peak RSS = %d bytes, want at least 1 MiB", before.PeakRSS)
	}
	// Spin until the kernel has charged this process more CPU (it counts in
	// ticks of 10 ms), bounded.
	deadline := time.Now().Add(5 * time.Second)
	for {
		after, err := readProcStats(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after.CPU > before.CPU {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU time stayed %v while the test spun for 5 s", after.CPU)
		}
		for i := 0; i < 1e6; i++ {
			_ = i * i
		}
	}
	if _, err := readProcStats(-1); err == nil {
		t.Error("readProcStats(-1) succeeded, want an error")
	}
}

func TestReadHostBusy(t *testing.T) {
	a, err := readHostBusy()
	if err != nil || a <= 0 {
		t.Fatalf("readHostBusy = %v, %v; want a positive time", a, err)
	}
	b, err := readHostBusy()
	if err != nil || b < a {
		t.Errorf("readHostBusy then = %v, %v; want at least %v", b, err, a)
	}
}

// TestProcessAlive: a running process is alive; an exited one not yet
// reaped (a zombie) is not, nor one reaped.
func TestProcessAlive(t *testing.T) {
	if !processAlive(os.Getpid()) {
		t.Fatal("this process is not alive")
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	waitfor.True(t, 5*time.Second, fmt.Sprintf("process %d (true) exited", pid), func() bool { return !processAlive(pid) })
	cmd.Wait()
	if processAlive(pid) {
		t.Errorf("process %d alive after it was reaped", pid)
	}
}
