package supervisor

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// otherBinary writes a copy of this test binary with a few bytes appended
// (an ELF file runs the same with them): another file, with another
// SHA-256, that serves as the supervisor as this one does.
func otherBinary(t *testing.T, name string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(t.TempDir(), name)
	dst, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(dst, "\x00flotilla test binary %s\x00", name)
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestExecArgs: the next image gets the arguments this one was started
// with, less the handover flags of the last upgrade, plus the new ones.
func TestExecArgs(t *testing.T) {
	in := []string{"supervisor", "--dir", "/d", "--handover", "/d/supervisor.handover", "--inaccessible", "/k",
		"--handover-fallback-fd=7", "--log-level", "debug", "--handover-fallback-fd", "9", "--handover=/x"}
	got := strings.Join(execArgs(in, "--handover", "/d/h", "--handover-fallback-fd", "5"), " ")
	want := "supervisor --dir /d --inaccessible /k --log-level debug --handover /d/h --handover-fallback-fd 5"
	if got != want {
		t.Errorf("execArgs = %q, want %q", got, want)
	}
}

// syncBuffer is a log a client writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// newClientFrom makes a client whose binary (the daemon's) is binary, with
// its log kept.
func newClientFrom(t *testing.T, dir, binary string) (*Client, *recorder, *syncBuffer) {
	t.Helper()
	rec := &recorder{}
	logs := &syncBuffer{}
	cfg := clientConfig(dir, rec.notify)
	cfg.Binary = binary
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("%v\nclient log:\n%s", err, logs)
	}
	t.Cleanup(func() { c.Detach(context.Background()) })
	return c, rec, logs
}

func exeOf(t *testing.T, pid int) string {
	t.Helper()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// upgradeUnits are started from binary A before each upgrade.
var upgradeUnits = map[string]string{
	"web.service":    ticker,
	"always.service": "[Service]\nExecStart=/bin/sh -c 'echo up; exec sleep 300'\nRestart=always\nRestartSec=100ms\n",
	"once.service":   "[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/true\n",
	"idle.service":   "[Service]\nExecStart=/bin/sleep 300\n",
	// Mostly waiting to restart: an upgrade finds it in auto-restart.
	"flaky.service": "[Service]\nExecStart=/bin/sh -c 'echo run; exit 1'\nRestart=always\nRestartSec=2s\n",
}

// restartCounter is the last restart counter flaky.service's log tells of.
func restartCounter(t *testing.T, dir string) int {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(dir, "logs", "flaky.service.log"))
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if _, after, ok := strings.Cut(line, "restart counter is at "); ok {
			fmt.Sscanf(after, "%d", &n)
		}
	}
	return n
}

// startUpgradeUnits starts the units from a client on binary a and
// returns their PIDs (0: none) and the supervisor's.
func startUpgradeUnits(t *testing.T, dir, a string) (map[string]int, int) {
	t.Helper()
	c, rec, _ := newClientFrom(t, dir, a)
	pids := map[string]int{}
	for name, text := range upgradeUnits {
		f := parseUnit(t, name, text)
		if name == "idle.service" {
			if err := c.Load(f); err != nil {
				t.Fatal(err)
			}
			continue
		}
		mustLoadStart(t, c, f)
	}
	for _, name := range []string{"web.service", "always.service"} {
		pids[name] = rec.activePID(t, name)
	}
	rec.wait(t, "once.service", "active/exited", func(st unit.Status) bool { return st.Active == "active" && st.Sub == "exited" })
	sup := supervisorPID(t, dir)
	if got := exeOf(t, sup); got != a {
		t.Fatalf("supervisor runs %s, want %s", got, a)
	}
	if err := c.Detach(context.Background()); err != nil {
		t.Fatal(err)
	}
	return pids, sup
}

