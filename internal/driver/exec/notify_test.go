package execdriver

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// notifyHelperVar, in the environment, makes the test binary a unit's
// process speaking sd_notify (notifyHelper) instead of running the tests.
const notifyHelperVar = "FLOTILLA_TEST_NOTIFY_HELPER"

func TestMain(m *testing.M) {
	if dir := os.Getenv(notifyHelperVar); dir != "" {
		notifyHelper(dir)
		return
	}
	os.Exit(m.Run())
}

// notifyHelper is a Type=notify service whose test owns dir: it writes its
// PID and sd_notify environment to dir/env, sends READY=1 (with STATUS=)
// once dir/go exists, and with WATCHDOG_USEC pings every quarter of it,
// counting its pings in dir/pings, until dir/stop-pinging exists. With
// dir/exit-early it exits 0 at once, never ready.
func notifyHelper(dir string) {
	exists := func(name string) bool { _, err := os.Stat(filepath.Join(dir, name)); return err == nil }
	env := fmt.Sprintf("PID=%d\nNOTIFY_SOCKET=%s\nWATCHDOG_USEC=%s\nWATCHDOG_PID=%s\n",
		os.Getpid(), os.Getenv("NOTIFY_SOCKET"), os.Getenv("WATCHDOG_USEC"), os.Getenv("WATCHDOG_PID"))
	os.WriteFile(filepath.Join(dir, "env.tmp"), []byte(env), 0o644)
	os.Rename(filepath.Join(dir, "env.tmp"), filepath.Join(dir, "env"))
	if exists("exit-early") {
		os.Exit(0)
	}
	for !exists("go") {
		time.Sleep(5 * time.Millisecond)
	}
	if ok, err := daemon.SdNotify(false, "READY=1\nSTATUS=serving"); !ok || err != nil {
		fmt.Fprintf(os.Stderr, "SdNotify: %v %v\n", ok, err)
		os.Exit(3)
	}
	every, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "SdWatchdogEnabled:", err)
		os.Exit(3)
	}
	for n := 1; every > 0 && !exists("stop-pinging"); n++ {
		daemon.SdNotify(false, daemon.SdNotifyWatchdog)
		os.WriteFile(filepath.Join(dir, "pings"), []byte(strconv.Itoa(n)), 0o644)
		time.Sleep(every / 4)
	}
	select {}
}

// helperUnit is a unit running notifyHelper over a new directory.
func helperUnit(t *testing.T, name string, edit func(*unit.Service)) (*unit.File, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	return newUnit(name, []string{exe}, func(s *unit.Service) {
		s.Type = "notify"
		s.Environment = []string{notifyHelperVar + "=" + dir}
		if edit != nil {
			edit(s)
		}
	}), dir
}

// helperEnv waits for what notifyHelper wrote to dir/env.
func helperEnv(t *testing.T, dir string) map[string]string {
	t.Helper()
	var data []byte
	waitfor.True(t, waitTimeout, "the helper's environment", func() bool {
		var err error
		data, err = os.ReadFile(filepath.Join(dir, "env"))
		return err == nil
	})
	env := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	return env
}

