package execdriver

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/health"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// TestDriverRunsChecks: with Config.Checks the driver runs a unit's
// Exec= check as the unit's own processes run (its Environment= and
// WorkingDirectory=), as its own child, reports the health in the status,
// and with OnUnhealthy=restart restarts the unit once when it turns
// unhealthy (a new main process), keeping it unhealthy until its checks
// pass; a check that outlives Timeout= is killed and fails.
func TestDriverRunsChecks(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ok"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d, rec := newTestDriver(t, func(c *Config) { c.Checks = true })
	if !d.RunsChecks("web.service") {
		t.Fatal("RunsChecks is false with Config.Checks")
	}
	f := newUnit("web.service", []string{"/bin/sleep", "300"}, func(svc *unit.Service) {
		svc.Environment = []string{"MARK=ok"}
		svc.WorkingDirectory = dir
	})
	f.Check = &unit.Check{Exec: []unit.Command{sh(`test "$MARK" = ok && test -f ok`)}, Interval: 100 * time.Millisecond,
		Timeout: 100 * time.Millisecond, UnhealthyAfter: 2, OnUnhealthy: "restart"}
	slow := newUnit("slow.service", []string{"/bin/sleep", "300"}, nil)
	slow.Check = &unit.Check{Exec: []unit.Command{cmd("/bin/sleep", "10")}, Interval: 100 * time.Millisecond,
		Timeout: 100 * time.Millisecond, UnhealthyAfter: 1, OnUnhealthy: "none"}
	mustLoadStart(t, d, f)
	mustLoadStart(t, d, slow)
	first := rec.wait(t, "web.service", "active and healthy", func(st unit.Status) bool {
		return st.Active == "active" && st.Health == health.Healthy
	})
	rec.wait(t, "slow.service", "unhealthy at Timeout=", func(st unit.Status) bool { return st.Health == health.Unhealthy })
	waitLog(t, d, "slow.service", "killed: Timeout= passed")

	if err := os.Remove(filepath.Join(dir, "ok")); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "web.service", "stopping, unhealthy", func(st unit.Status) bool {
		return st.Active == "deactivating" && st.Health == health.Unhealthy
	})
	again := rec.wait(t, "web.service", "active again with a new process, unhealthy", func(st unit.Status) bool {
		return st.Active == "active" && st.PID != first.PID && st.Health == health.Unhealthy
	})
	waitLog(t, d, "web.service", "Restarting it (OnUnhealthy=restart).")
	// Once per turn: failing on, it is not restarted again.
	waitfor.Never(t, time.Second, "web.service restarted again", func() bool {
		for _, st := range d.States() {
			if st.Name == "web.service" && st.PID != again.PID {
				return true
			}
		}
		return false
	})
	if err := os.WriteFile(filepath.Join(dir, "ok"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "web.service", "healthy again", func(st unit.Status) bool {
		return st.PID == again.PID && st.Health == health.Healthy
	})
	// Stopped: no health, no checks.
	if err := d.Stop("web.service"); err != nil {
		t.Fatal(err)
	}
	st := rec.waitEnded(t, "web.service", "inactive")
	if st.Health != "" {
		t.Errorf("stopped: health %q, want none", st.Health)
	}
	if log := journal(t, d, "web.service"); strings.Count(log, "Restarting it") != 1 {
		t.Errorf("the log tells of %d restarts, want 1:\n%s", strings.Count(log, "Restarting it"), log)
	}
}

// TestRunProbeBesideReaper: probes run as the driver's own children report
// their own exit status and output while orphan-reaping passes run all
// along, which must leave them to their waits.
func TestRunProbeBesideReaper(t *testing.T) {
	d, _ := newTestDriver(t, nil)
	stop, reaping := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(reaping)
		for {
			select {
			case <-stop:
				return
			default:
				d.ReapOrphans()
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Go(func() {
			x := &exec.Cmd{Path: "/bin/sh", Args: []string{"sh", "-c", fmt.Sprintf("echo out%d; exit %d", i, i%4)},
				SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
			var out bytes.Buffer
			x.Stdout = &out
			got, want := "", ""
			if err := d.runProbe(t.Context(), x); err != nil {
				got = err.Error()
			}
			if i%4 != 0 {
				want = fmt.Sprintf("exit status %d", i%4)
			}
			if got != want || out.String() != fmt.Sprintf("out%d\n", i) {
				errs <- fmt.Errorf("probe %d: %q, output %q; want %q", i, got, out.String(), want)
			}
		})
	}
	wg.Wait()
	close(stop)
	<-reaping
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