// checkUnitsKept checks that the units run with the PIDs they had, and that
// web.service's log goes on.
func checkUnitsKept(t *testing.T, c *Client, pids map[string]int) {
	t.Helper()
	for name, pid := range pids {
		if st := stateOf(t, c, name); st.PID != pid || st.Active != "active" || !alive(pid) {
			t.Errorf("%s after the upgrade: %+v (alive %v), want active with pid %d", name, st, alive(pid), pid)
		}
	}
	if st := stateOf(t, c, "once.service"); st.Active != "active" || st.Sub != "exited" {
		t.Errorf("once.service after the upgrade: %+v, want active/exited", st)
	}
	if st := stateOf(t, c, "idle.service"); st.Active != "inactive" {
		t.Errorf("idle.service after the upgrade: %+v, want inactive", st)
	}
	ticks := strings.Count(journal(t, c, "web.service"), fmt.Sprintf("web.service[%d]: tick", pids["web.service"]))
	waitfor.True(t, waitTimeout, "web.service's log to go on after the upgrade", func() bool {
		return strings.Count(journal(t, c, "web.service"), fmt.Sprintf("web.service[%d]: tick", pids["web.service"])) > ticks+3
	})
}

// checkRestarted kills always.service's process and waits for the
// supervisor to start another.
func checkRestarted(t *testing.T, c *Client, rec *recorder, old int) int {
	t.Helper()
	syscall.Kill(old, syscall.SIGKILL)
	st := rec.wait(t, "always.service", "restarted", func(st unit.Status) bool {
		return st.Active == "active" && st.PID != 0 && st.PID != old
	})
	if !alive(st.PID) {
		t.Errorf("always.service restarted as pid %d, which is not alive", st.PID)
	}
	return st.PID
}

// TestUpgradeInPlace: a daemon on binary B adopting a supervisor started
// from binary A has it re-execute itself into B: the supervisor keeps its
// PID and runs B, every unit keeps its PID and its log goes on, and the
// new image runs the units (it restarts a Restart=always unit whose
// process is killed, and stops them).
func TestUpgradeInPlace(t *testing.T) {
	t.Parallel()
	dir := newTestDir(t)
	a, b := otherBinary(t, "flotilla-A"), otherBinary(t, "flotilla-B")
	pids, sup := startUpgradeUnits(t, dir, a)
	waitfor.True(t, waitTimeout, "flaky.service to restart", func() bool { return restartCounter(t, dir) >= 1 })
	counter := restartCounter(t, dir)

	c, rec, logs := newClientFrom(t, dir, b)
	if got := supervisorPID(t, dir); got != sup {
		t.Fatalf("supervisor pid %d, want %d kept", got, sup)
	}
	if got := exeOf(t, sup); got != b {
		t.Fatalf("supervisor %d runs %s after the upgrade, want %s\nclient log:\n%s", sup, got, b, logs)
	}
	if !strings.Contains(logs.String(), "the supervisor upgraded in place") {
		t.Errorf("the client does not say the supervisor upgraded:\n%s", logs)
	}
	checkUnitsKept(t, c, pids)
	if log := logTail(filepath.Join(dir, LogFile), 200); !strings.Contains(log, "upgraded in place: adopted the units of the previous binary") {
		t.Errorf("the supervisor's log does not tell of the upgrade:\n%s", log)
	}
	if _, err := os.Stat(filepath.Join(dir, HandoverFile)); err == nil {
		t.Errorf("%s left behind", HandoverFile)
	}

	// The restart counter goes on from where the old image left it.
	waitfor.True(t, waitTimeout, fmt.Sprintf("flaky.service's restart counter to reach %d", counter+1), func() bool { return restartCounter(t, dir) > counter })
	if b, _ := os.ReadFile(filepath.Join(dir, "logs", "flaky.service.log")); strings.Count(string(b), "restart counter is at 1.") != 1 {
		t.Errorf("flaky.service's restart counter began again across the upgrade:\n%s", b)
	}

	np := checkRestarted(t, c, rec, pids["always.service"])
	waitfor.True(t, waitTimeout, "always.service's log to tell of the restart by the new image", func() bool {
		log := journal(t, c, "always.service")
		return strings.Contains(log, fmt.Sprintf("always.service[%d]: up", np)) && strings.Contains(log, "Scheduled restart job, restart counter is at 1")
	})

	// A second upgrade, back to A, from the image that was itself adopted.
	c.Detach(context.Background())
	c2, _, logs2 := newClientFrom(t, dir, a)
	if got := exeOf(t, sup); got != a || supervisorPID(t, dir) != sup {
		t.Fatalf("after upgrading back: supervisor %d runs %s, want %s\nclient log:\n%s", supervisorPID(t, dir), got, a, logs2)
	}
	pids["always.service"] = np
	checkUnitsKept(t, c2, pids)

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := c2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for name, pid := range pids {
		if alive(pid) {
			t.Errorf("%s's pid %d outlived Close", name, pid)
		}
	}
	if !processGone(sup) {
		t.Errorf("supervisor %d runs after Close", sup)
	}
}

