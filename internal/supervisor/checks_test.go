package supervisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/flotilla/flotilla/internal/health"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// checkedUnit is a unit that writes its pid to pidFile, with an Exec=
// check that passes while flag exists, and OnUnhealthy=restart.
func checkedUnit(pidFile, flag string) string {
	return fmt.Sprintf("[Service]\nExecStart=/bin/sh -c 'echo $$$$ > %s; exec /bin/sleep 300'\n\n"+
		"[X-Check]\nExec=/usr/bin/test -f %s\nInterval=200ms\nTimeout=200ms\nUnhealthyAfter=2\nOnUnhealthy=restart\n", pidFile, flag)
}

// TestChecksWithDaemonKilled: a unit's [X-Check] runs in the supervisor,
// so with its daemon SIGKILLed a unit whose check turns failing is still
// restarted (OnUnhealthy=restart: a new main process in /proc, the old one
// gone), and the next daemon's client has the unit's health in the first
// status it reports, without waiting for a run of the checks.
func TestChecksWithDaemonKilled(t *testing.T) {
	t.Parallel()
	dir := newTestDir(t)
	tmp := t.TempDir()
	pidFile, flag := filepath.Join(tmp, "pid"), filepath.Join(tmp, "ok")
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	helper, _ := startHelper(t, dir, checkedUnit(pidFile, flag), "")
	old := pidIn(t, pidFile)
	waitfor.True(t, waitTimeout, "helper.service healthy", func() bool {
		return strings.Contains(readLog(dir, "helper.service"), "Started ") &&
			healthyLines(dir) >= 1
	})
	helper.Process.Kill()
	helper.Wait()

	// No daemon: the check turns failing, the supervisor restarts the unit.
	if err := os.Remove(flag); err != nil {
		t.Fatal(err)
	}
	var pid int
	waitfor.True(t, waitTimeout, "helper.service restarted with a new process", func() bool {
		b, _ := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return pid > 0 && pid != old && alive(pid) && !alive(old)
	})
	if log := readLog(dir, "helper.service"); !strings.Contains(log, "Restarting it (OnUnhealthy=restart)") {
		t.Errorf("the unit's log does not tell of the restart:\n%s", log)
	}
	// Once per turn: it stays unhealthy, and is not restarted again,
	// until its checks pass; then it is healthy.
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, waitTimeout, "helper.service healthy again", func() bool {
		return healthyLines(dir) >= 2
	})
	if b, _ := os.ReadFile(pidFile); strings.TrimSpace(string(b)) != strconv.Itoa(pid) {
		t.Fatalf("helper.service restarted again (pid %s, want %d): once per turn", b, pid)
	}

	// A new daemon hears the health with the unit's first status.
	c, rec := newClient(t, dir)
	st := stateOf(t, c, "helper.service")
	if st.Active != "active" || st.PID != pid || st.Health != health.Healthy {
		t.Fatalf("adopted status %+v, want active, pid %d, healthy", st, pid)
	}
	if !c.RunsChecks("helper.service") {
		t.Error("the client says the supervisor does not run the checks")
	}
	first := rec.wait(t, "helper.service", "reported", func(unit.Status) bool { return true })
	if first.Health != health.Healthy {
		t.Errorf("first status reported to the new daemon: %+v, want healthy at once", first)
	}
}

// healthyLines counts the supervisor's log lines that say helper.service
// turned healthy.
func healthyLines(dir string) int {
	b, _ := os.ReadFile(filepath.Join(dir, LogFile))
	n := 0
	for l := range strings.Lines(string(b)) {
		if strings.Contains(l, `msg="unit health"`) && strings.Contains(l, "unit=helper.service health=healthy") {
			n++
		}
	}
	return n
}

// TestChecksAcrossUpgrade: an upgrade in place hands the checks over with
// the health they reached: the new image reports it at once and goes on
// checking (a failing check restarts the unit).
func TestChecksAcrossUpgrade(t *testing.T) {
	t.Parallel()
	dir := newTestDir(t)
	tmp := t.TempDir()
	pidFile, flag := filepath.Join(tmp, "pid"), filepath.Join(tmp, "ok")
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a, b := otherBinary(t, "flotilla-A"), otherBinary(t, "flotilla-B")
	c1, rec1, _ := newClientFrom(t, dir, a)
	mustLoadStart(t, c1, parseUnit(t, "checked.service", checkedUnit(pidFile, flag)))
	rec1.wait(t, "checked.service", "healthy", func(st unit.Status) bool { return st.Health == health.Healthy })
	old := pidIn(t, pidFile)
	sup := supervisorPID(t, dir)
	c1.Detach(context.Background())

	c2, rec2, logs := newClientFrom(t, dir, b)
	if got := exeOf(t, sup); got != b || supervisorPID(t, dir) != sup {
		t.Fatalf("supervisor %d runs %s, want %d upgraded in place to %s\nclient log:\n%s", supervisorPID(t, dir), got, sup, b, logs)
	}
	if st := stateOf(t, c2, "checked.service"); st.PID != old || st.Health != health.Healthy {
		t.Fatalf("after the upgrade: %+v, want pid %d, healthy", st, old)
	}
	if first := rec2.wait(t, "checked.service", "reported", func(unit.Status) bool { return true }); first.Health != health.Healthy {
		t.Errorf("first status after the upgrade: %+v, want healthy", first)
	}
	if err := os.Remove(flag); err != nil {
		t.Fatal(err)
	}
	rec2.wait(t, "checked.service", "unhealthy", func(st unit.Status) bool { return st.Health == health.Unhealthy })
	waitfor.True(t, waitTimeout, "checked.service restarted by the new image", func() bool {
		b, _ := os.ReadFile(pidFile)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return pid > 0 && pid != old && alive(pid) && !alive(old)
	})
}
