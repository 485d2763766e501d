package supervisor

import (
	"os/exec"
	"syscall"
	"testing"

	"github.com/flotilla/flotilla/internal/waitfor"
)

// TestProcessGone: a running process is not gone; one that died is, as a
// zombie (which kill(2) still finds, so /proc's state says it) and once
// reaped.
func TestProcessGone(t *testing.T) {
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	reaped := false
	defer func() {
		if !reaped {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	if processGone(pid) {
		t.Fatalf("processGone(%d) of a running sleep = true", pid)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	waitfor.True(t, waitTimeout, "the killed sleep to be a zombie", func() bool { return procGone(pid) })
	if syscall.Kill(pid, 0) != nil {
		t.Fatalf("the zombie %d is not found by kill(2): the test does not test /proc", pid)
	}
	if !processGone(pid) {
		t.Errorf("processGone(%d) of a zombie = false", pid)
	}
	cmd.Wait()
	reaped = true
	if !processGone(pid) {
		t.Errorf("processGone(%d) of a reaped process = false", pid)
	}
}