func touch(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestNotifyReady(t *testing.T) {
	d, rec := newTestDriver(t, nil)
	f, dir := helperUnit(t, "ready.service", func(s *unit.Service) {
		s.ExecStartPost = []unit.Command{sh("echo post-after-ready")}
	})
	mustLoadStart(t, d, f)
	st := rec.waitState(t, f.Name, "activating", "start")
	env := helperEnv(t, dir)
	if !strings.HasPrefix(env["NOTIFY_SOCKET"], "@flotilla/notify/") || env["WATCHDOG_USEC"] != "" || env["WATCHDOG_PID"] != "" {
		t.Errorf("environment %q: want NOTIFY_SOCKET=@flotilla/notify/…, no watchdog", env)
	}
	if strconv.Itoa(st.PID) != env["PID"] && st.PID != 0 {
		t.Errorf("status PID %d, the helper's %s", st.PID, env["PID"])
	}
	// Not ready, so not active, however long it runs: the first status
	// after READY=1 is the next one.
	if got := d.States()[0]; got.Active != "activating" {
		t.Errorf("before READY=1: %s/%s", got.Active, got.Sub)
	}
	touch(t, dir, "go")
	st = rec.wait(t, f.Name, "the status after READY=1", func(st unit.Status) bool { return st.Sub != "start" })
	if st.Sub == "start-post" {
		st = rec.wait(t, f.Name, "running", func(st unit.Status) bool { return st.Sub != "start-post" })
	}
	if st.Active != "active" || st.Sub != "running" || st.Message != "serving" {
		t.Fatalf("after READY=1: %s/%s message %q, want active/running \"serving\"\n%s", st.Active, st.Sub, st.Message, rec.history(f.Name))
	}
	log := journal(t, d, f.Name)
	if i, j := strings.Index(log, "post-after-ready"), strings.Index(log, "Started "); i < 0 || j < i {
		t.Errorf("ExecStartPost= should run after READY=1, before Started:\n%s", log)
	}
}

func TestNotifyExitBeforeReady(t *testing.T) {
	d, rec := newTestDriver(t, nil)
	f, dir := helperUnit(t, "early.service", nil)
	touch(t, dir, "exit-early")
	mustLoadStart(t, d, f)
	st := rec.waitEnded(t, f.Name, "failed")
	if st.Result != "protocol" || !strings.Contains(st.Message, "before READY=1") {
		t.Errorf("result %q message %q, want protocol, exited before READY=1", st.Result, st.Message)
	}
}

func TestNotifyStartTimeout(t *testing.T) {
	d, rec := newTestDriver(t, nil)
	f, _ := helperUnit(t, "slow.service", func(s *unit.Service) { s.TimeoutStartSec = 300 * time.Millisecond })
	mustLoadStart(t, d, f)
	st := rec.waitEnded(t, f.Name, "failed")
	if st.Result != "timeout" {
		t.Errorf("result %q, want timeout (never ready)\n%s", st.Result, rec.history(f.Name))
	}
	for _, s := range rec.states(f.Name) {
		if strings.HasPrefix(s, "active/") {
			t.Errorf("a unit never ready was %s", s)
		}
	}
}

// A process other than the main one is heard only with NotifyAccess=all.
// systemd-notify sends with its parent's PID (as root it may), so it runs
// in a subshell: the parent is then not the main process.
func TestNotifyAccess(t *testing.T) {
	notify := "/usr/bin/systemd-notify"
	if _, err := os.Stat(notify); err != nil {
		t.Skip("no systemd-notify")
	}
	var logs syncBuffer
	d, rec := newTestDriver(t, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	script := "(" + notify + " --ready --status=up; true); exec sleep 600"
	all := newUnit("all.service", []string{"/bin/sh", "-c", script}, func(s *unit.Service) {
		s.Type, s.NotifyAccess = "notify", "all"
	})
	mustLoadStart(t, d, all)
	if st := rec.waitState(t, all.Name, "active", "running"); st.Message != "up" {
		t.Errorf("message %q, want STATUS= up", st.Message)
	}

	mainOnly := newUnit("main.service", []string{"/bin/sh", "-c", script}, func(s *unit.Service) { s.Type = "notify" })
	mustLoadStart(t, d, mainOnly)
	waitfor.True(t, waitTimeout, "the refusal of a child's READY=1 in the log", func() bool {
		return strings.Contains(logs.String(), "sd_notify message refused by NotifyAccess=") && strings.Contains(logs.String(), "unit=main.service")
	})
	if st := d.States(); st[1].Name != mainOnly.Name || st[1].Active != "activating" || st[1].Sub != "start" {
		t.Errorf("NotifyAccess=main, READY=1 from a child: %+v, want activating/start", st[1])
	}
}

func TestWatchdog(t *testing.T) {
	d, rec := newTestDriver(t, nil)
	const limit = 400 * time.Millisecond
	f, dir := helperUnit(t, "dog.service", func(s *unit.Service) {
		s.WatchdogSec = limit
		s.Restart = "on-watchdog"
		s.RestartSec = time.Hour // one restart is enough to see
	})
	touch(t, dir, "go")
	mustLoadStart(t, d, f)
	st := rec.waitState(t, f.Name, "active", "running")
	env := helperEnv(t, dir)
	if env["WATCHDOG_USEC"] != "400000" || env["WATCHDOG_PID"] != strconv.Itoa(st.PID) || env["PID"] != strconv.Itoa(st.PID) {
		t.Errorf("environment %q, want WATCHDOG_USEC=400000 and WATCHDOG_PID the main PID %d", env, st.PID)
	}
	// Pinged, it lives well past the limit.
	waitfor.True(t, waitTimeout, "a dozen pings", func() bool {
		n, _ := strconv.Atoi(readFile(filepath.Join(dir, "pings")))
		return n >= 12 // three limits' worth
	})
	if got := d.States()[0]; got.Active != "active" || got.PID != st.PID {
		t.Fatalf("a pinging unit: %+v\n%s", got, rec.history(f.Name))
	}
	touch(t, dir, "stop-pinging")
	rec.waitState(t, f.Name, "deactivating", "stop-watchdog")
	st = rec.waitState(t, f.Name, "activating", "auto-restart")
	if st.Result != "watchdog" || !strings.Contains(st.Message, "no WATCHDOG=1 within 400ms") {
		t.Errorf("result %q message %q, want watchdog", st.Result, st.Message)
	}
	waitLog(t, d, f.Name, "Watchdog timeout (limit 400ms)!")
}

// The watchdog kills with SIGABRT, seen from the process's side.
func TestWatchdogSIGABRT(t *testing.T) {
	notify := "/usr/bin/systemd-notify"
	if _, err := os.Stat(notify); err != nil {
		t.Skip("no systemd-notify")
	}
	d, rec := newTestDriver(t, nil)
	out := filepath.Join(t.TempDir(), "signal")
	script := notify + " --ready; trap 'echo ABRT > " + out + "; exit 1' ABRT; while :; do sleep 0.05; done"
	f := newUnit("abrt.service", []string{"/bin/sh", "-c", script}, func(s *unit.Service) {
		s.Type, s.NotifyAccess, s.WatchdogSec, s.KillMode = "notify", "all", 300*time.Millisecond, "process" // SIGABRT to the shell alone: no core dumps of sleep
	})
	mustLoadStart(t, d, f)
	rec.waitState(t, f.Name, "active", "running")
	st := rec.waitEnded(t, f.Name, "failed")
	if st.Result != "watchdog" {
		t.Errorf("result %q, want watchdog", st.Result)
	}
	if got := strings.TrimSpace(readFile(out)); got != "ABRT" {
		t.Errorf("the main process got %q, want SIGABRT", got)
	}
}

// A main process that sends READY=1 and exits at once is seen ready, its
// message read before its exit is acted on (as systemd does): with
// RemainAfterExit=yes it is active/exited, not failed with protocol.
func TestNotifyReadyThenExit(t *testing.T) {
	notify := "/usr/bin/systemd-notify"
	if _, err := os.Stat(notify); err != nil {
		t.Skip("no systemd-notify")
	}
	d, rec := newTestDriver(t, nil)
	d.notifyLag = 200 * time.Millisecond // the exit comes first unless the driver waits for the message
	for i := range 3 {
		// --no-block: no BARRIER=1, which would wait for the driver to
		// read the message.
		f := newUnit(fmt.Sprintf("quick%d.service", i), []string{"/bin/sh", "-c", notify + " --no-block --ready --status=done; exit 0"}, func(s *unit.Service) {
			s.Type, s.RemainAfterExit = "notify", true
		})
		mustLoadStart(t, d, f)
		st := rec.wait(t, f.Name, "settled", func(st unit.Status) bool { return st.Active == "active" && st.Sub == "exited" || st.Active == "failed" })
		if st.Active != "active" || st.Sub != "exited" {
			t.Fatalf("%s: %s/%s result %q message %q, want active/exited\n%s", f.Name, st.Active, st.Sub, st.Result, st.Message, rec.history(f.Name))
		}
	}
}

// A main process that sends READY=1 before the driver has finished
// starting it (its start has not returned) is heard.
func TestNotifyBeforeWatched(t *testing.T) {
	d, rec := newTestDriver(t, nil)
	d.spawnLag = 300 * time.Millisecond
	f, dir := helperUnit(t, "eager.service", nil)
	touch(t, dir, "go") // READY=1 as soon as it runs
	mustLoadStart(t, d, f)
	if st := rec.wait(t, f.Name, "active or failed", func(st unit.Status) bool { return st.Active == "active" || st.Active == "failed" }); st.Active != "active" {
		t.Fatalf("%s/%s %q, want active", st.Active, st.Sub, st.Message)
	}
}
