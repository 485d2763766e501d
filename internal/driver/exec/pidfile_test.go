package execdriver

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// TestReadProcStat: the fields the driver uses come from the right places
// of /proc/<pid>/stat, even for a command name that holds ") " and looks
// like further fields, and a start time that tells processes apart.
func TestReadProcStat(t *testing.T) {
	self, err := readProcStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if self.ppid != os.Getppid() || self.pgrp != syscall.Getpgrp() || self.state == 'Z' || self.start == 0 {
		t.Errorf("readProcStat(self) = %+v, want ppid %d, pgrp %d, not a zombie, a start time", self, os.Getppid(), syscall.Getpgrp())
	}

	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep:", err)
	}
	data, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	odd := filepath.Join(t.TempDir(), "a) Z 1 2 (b")
	if err := os.WriteFile(odd, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(odd, "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	st, err := readProcStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if st.ppid != os.Getpid() || st.pgrp != cmd.Process.Pid || st.state == 'Z' || st.start < self.start {
		t.Errorf("readProcStat(%q) = %+v, want ppid %d, pgrp %d, not a zombie, started after %d", odd, st, os.Getpid(), cmd.Process.Pid, self.start)
	}

	cmd.Process.Kill()
	cmd.Wait()
	if _, err := readProcStat(cmd.Process.Pid); err == nil {
		t.Errorf("readProcStat of the reaped pid %d succeeded", cmd.Process.Pid)
	}
}