// TestUpgradeUnexecutable: a daemon whose binary cannot be executed (not
// an executable format; missing) leaves the supervisor on its binary with
// every unit as it was, and says why; a later daemon with a good binary
// upgrades it.
func TestUpgradeUnexecutable(t *testing.T) {
	t.Parallel()
	dir := newTestDir(t)
	a := otherBinary(t, "flotilla-A")
	pids, sup := startUpgradeUnits(t, dir, a)

	bad := filepath.Join(t.TempDir(), "flotilla-garbage")
	if err := os.WriteFile(bad, []byte("this is not a program\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	noExec := filepath.Join(t.TempDir(), "flotilla-noexec")
	if err := os.WriteFile(noExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "flotilla-missing")
	for _, tc := range []struct{ binary, what, why string }{
		{bad, "could not upgrade in place", "exec format error"}, // execve itself fails
		{noExec, "could not upgrade in place", "is not executable"},
		{missing, "cannot hash this binary", "no such file or directory"},
	} {
		c, rec, logs := newClientFrom(t, dir, tc.binary)
		if got := exeOf(t, sup); got != a || supervisorPID(t, dir) != sup {
			t.Fatalf("after a daemon on %s: supervisor %d runs %s, want %d on %s", tc.binary, supervisorPID(t, dir), got, sup, a)
		}
		if l := logs.String(); !strings.Contains(l, tc.what) || !strings.Contains(l, tc.why) {
			t.Errorf("the client on %s does not say why the upgrade failed (%q, %q):\n%s", tc.binary, tc.what, tc.why, l)
		}
		checkUnitsKept(t, c, pids)
		pids["always.service"] = checkRestarted(t, c, rec, pids["always.service"])
		c.Detach(context.Background())
	}

	b := otherBinary(t, "flotilla-B")
	c, _, logs := newClientFrom(t, dir, b)
	if got := exeOf(t, sup); got != b {
		t.Fatalf("a later daemon on a good binary: supervisor runs %s, want %s\n%s", got, b, logs)
	}
	checkUnitsKept(t, c, pids)
}

// cannotAdopt ends the name of a copy of the test binary that, run as the
// supervisor, cannot read a handover (runSupervisor).
const cannotAdopt = "-cannot-adopt"

// TestUpgradeAdoptFails: a new binary that executes but cannot read the
// handover kills nothing: it executes the previous binary again, which
// adopts the units; the supervisor keeps its PID and runs the old binary,
// every unit keeps its PID, and the daemon says the upgrade did not take.
func TestUpgradeAdoptFails(t *testing.T) {
	t.Parallel()
	dir := newTestDir(t)
	a := otherBinary(t, "flotilla-A")
	pids, sup := startUpgradeUnits(t, dir, a)

	// A, renamed once it runs, is the file the supervisor goes back to:
	// through the descriptor it kept, not its path.
	moved := a + ".moved"
	if err := os.Rename(a, moved); err != nil {
		t.Fatal(err)
	}
	c, rec, logs := newClientFrom(t, dir, otherBinary(t, "flotilla-C"+cannotAdopt))
	if got := exeOf(t, sup); got != moved || supervisorPID(t, dir) != sup {
		t.Fatalf("after a failed adoption: supervisor %d runs %s, want %d on %s\nclient log:\n%s", supervisorPID(t, dir), got, sup, moved, logs)
	}
	if !strings.Contains(logs.String(), "went back to its own") {
		t.Errorf("the client does not say the supervisor went back to its binary:\n%s", logs)
	}
	if log := logTail(filepath.Join(dir, LogFile), 200); !strings.Contains(log, "cannot adopt the units the previous binary handed over; going back to it") ||
		!strings.Contains(log, "this test binary reads no handover") {
		t.Errorf("the supervisor's log does not say why it went back:\n%s", log)
	}
	checkUnitsKept(t, c, pids)
	checkRestarted(t, c, rec, pids["always.service"])
}
