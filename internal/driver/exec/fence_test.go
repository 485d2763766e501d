package execdriver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/driver/service"
	"github.com/flotilla/flotilla/internal/monotime"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// TestFence: units in the fence are SIGKILLed, every process group, when
// the deadline passes, on the driver's own timer; they stay loaded,
// inactive/dead with Result "fenced", are not restarted, and cannot start
// again until a later Fence moves the deadline on. Units outside it run on.
func TestFence(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	dir := t.TempDir()
	child := filepath.Join(dir, "child.pid")
	// KillMode=process and a background child: a fence kills the whole group anyway.
	single := newUnit("single.service", []string{"/bin/sh", "-c", "sleep 60 & echo $! > " + child + "; exec sleep 60"}, func(s *unit.Service) {
		s.KillMode = "process"
		s.Restart = "always"
		s.ExecStopPost = []unit.Command{sh("touch " + filepath.Join(dir, "stop-post-ran"))}
	})
	other := newUnit("other.service", []string{"/bin/sleep", "60"}, nil)
	mustLoadStart(t, d, single)
	mustLoadStart(t, d, other)
	main := rec.waitState(t, "single.service", "active", "running").PID
	otherPID := rec.waitState(t, "other.service", "active", "running").PID
	childPID := readPid(t, child)
	defer killGroup(main)

	deadline := monotime.Now().Add(300 * time.Millisecond)
	if err := d.Fence(deadline, []string{"single.service", "never-loaded.service"}); err != nil {
		t.Fatal(err)
	}
	st := rec.wait(t, "single.service", "fenced", func(st unit.Status) bool { return st.Result == "fenced" })
	if late := monotime.Since(deadline); late < 0 || late > 2*time.Second {
		t.Errorf("fenced %v after the deadline, want within 2s and not before", late)
	}
	if st.Active != "inactive" || st.Sub != "dead" || st.Message != service.FencedMessage || st.Load != "loaded" {
		t.Errorf("fenced status %+v, want loaded inactive/dead with message %q", st, service.FencedMessage)
	}
	waitGone(t, main, "the fenced main process")
	waitGone(t, childPID, "the fenced unit's background child")
	if !alive(otherPID) {
		t.Errorf("a unit outside the fence was killed")
	}
	// RestartSec= is 100ms: no restart may follow.
	waitfor.Holds(t, 300*time.Millisecond, "single.service loaded and inactive after the fence", func() error {
		if got := d.States(); len(got) != 2 || got[1].Name != "single.service" || got[1].Active != "inactive" {
			return fmt.Errorf("States = %+v", got)
		}
		return nil
	})
	if fileExists(filepath.Join(dir, "stop-post-ran")) {
		t.Error("ExecStopPost= ran for a fenced unit")
	}
	if err := d.Start("single.service"); !errors.Is(err, ErrFenced) {
		t.Errorf("Start of a fenced unit: %v, want ErrFenced", err)
	}

	// A later Fence moves the deadline on: the unit may run again.
	if err := d.Fence(monotime.Now().Add(time.Hour), []string{"single.service"}); err != nil {
		t.Fatal(err)
	}
	if err := d.Start("single.service"); err != nil {
		t.Fatalf("Start after the deadline moved on: %v", err)
	}
	again := rec.waitState(t, "single.service", "active", "running")
	defer killGroup(again.PID)
	if again.Result == "fenced" || again.Message != "" {
		t.Errorf("restarted unit still says %q / %q", again.Result, again.Message)
	}

	// A deadline already passed kills at once.
	if err := d.Fence(monotime.Now().Add(-time.Second), []string{"single.service"}); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "single.service", "fenced again", func(st unit.Status) bool { return st.Result == "fenced" })
	waitGone(t, again.PID, "the unit fenced with a past deadline")

	// Clearing the fence lets it start; the timer of a replaced fence does nothing.
	if err := d.Fence(monotime.Now().Add(200*time.Millisecond), []string{"single.service"}); err != nil {
		t.Fatal(err)
	}
	if err := d.Fence(0, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.Start("single.service"); err != nil {
		t.Fatalf("Start after the fence was cleared: %v", err)
	}
	third := rec.waitState(t, "single.service", "active", "running")
	defer killGroup(third.PID)
	// Past the replaced fence's deadline (200ms) and then some.
	waitfor.Never(t, 400*time.Millisecond, "a replaced fence's timer killing the unit", func() bool { return !alive(third.PID) })
	if err := d.Fence(0, []string{"bad/name"}); err == nil {
		t.Error("Fence accepted a name that cannot be a unit")
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
