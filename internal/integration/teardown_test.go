package integration

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/waitfor"
)

// startDev runs flotilla dev on a data dir of its own (with extra flags)
// and waits until it serves; the cleanup stops it and its supervisor.
func startDev(t *testing.T, extra ...string) *node {
	t.Helper()
	nd := &node{name: "dev", dir: t.TempDir(), api: freeAddr(t)}
	nd.args = append([]string{"dev", "--data-dir", nd.dir, "--api-addr", nd.api, "--log-level", "debug"}, extra...)
	nd.start(t)
	t.Cleanup(func() {
		nd.shutdown(t)
		if t.Failed() {
			t.Logf("---- log of dev ----\n%s", tail(nd.log.String(), 80))
		}
	})
	waitfor.Until(t, 30*time.Second, "dev serves", func() error { _, err := leaderOf(t, nd); return err })
	return nd
}

// TestDevInUse: a second flotilla dev on the data dir of a running one
// is refused at once, naming the first's pid, instead of failing on etcd's
// port; a listener in use exits 1 naming its flag and address.
func TestDevInUse(t *testing.T) {
	nd := startDev(t)
	code, out := flotillaExit(t, nil, "dev", "--data-dir", nd.dir, "--api-addr", freeAddr(t))
	want := fmt.Sprintf("data dir %s is in use by another flotilla daemon or dev (pid %d)", nd.dir, nd.cmd.Process.Pid)
	if code != 1 || !strings.Contains(out, want) {
		t.Errorf("a second dev on %s: exit %d:\n%s\nwant exit 1 and %q", nd.dir, code, out, want)
	}
	code, out = flotillaExit(t, nil, "dev", "--data-dir", t.TempDir(), "--api-addr", nd.api)
	want = fmt.Sprintf("--api-addr %s: address already in use", nd.api)
	if code != 1 || !strings.Contains(out, want) {
		t.Errorf("dev on the API address of another: exit %d:\n%s\nwant exit 1 and %q", code, out, want)
	}
	if !nd.running() {
		t.Fatal("the first dev ended")
	}
}

// supervisorPID is the pid in the supervisor's pid file of a data dir
// (0 when there is none).
func supervisorPID(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "units", "supervisor.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// runSleeper starts web.service on nd and returns its pid.
func runSleeper(t *testing.T, nd *node) int {
	t.Helper()
	mustCLI(t, nd, "start", writeUnit(t, t.TempDir(), "web.service", fmt.Sprintf(sleeper, "web", "web")))
	st, err := unitStates(t, nd)
	if err != nil || st["web.service"].PID == 0 {
		t.Fatalf("web.service: %+v, %v", st["web.service"], err)
	}
	return st["web.service"].PID
}

func waitGone(t *testing.T, what string, pid int, within time.Duration) {
	t.Helper()
	waitfor.Until(t, within, what+" ends", func() error {
		if alive(pid) {
			return fmt.Errorf("pid %d still runs", pid)
		}
		return nil
	})
}

// TestDevStopUnitsOnExit: flotilla dev --stop-units-on-exit stops its units
// and its supervisor when it is stopped (Ctrl-C).
func TestDevStopUnitsOnExit(t *testing.T) {
	nd := startDev(t, "--stop-units-on-exit")
	pid := runSleeper(t, nd)
	sup := supervisorPID(nd.dir)
	nd.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-nd.done:
	case <-time.After(60 * time.Second):
		t.Fatal("dev did not end within 60s of SIGINT")
	}
	if alive(pid) || sup == 0 || alive(sup) {
		t.Errorf("after dev --stop-units-on-exit ended: web.service pid %d alive %v, supervisor pid %d alive %v; want both gone", pid, alive(pid), sup, alive(sup))
	}
	if log := nd.log.String(); !strings.Contains(log, "--stop-units-on-exit: units stopped") {
		t.Errorf("dev's log does not say its units stopped:\n%s", tail(log, 20))
	}
}

// TestSupervisorStop: a dev stopped without --stop-units-on-exit says what
// keeps running and how to stop it; flotilla supervisor stop refuses while
// dev runs, then stops the units and the supervisor.
func TestSupervisorStop(t *testing.T) {
	nd := startDev(t)
	pid := runSleeper(t, nd)
	sup := supervisorPID(nd.dir)
	code, out := flotillaExit(t, nil, "supervisor", "stop", "--data-dir", nd.dir)
	if want := fmt.Sprintf("flotilla daemon or dev (pid %d) runs on data dir %s", nd.cmd.Process.Pid, nd.dir); code != 1 || !strings.Contains(out, want) {
		t.Errorf("supervisor stop while dev runs: exit %d:\n%s\nwant exit 1 and %q", code, out, want)
	}
	if !alive(pid) {
		t.Fatal("web.service died")
	}
	nd.stop(t)
	want := fmt.Sprintf("1 unit keeps running under the supervisor (pid %d); a daemon restarted on this data dir adopts them, and `flotilla supervisor stop --data-dir %s` stops them and it", sup, nd.dir)
	if log := nd.log.String(); !strings.Contains(log, want) {
		t.Errorf("dev's log at exit lacks %q:\n%s", want, tail(log, 20))
	}
	if !alive(pid) || !alive(sup) {
		t.Fatalf("after dev ended: web.service alive %v, supervisor alive %v; want both running", alive(pid), alive(sup))
	}
	code, out = flotillaExit(t, nil, "supervisor", "stop", "--data-dir", nd.dir)
	if want := fmt.Sprintf("Stopped 1 unit (1 running) and the supervisor (pid %d) of %s.", sup, nd.dir); code != 0 || !strings.Contains(out, want) {
		t.Errorf("supervisor stop: exit %d:\n%s\nwant exit 0 and %q", code, out, want)
	}
	if alive(pid) || alive(sup) {
		t.Errorf("after supervisor stop: web.service alive %v, supervisor alive %v", alive(pid), alive(sup))
	}
	code, out = flotillaExit(t, nil, "supervisor", "stop", "--data-dir", nd.dir)
	if code != 0 || !strings.Contains(out, "No supervisor runs for "+nd.dir) {
		t.Errorf("supervisor stop again: exit %d:\n%s", code, out)
	}
}

// TestSupervisorEndsByItself: a supervisor whose data dir is removed stops
// its units and exits; one with no units and no daemon exits after
// --idle-exit.
func TestSupervisorEndsByItself(t *testing.T) {
	nd := startDev(t)
	pid := runSleeper(t, nd)
	sup := supervisorPID(nd.dir)
	t.Cleanup(func() { // nothing of this test outlives it, even if it fails
		syscall.Kill(sup, syscall.SIGTERM)
		syscall.Kill(pid, syscall.SIGKILL)
	})
	nd.stop(t)
	if err := os.RemoveAll(nd.dir); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "the supervisor of a removed data dir", sup, 30*time.Second)
	if alive(pid) {
		t.Errorf("web.service (pid %d) outlived its supervisor", pid)
	}

	dir := t.TempDir()
	cmd := exec.Command(flotillaBin, "supervisor", "--dir", dir, "--idle-exit", "2s")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil || !strings.Contains(out.String(), "no units and no daemon connected; exiting") || time.Since(start) < 2*time.Second {
			t.Errorf("an idle supervisor ended after %v: %v\n%s", time.Since(start), err, out.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Errorf("an idle supervisor with --idle-exit 2s still runs after 30s:\n%s", out.String())
	}
}
