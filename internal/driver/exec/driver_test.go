package execdriver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/driver"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		cfg  Config
		want string // in the error; "" for none
	}{
		{Config{}, "Dir is required"},
		{Config{Dir: "/tmp/x", MaxLogBytes: 100}, "MaxLogBytes 100 is below the minimum"},
		{Config{Dir: "/tmp/x", MaxLogBytes: -1}, "MaxLogBytes -1"},
		{Config{Dir: "/tmp/x", CgroupParent: "rel"}, `CgroupParent "rel" is not an absolute path`},
		{Config{Dir: "/tmp/x", CgroupParent: "/"}, `CgroupParent "/" is not an absolute path below`},
		{Config{Dir: "/tmp/x", CgroupRoot: "sys"}, `CgroupRoot "sys" is not an absolute path`},
		{Config{Dir: "/tmp/x"}, ""},
	}
	for _, tt := range tests {
		err := tt.cfg.validate()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("validate(%+v) = %v, want an error with %q", tt.cfg, err, tt.want)
		}
	}
	cfg := Config{Dir: "/tmp/x"}
	cfg.validate()
	if cfg.MaxLogBytes != DefaultMaxLogBytes || cfg.Logger == nil || cfg.Notify == nil || cfg.CgroupRoot != "/sys/fs/cgroup" || !strings.HasPrefix(cfg.CgroupParent, "/flotilla.slice/exec-") {
		t.Errorf("defaults not filled: %+v", cfg)
	}
}

func TestNewLocksDir(t *testing.T) {
	d, _ := newTestDriver(t, nil)
	_, err := New(Config{Dir: d.cfg.Dir})
	if err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second New on the same Dir: %v, want an in-use error", err)
	}
}

func TestLoadRejects(t *testing.T) {
	d, _ := newTestDriver(t, nil)
	tests := []struct {
		f    *unit.File
		want string
	}{
		{newUnit("a/b.service", []string{"/bin/true"}, nil), "cannot be used as a file name"},
		{newUnit("none.service", nil, nil), "exactly one ExecStart="},
		{newUnit("fork.service", []string{"/bin/true"}, func(s *unit.Service) { s.Type = "forking" }), "Type=forking is not supported"},
		{newUnit("sig.service", []string{"/bin/true"}, func(s *unit.Service) { s.KillSignal = "SIGNOPE" }), "KillSignal="},
		{newUnit("restart.service", []string{"/bin/true"}, func(s *unit.Service) { s.Restart = "sometimes" }), "Restart=sometimes"},
		{newUnit("empty.service", []string{}, nil), "empty command line"},
	}
	for _, tt := range tests {
		err := d.Load(tt.f)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.f.Name) {
			t.Errorf("Load(%s) = %v, want an error naming the unit with %q", tt.f.Name, err, tt.want)
		}
	}
	if err := d.Load(nil); err == nil {
		t.Error("Load(nil) = nil")
	}
	if got := d.States(); len(got) != 0 {
		t.Errorf("States after rejected loads = %v, want none", got)
	}
}

func TestUnknownUnit(t *testing.T) {
	d, _ := newTestDriver(t, nil)
	for name, err := range map[string]error{
		"Start":   d.Start("x.service"),
		"Stop":    d.Stop("x.service"),
		"Unload":  d.Unload(context.Background(), "x.service"),
		"Journal": d.Journal(context.Background(), "x.service", 10, false, &bytes.Buffer{}),
	} {
		if !errors.Is(err, driver.ErrUnknownUnit) || !strings.Contains(err.Error(), "x.service") {
			t.Errorf("%s(unknown) = %v, want ErrUnknownUnit naming the unit", name, err)
		}
	}
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	dir := t.TempDir()
	child := filepath.Join(dir, "child")
	f := newUnit("web.service", nil, func(s *unit.Service) {
		s.ExecStart = []unit.Command{sh("sleep 300 & echo $! > " + child + "; echo hello from web; exec sleep 301")}
	})
	f.Description = "Web server"
	if err := d.Load(f); err != nil {
		t.Fatal(err)
	}
	st := rec.waitState(t, "web.service", "inactive", "dead")
	if st.Hash != f.Hash || st.Load != "loaded" || st.Machine != "m1" || st.PID != 0 || st.Since.IsZero() {
		t.Errorf("loaded status = %+v", st)
	}
	if err := d.Start("web.service"); err != nil {
		t.Fatal(err)
	}
	st = rec.waitState(t, "web.service", "active", "running")
	if st.PID <= 0 || !alive(st.PID) {
		t.Fatalf("running status has PID %d, not a live process", st.PID)
	}
	grandchild := readPid(t, child)
	if pgrp, err := syscall.Getpgid(grandchild); err != nil || pgrp != st.PID {
		t.Errorf("grandchild %d is in process group %d (%v), want the main pid %d", grandchild, pgrp, err, st.PID)
	}
	groups, err := readPidFile(d.pidPath("web.service"))
	if err != nil || len(groups) != 1 || groups[0].pgid != st.PID {
		t.Errorf("pid file = %+v, %v; want the main process group %d", groups, err, st.PID)
	}
	if got := d.States(); len(got) != 1 || got[0] != st {
		t.Errorf("States() = %+v, want [%+v]", got, st)
	}
	if err := d.Start("web.service"); err != nil { // running: left alone
		t.Fatal(err)
	}

	if err := d.Stop("web.service"); err != nil {
		t.Fatal(err)
	}
	done := rec.waitState(t, "web.service", "inactive", "dead")
	if done.Result != "success" || done.PID != 0 || !done.Since.After(st.Since) {
		t.Errorf("stopped status = %+v", done)
	}
	if alive(st.PID) {
		t.Errorf("main process %d still runs after the stop", st.PID)
	}
	waitGone(t, grandchild, "the grandchild")
	if _, err := os.Stat(d.pidPath("web.service")); !os.IsNotExist(err) {
		t.Errorf("pid file left after the stop: %v", err)
	}
	log := journal(t, d, "web.service")
	for _, want := range []string{
		"flotilla[" + strconv.Itoa(os.Getpid()) + "]: Starting Web server...",
		"web.service[" + strconv.Itoa(st.PID) + "]: hello from web",
		"Started Web server.",
		"Stopping Web server...",
		"Stopped Web server.",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if got, want := rec.states("web.service"), []string{"inactive/dead", "active/running", "deactivating/stop-sigterm", "inactive/dead"}; !slices.Equal(got, want) {
		t.Errorf("states = %q, want %q", got, want)
	}
}

func TestStopTimeoutKills(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	f := newUnit("stubborn.service", nil, func(s *unit.Service) {
		s.ExecStart = []unit.Command{sh(`trap "" TERM; echo ready; while :; do sleep 0.05; done`)}
		s.TimeoutStopSec = 300 * time.Millisecond
	})
	mustLoadStart(t, d, f)
	st := rec.waitState(t, "stubborn.service", "active", "running")
	waitLog(t, d, "stubborn.service", "ready")
	begin := time.Now()
	d.Stop("stubborn.service")
	rec.waitState(t, "stubborn.service", "deactivating", "stop-sigterm")
	rec.waitState(t, "stubborn.service", "deactivating", "stop-sigkill")
	done := rec.waitState(t, "stubborn.service", "inactive", "dead")
	if el := time.Since(begin); el < 300*time.Millisecond {
		t.Errorf("stopped after %v, before TimeoutStopSec", el)
	}
	if !strings.Contains(done.Message, "SIGKILL") || done.Result != "success" {
		t.Errorf("stopped status = %+v, want success with a message about SIGKILL", done)
	}
	if alive(st.PID) {
		t.Errorf("process %d survived", st.PID)
	}
	waitLog(t, d, "stubborn.service", "State 'stop-sigterm' timed out. Killing.")
	waitLog(t, d, "stubborn.service", "Main process exited, code=killed, status=9/KILL")
}

func TestStartPreFailure(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	marker := filepath.Join(t.TempDir(), "ran")
	f := newUnit("pre.service", []string{"/bin/touch", marker}, func(s *unit.Service) {
		s.ExecStartPre = []unit.Command{cmd("/bin/true"), cmd("/bin/false"), cmd("/bin/touch", marker)}
	})
	mustLoadStart(t, d, f)
	st := rec.waitState(t, "pre.service", "failed", "failed")
	if st.Result != "exit-code" || !strings.Contains(st.Message, "ExecStartPre=/bin/false") {
		t.Errorf("failed status = %+v, want result exit-code and a message naming the command", st)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the commands after the failed ExecStartPre= ran")
	}
	waitLog(t, d, "pre.service", "Control process exited, code=exited, status=1/FAILURE")
	waitLog(t, d, "pre.service", "Failed with result 'exit-code'.")
}

func TestIgnoreFailure(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	f := newUnit("ignore.service", []string{"sleep", "300"}, func(s *unit.Service) {
		s.ExecStartPre = []unit.Command{
			{Argv: []string{"/bin/false"}, IgnoreFailure: true},
			{Argv: []string{"/no/such/program"}, IgnoreFailure: true},
		}
	})
	mustLoadStart(t, d, f)
	st := rec.waitState(t, "ignore.service", "active", "running")
	if st.PID == 0 {
		t.Error("no PID")
	}
	waitLog(t, d, "ignore.service", "(ignored)")
}

func TestMissingProgram(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	mustLoadStart(t, d, newUnit("missing.service", []string{"no-such-program-xyz"}, nil))
	st := rec.waitState(t, "missing.service", "failed", "failed")
	if st.Result != "exit-code" || !strings.Contains(st.Message, "no-such-program-xyz") {
		t.Errorf("status = %+v, want exit-code and a message naming the program", st)
	}
}

func TestRestartOnFailureHitsStartLimit(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	f := newUnit("crash.service", []string{"/bin/sh", "-c", "echo crashing; exit 3"}, func(s *unit.Service) {
		s.Restart = "on-failure"
		s.RestartSec = 20 * time.Millisecond
		s.StartLimitBurst = 3
	})
	mustLoadStart(t, d, f)
	st := rec.wait(t, "crash.service", "failed with start-limit-hit", func(st unit.Status) bool { return st.Result == "start-limit-hit" })
	if st.Active != "failed" || st.Sub != "failed" || !strings.Contains(st.Message, "more than 3 starts") {
		t.Errorf("status = %+v", st)
	}
	log := journal(t, d, "crash.service")
	if n := strings.Count(log, "]: crashing"); n != 3 {
		t.Errorf("the unit ran %d times, want 3 (StartLimitBurst):\n%s", n, log)
	}
	for _, want := range []string{
		"Main process exited, code=exited, status=3/NOTIMPLEMENTED",
		"Failed with result 'exit-code'.",
		"Scheduled restart job, restart counter is at 2.",
		"Scheduled restart job, restart counter is at 3.",
		"Start request repeated too quickly.",
		"Failed with result 'start-limit-hit'.",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if !slices.Contains(rec.states("crash.service"), "activating/auto-restart") {
		t.Errorf("never in auto-restart: %q", rec.states("crash.service"))
	}
	if err := d.Start("crash.service"); !errors.Is(err, ErrStartLimitHit) || !strings.Contains(err.Error(), "crash.service") {
		t.Errorf("Start within the limit's window = %v, want ErrStartLimitHit naming the unit", err)
	}
}

func TestRestartAlways(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	f := newUnit("again.service", []string{"/bin/true"}, func(s *unit.Service) {
		s.Restart = "always"
		s.RestartSec = 10 * time.Millisecond
		s.StartLimitBurst = 1000
	})
	mustLoadStart(t, d, f)
	waitLog(t, d, "again.service", "restart counter is at 5.")
	rec.waitState(t, "again.service", "activating", "auto-restart")
	d.Stop("again.service")
	st := rec.waitState(t, "again.service", "inactive", "dead")
	if st.Result != "success" {
		t.Errorf("stopped status = %+v", st)
	}
}

func TestExitResults(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	tests := []struct {
		name, script   string
		active, result string
	}{
		{"clean.service", "exit 0", "inactive", "success"},
		{"code.service", "exit 7", "failed", "exit-code"},
		{"killed.service", "kill -KILL $$$$", "failed", "signal"}, // "$$" is systemd's "$"
		{"termed.service", "kill -TERM $$$$", "inactive", "success"},
	}
	for _, tt := range tests {
		mustLoadStart(t, d, newUnit(tt.name, []string{"/bin/sh", "-c", tt.script}, nil))
	}
	for _, tt := range tests {
		st := rec.wait(t, tt.name, "done", func(st unit.Status) bool {
			return st.Result != "" && (st.Active == "inactive" || st.Active == "failed")
		})
		if st.Active != tt.active || st.Result != tt.result {
			t.Errorf("%s (%s): %s, result %s; want %s, result %s", tt.name, tt.script, st.Active, st.Result, tt.active, tt.result)
		}
	}
	waitLog(t, d, "clean.service", "Deactivated successfully.")
	waitLog(t, d, "killed.service", "Main process exited, code=killed, status=9/KILL")
}

func TestEnvironment(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	dir := t.TempDir()
	envFile := filepath.Join(dir, "unit.env")
	os.WriteFile(envFile, []byte("# settings\nFROM_FILE=\"file value\"\nOVERRIDDEN=file\n"), 0o644)
	f := newUnit("env.service", []string{
		"printenv-args", // on PATH from Environment=
		"$WORDS", "${FROM_FILE}", "x$$y", "${OVERRIDDEN}",
	}, func(s *unit.Service) {
		s.Type = "oneshot"
		s.Environment = []string{"WORDS=one two", "OVERRIDDEN=env", "PATH=" + dir + ":/usr/bin:/bin"}
		s.EnvironmentFiles = []unit.EnvFile{{Path: envFile}, {Path: filepath.Join(dir, "absent.env"), Optional: true}}
		s.WorkingDirectory = dir
	})
	script := "#!/bin/sh\nprintf 'arg=%s\\n' \"$@\"\necho pwd=$(pwd)\necho home=$HOME\necho file=$FROM_FILE\n"
	os.WriteFile(filepath.Join(dir, "printenv-args"), []byte(script), 0o755)
	mustLoadStart(t, d, f)
	rec.waitEnded(t, "env.service", "inactive")
	log := journal(t, d, "env.service")
	for _, want := range []string{
		"]: arg=one\n", "]: arg=two\n", "]: arg=file value\n", "]: arg=x$y\n", "]: arg=file\n",
		"]: pwd=" + dir + "\n",
		"]: home=" + d.home + "\n",
		"]: file=file value\n",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

// TestEnvironmentFileFIFO: a unit whose EnvironmentFile= is a FIFO with no
// writer fails to start at once, saying why, and its driver keeps answering.
func TestEnvironmentFileFIFO(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	fifo := filepath.Join(t.TempDir(), "env.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	f := newUnit("fifo.service", []string{"/bin/sleep", "60"}, func(s *unit.Service) {
		s.EnvironmentFiles = []unit.EnvFile{{Path: fifo}}
	})
	mustLoadStart(t, d, f)
	st := rec.waitEnded(t, "fifo.service", "failed")
	if !strings.Contains(st.Message, fifo) || !strings.Contains(st.Message, "not a regular file") {
		t.Errorf("message %q, want one naming %s as not a regular file", st.Message, fifo)
	}
	if err := d.Stop("fifo.service"); err != nil {
		t.Errorf("Stop after the failed start: %v", err)
	}
}

func TestUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := user.Lookup("nobody"); err != nil {
		t.Skip("no user nobody")
	}
	d, rec := newTestDriver(t, nil)
	mustLoadStart(t, d, newUnit("nobody.service", []string{"/bin/sh", "-c", "echo uid=$(id -u) user=$USER"}, func(s *unit.Service) {
		s.User = "nobody"
	}))
	rec.waitEnded(t, "nobody.service", "inactive")
	waitLog(t, d, "nobody.service", "]: uid=65534 user=nobody")

	mustLoadStart(t, d, newUnit("ghost.service", []string{"/bin/true"}, func(s *unit.Service) { s.User = "no-such-user-xyz" }))
	st := rec.waitState(t, "ghost.service", "failed", "failed")
	if !strings.Contains(st.Message, "no-such-user-xyz") {
		t.Errorf("status = %+v, want a message naming the user", st)
	}
}

func TestOneshot(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	dir := t.TempDir()
	f := newUnit("setup.service", nil, func(s *unit.Service) {
		s.Type = "oneshot"
		s.RemainAfterExit = true
		s.ExecStart = []unit.Command{sh("echo one"), sh("echo two > " + dir + "/up")}
		s.ExecStop = []unit.Command{sh("echo MAINPID=$MAINPID; rm " + dir + "/up")}
	})
	mustLoadStart(t, d, f)
	st := rec.waitState(t, "setup.service", "active", "exited")
	if _, err := os.Stat(dir + "/up"); err != nil || st.PID != 0 {
		t.Errorf("after the start: %v, pid %d", err, st.PID)
	}
	d.Stop("setup.service")
	rec.waitState(t, "setup.service", "inactive", "dead")
	if _, err := os.Stat(dir + "/up"); !os.IsNotExist(err) {
		t.Errorf("ExecStop= did not run: %v", err)
	}
	waitLog(t, d, "setup.service", "]: MAINPID=\n")
	if got, want := rec.states("setup.service"), []string{"inactive/dead", "activating/start", "active/exited", "deactivating/stop", "inactive/dead"}; !slices.Equal(got, want) {
		t.Errorf("states = %q, want %q", got, want)
	}

	// Without RemainAfterExit it ends dead; a failing command fails it.
	mustLoadStart(t, d, newUnit("once.service", nil, func(s *unit.Service) {
		s.Type = "oneshot"
		s.ExecStart = []unit.Command{cmd("/bin/true")}
	}))
	rec.waitEnded(t, "once.service", "inactive")
	mustLoadStart(t, d, newUnit("bad.service", nil, func(s *unit.Service) {
		s.Type = "oneshot"
		s.ExecStart = []unit.Command{cmd("/bin/true"), cmd("/bin/false"), cmd("/bin/true")}
		s.ExecStopPost = []unit.Command{sh("echo cleanup ran")}
	}))
	st = rec.waitState(t, "bad.service", "failed", "failed")
	if st.Result != "exit-code" {
		t.Errorf("status = %+v", st)
	}
	waitLog(t, d, "bad.service", "]: cleanup ran")
}

func TestStopDuringStartPre(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	f := newUnit("slowpre.service", []string{"sleep", "300"}, func(s *unit.Service) {
		s.ExecStartPre = []unit.Command{cmd("sleep", "300")}
	})
	mustLoadStart(t, d, f)
	st := rec.waitState(t, "slowpre.service", "activating", "start-pre")
	d.Stop("slowpre.service")
	st = rec.waitState(t, "slowpre.service", "inactive", "dead")
	if st.Result != "success" {
		t.Errorf("status = %+v", st)
	}
	if slices.Contains(rec.states("slowpre.service"), "active/running") {
		t.Errorf("the main process was started: %q", rec.states("slowpre.service"))
	}
}

func TestStartTimeout(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	f := newUnit("hang.service", []string{"sleep", "300"}, func(s *unit.Service) {
		s.ExecStartPre = []unit.Command{cmd("sleep", "300")}
		s.TimeoutStartSec = 200 * time.Millisecond
	})
	mustLoadStart(t, d, f)
	st := rec.waitState(t, "hang.service", "failed", "failed")
	if st.Result != "timeout" {
		t.Errorf("status = %+v, want result timeout", st)
	}
	waitLog(t, d, "hang.service", "Start operation timed out. Terminating.")
}

func TestStartWhileStopping(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	f := newUnit("bounce.service", nil, func(s *unit.Service) {
		s.ExecStart = []unit.Command{sh(`trap "exit 0" TERM; echo ready; while :; do sleep 0.05; done`)}
	})
	mustLoadStart(t, d, f)
	first := rec.waitState(t, "bounce.service", "active", "running")
	waitLog(t, d, "bounce.service", "ready")
	d.Stop("bounce.service")
	d.Start("bounce.service")
	second := rec.waitState(t, "bounce.service", "active", "running")
	if second.PID == first.PID {
		t.Errorf("not restarted: pid %d", second.PID)
	}
}

func TestLoadNewHashWhileRunning(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	v1 := newUnit("app.service", []string{"/bin/sh", "-c", "echo v1; exec sleep 300"}, nil)
	v2 := newUnit("app.service", []string{"/bin/sh", "-c", "echo v2; exec sleep 300"}, nil)
	mustLoadStart(t, d, v1)
	st := rec.waitState(t, "app.service", "active", "running")
	if err := d.Load(v2); err != nil {
		t.Fatal(err)
	}
	if got := d.States()[0]; got.Hash != v1.Hash || got.PID != st.PID {
		t.Errorf("after loading v2 while running: %+v, want v1 still running", got)
	}
	// Every Load is answered with a Notify, even when nothing changed (a
	// caller adopting a running unit learns how it is).
	for _, f := range []*unit.File{v2, v2} {
		rec.mu.Lock()
		before := len(rec.seen)
		rec.mu.Unlock()
		if err := d.Load(f); err != nil {
			t.Fatal(err)
		}
		waitfor.True(t, waitTimeout, "a status after Load", func() bool {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			return len(rec.seen) > before && rec.seen[len(rec.seen)-1].PID == st.PID
		})
	}
	d.Stop("app.service")
	st = rec.waitState(t, "app.service", "inactive", "dead")
	if st.Hash != v2.Hash {
		t.Errorf("stopped unit reports hash %.8s, want v2's %.8s", st.Hash, v2.Hash)
	}
	d.Start("app.service")
	rec.waitState(t, "app.service", "active", "running")
	waitLog(t, d, "app.service", "]: v2")
}

func TestUnload(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	mustLoadStart(t, d, newUnit("gone.service", []string{"/bin/sh", "-c", "echo bye; exec sleep 300"}, nil))
	st := rec.waitState(t, "gone.service", "active", "running")
	waitLog(t, d, "gone.service", "]: bye")
	if err := d.Unload(context.Background(), "gone.service"); err != nil {
		t.Fatal(err)
	}
	if alive(st.PID) {
		t.Error("the process outlived Unload")
	}
	if got := d.States(); len(got) != 0 {
		t.Errorf("States after Unload = %+v", got)
	}
	if err := d.Start("gone.service"); !errors.Is(err, driver.ErrUnknownUnit) {
		t.Errorf("Start after Unload = %v, want ErrUnknownUnit", err)
	}
	// The history stays readable.
	if log := journal(t, d, "gone.service"); !strings.Contains(log, "]: bye") {
		t.Errorf("journal of the unloaded unit:\n%s", log)
	}
	// And it can be loaded again.
	if err := d.Load(newUnit("gone.service", []string{"/bin/true"}, nil)); err != nil {
		t.Fatal(err)
	}
}

func TestUnloadHonoursContext(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	mustLoadStart(t, d, newUnit("slow.service", []string{"/bin/sh", "-c", `trap "" TERM; echo ready; while :; do sleep 0.05; done`}, func(s *unit.Service) {
		s.TimeoutStopSec = 500 * time.Millisecond
	}))
	rec.waitState(t, "slow.service", "active", "running")
	waitLog(t, d, "slow.service", "ready")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := d.Unload(ctx, "slow.service"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Unload past its deadline = %v, want DeadlineExceeded", err)
	}
	if err := d.Start("slow.service"); err == nil || !strings.Contains(err.Error(), "unloaded") {
		t.Errorf("Start while unloading = %v, want an error", err)
	}
	rec.waitState(t, "slow.service", "inactive", "dead")
	waitfor.True(t, waitTimeout, "the unit to be forgotten", func() bool { return len(d.States()) == 0 })
}

func TestJournalFollow(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	mustLoadStart(t, d, newUnit("ticker.service", []string{"/bin/sh", "-c", "sleep 0.2; for i in 1 2 3 4 5; do echo tick $i; done; exec sleep 300"}, nil))
	rec.waitState(t, "ticker.service", "active", "running")
	waitLog(t, d, "ticker.service", "tick 5")

	var last bytes.Buffer
	if err := d.Journal(context.Background(), "ticker.service", 2, false, &last); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(last.String(), "\n"), "\n")
	if len(lines) != 2 || !strings.HasSuffix(lines[0], ": tick 4") || !strings.HasSuffix(lines[1], ": tick 5") {
		t.Errorf("last 2 lines = %q", lines)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- d.Journal(ctx, "ticker.service", 0, true, &out) }()
	// Once it waits for the next poll, it has reached the end: what is written now is new.
	waitfor.Until(t, waitTimeout, "the follower to reach the end", waitfor.Parked("service.WriteJournal"))
	d.Stop("ticker.service")
	rec.waitState(t, "ticker.service", "inactive", "dead")
	waitfor.True(t, waitTimeout, "the followed journal to show the stop", func() bool { return strings.Contains(out.String(), "Stopped ticker.service.") })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), ": tick") {
		t.Errorf("following from the end showed old lines:\n%s", out.String())
	}
}

func TestJournalRotation(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, func(c *Config) { c.MaxLogBytes = 4096 })
	mustLoadStart(t, d, newUnit("chatty.service", []string{"/bin/sh", "-c", "i=0; while [ $i -lt 300 ]; do echo line $i; i=$((i+1)); done"}, nil))
	rec.waitEnded(t, "chatty.service", "inactive")
	if fi, err := os.Stat(d.logPath("chatty.service") + ".1"); err != nil || fi.Size() > 4096 {
		t.Fatalf("rotated log: %v", err)
	}
	cur, _ := os.ReadFile(d.logPath("chatty.service"))
	if n := strings.Count(string(cur), "\n"); n >= 50 {
		t.Fatalf("the current log has %d lines; the test needs fewer than 50", n)
	}
	// The last 50 lines span both files.
	var b bytes.Buffer
	if err := d.Journal(context.Background(), "chatty.service", 50, false, &b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 50 || !strings.HasSuffix(lines[49], "Deactivated successfully.") {
		t.Fatalf("last 50 lines: %d lines:\n%s", len(lines), b.String())
	}
	// The process's lines are consecutive up to its last. (Under load the
	// driver's "Started" may land among them.)
	next := 299
	for i := 48; i >= 0; i-- {
		if strings.Contains(lines[i], "chatty.service[") {
			if want := fmt.Sprintf(": line %d", next); !strings.HasSuffix(lines[i], want) {
				t.Fatalf("line %d = %q, want one ending in %q", i, lines[i], want)
			}
			next--
		}
	}
	if next > 252 {
		t.Errorf("only lines %d to 299 of the process in the last 50", next+1)
	}
}

func TestStalePidFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	runDir := filepath.Join(dir, "run")
	os.MkdirAll(runDir, 0o755)

	// A unit whose main process still runs, in its own process group.
	live := exec.Command("sleep", "300")
	live.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	defer killGroup(live.Process.Pid)
	st, err := readProcStat(live.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	writePidFile(filepath.Join(runDir, "live.service.pid"), []pgroup{{live.Process.Pid, st.start}})

	// A unit whose main process is gone but left a child in its group.
	leader := exec.Command("/bin/sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!")
	leader.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	outp, err := leader.Output()
	if err != nil {
		t.Fatal(err)
	}
	orphan, _ := strconv.Atoi(strings.TrimSpace(string(outp)))
	defer killGroup(leader.Process.Pid)
	writePidFile(filepath.Join(runDir, "orphan.service.pid"), []pgroup{{leader.Process.Pid, 12345}})

	// A pid file whose pid now belongs to another process: left alone.
	bystander := exec.Command("sleep", "300")
	bystander.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := bystander.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { killGroup(bystander.Process.Pid); bystander.Wait() }()
	bst, _ := readProcStat(bystander.Process.Pid)
	writePidFile(filepath.Join(runDir, "reused.service.pid"), []pgroup{{bystander.Process.Pid, bst.start + 1}})

	d, err := New(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(context.Background())
	if err := live.Wait(); err == nil || live.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("the stale unit's process exited with %v, want SIGKILL", err)
	}
	waitGone(t, orphan, "the orphan left in the stale group")
	if !alive(bystander.Process.Pid) {
		t.Error("a process that reused a recorded pid was killed")
	}
	if left, _ := filepath.Glob(filepath.Join(runDir, "*.pid")); len(left) != 0 {
		t.Errorf("pid files left: %v", left)
	}
}

func TestCgroupUnavailable(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "not-a-cgroup")
	d, rec := newTestDriver(t, func(c *Config) { c.CgroupRoot = root })
	mustLoadStart(t, d, newUnit("limited.service", []string{"sleep", "300"}, func(s *unit.Service) {
		s.CPUQuotaPercent = 50
		s.MemoryMax = 64 << 20
	}))
	st := rec.waitState(t, "limited.service", "active", "running")
	if !strings.Contains(st.Message, "resource limits not enforced") || !strings.Contains(st.Message, "neither cgroup v2 nor the cgroup v1") {
		t.Errorf("status = %+v, want a message saying limits are not enforced and why", st)
	}
	waitLog(t, d, "limited.service", "Resource limits not enforced")
}

func TestCloseStopsEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	rec := newRecorder()
	d, err := New(Config{Dir: t.TempDir(), Notify: rec.notify, CgroupRoot: "/nonexistent"})
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, name := range []string{"a.service", "b.service", "c.service"} {
		f := newUnit(name, []string{"/bin/sh", "-c", `trap "" TERM; echo ready; sleep 300 & while :; do sleep 0.05; done`}, func(s *unit.Service) {
			s.TimeoutStopSec = 300 * time.Millisecond
			s.ExecStopPost = []unit.Command{sh("echo post")}
		})
		mustLoadStart(t, d, f)
		pids = append(pids, rec.waitState(t, name, "active", "running").PID)
	}
	mustLoadStart(t, d, newUnit("restarting.service", []string{"/bin/false"}, func(s *unit.Service) {
		s.Restart = "always"
		s.RestartSec = time.Hour
	}))
	rec.waitState(t, "restarting.service", "activating", "auto-restart")
	for _, name := range []string{"a.service", "b.service", "c.service"} {
		waitLog(t, d, name, "ready")
	}

	begin := time.Now()
	if err := d.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(begin); el > 2*time.Second {
		t.Errorf("Close took %v; units were not stopped in parallel", el)
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("process %d outlived Close", pid)
		}
		if _, err := syscall.Getpgid(pid); err == nil {
			t.Errorf("process %d still exists", pid)
		}
	}
	for _, name := range []string{"a.service", "b.service", "c.service"} {
		if !strings.Contains(readLog(t, d, name), "]: post") {
			t.Errorf("ExecStopPost= of %s did not run", name)
		}
	}
	if err := d.Start("a.service"); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Close = %v, want ErrClosed", err)
	}
	waitfor.True(t, waitTimeout, "the driver's goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}

func TestCloseHonoursContext(t *testing.T) {
	rec := newRecorder()
	d, err := New(Config{Dir: t.TempDir(), Notify: rec.notify, CgroupRoot: "/nonexistent"})
	if err != nil {
		t.Fatal(err)
	}
	mustLoadStart(t, d, newUnit("deaf.service", []string{"/bin/sh", "-c", `trap "" TERM; echo ready; while :; do sleep 0.05; done`}, nil)) // TimeoutStopSec 90s
	st := rec.waitState(t, "deaf.service", "active", "running")
	waitLog(t, d, "deaf.service", "ready")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	begin := time.Now()
	if err := d.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close past its deadline = %v, want DeadlineExceeded", err)
	}
	if el := time.Since(begin); el > 2*time.Second {
		t.Errorf("Close took %v", el)
	}
	if alive(st.PID) {
		t.Error("the process outlived Close")
	}
}

// readLog reads a unit's log file directly (Journal refuses after Close).
func readLog(t *testing.T, d *Driver, name string) string {
	t.Helper()
	data, err := os.ReadFile(d.logPath(name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestExecStopWithMainPID(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	f := newUnit("graceful.service", nil, func(s *unit.Service) {
		s.ExecStart = []unit.Command{sh(`trap "echo got TERM; exit 0" TERM; echo ready; while :; do sleep 0.05; done`)}
		s.ExecStop = []unit.Command{cmd("/bin/kill", "-TERM", "$MAINPID")}
		s.ExecStopPost = []unit.Command{sh("echo post MAINPID=$MAINPID")}
	})
	mustLoadStart(t, d, f)
	st := rec.waitState(t, "graceful.service", "active", "running")
	waitLog(t, d, "graceful.service", "ready")
	d.Stop("graceful.service")
	rec.waitState(t, "graceful.service", "deactivating", "stop")
	rec.waitState(t, "graceful.service", "inactive", "dead")
	waitLog(t, d, "graceful.service", "graceful.service["+strconv.Itoa(st.PID)+"]: got TERM")
	waitLog(t, d, "graceful.service", "]: post MAINPID=\n") // the main process is gone by then
}

func TestStartPostFailureStopsMain(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	mustLoadStart(t, d, newUnit("post.service", []string{"sleep", "300"}, func(s *unit.Service) {
		s.ExecStartPost = []unit.Command{sh("echo MAINPID=$MAINPID; exit 4")}
	}))
	st := rec.waitState(t, "post.service", "activating", "start-post")
	failed := rec.waitState(t, "post.service", "failed", "failed")
	if failed.Result != "exit-code" || !strings.Contains(failed.Message, "ExecStartPost") {
		t.Errorf("status = %+v", failed)
	}
	if alive(st.PID) {
		t.Errorf("main process %d outlived the failed start", st.PID)
	}
	waitLog(t, d, "post.service", "]: MAINPID="+strconv.Itoa(st.PID)+"\n")
}

func TestKillModeProcess(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	child := filepath.Join(t.TempDir(), "child")
	mustLoadStart(t, d, newUnit("lenient.service", []string{"/bin/sh", "-c", "sleep 300 & echo $! > " + child + "; exec sleep 301"}, func(s *unit.Service) {
		s.KillMode = "process"
	}))
	st := rec.waitState(t, "lenient.service", "active", "running")
	grandchild := readPid(t, child)
	defer killGroup(st.PID)
	d.Stop("lenient.service")
	rec.waitState(t, "lenient.service", "inactive", "dead")
	if alive(st.PID) {
		t.Error("the main process survived the stop")
	}
	if !alive(grandchild) {
		t.Error("KillMode=process killed the main process's child")
	}
	if _, err := os.Stat(d.pidPath("lenient.service")); !os.IsNotExist(err) {
		t.Errorf("pid file kept for abandoned processes: %v", err)
	}
}

func TestMainExitKillsLeftovers(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	child := filepath.Join(t.TempDir(), "child")
	mustLoadStart(t, d, newUnit("leaver.service", []string{"/bin/sh", "-c", "sleep 300 & echo $! > " + child + "; sleep 0.1; exit 1"}, nil))
	grandchild := readPid(t, child)
	st := rec.waitEnded(t, "leaver.service", "failed")
	if st.Result != "exit-code" {
		t.Errorf("status = %+v", st)
	}
	waitGone(t, grandchild, "the process the main process left behind")
}

func TestAutoRestartUsesNewDefinition(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	edit := func(s *unit.Service) {
		s.Restart = "always"
		s.RestartSec = 200 * time.Millisecond
	}
	v1 := newUnit("rolling.service", []string{"/bin/sh", "-c", "echo v1; exit 1"}, edit)
	v2 := newUnit("rolling.service", []string{"/bin/sh", "-c", "echo v2; exec sleep 300"}, edit)
	mustLoadStart(t, d, v1)
	rec.waitState(t, "rolling.service", "activating", "auto-restart")
	if err := d.Load(v2); err != nil {
		t.Fatal(err)
	}
	st := rec.waitState(t, "rolling.service", "active", "running")
	if st.Hash != v2.Hash {
		t.Errorf("restarted with hash %.8s, want v2's %.8s", st.Hash, v2.Hash)
	}
	waitLog(t, d, "rolling.service", "]: v2")
}

// TestKill: Kill ends a unit that ignores SIGTERM at once, without waiting
// for its stop timeout or running ExecStop=, and forgets it.
func TestKill(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	marker := filepath.Join(t.TempDir(), "stopped")
	f := newUnit("doomed.service", nil, func(s *unit.Service) {
		s.ExecStart = []unit.Command{sh(`trap "" TERM; echo ready; while :; do sleep 0.05; done`)}
		s.ExecStop = []unit.Command{cmd("/bin/touch", marker)}
		s.TimeoutStopSec = time.Minute
	})
	mustLoadStart(t, d, f)
	st := rec.waitState(t, "doomed.service", "active", "running")
	waitLog(t, d, "doomed.service", "ready")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	begin := time.Now()
	if err := d.Kill(ctx, "doomed.service"); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(begin); el > 5*time.Second {
		t.Errorf("Kill took %v with a one-minute stop timeout", el)
	}
	waitGone(t, st.PID, "the killed unit's process")
	if _, err := os.Stat(marker); err == nil {
		t.Error("Kill ran ExecStop=")
	}
	if s := d.States(); len(s) != 0 {
		t.Errorf("after Kill: %+v, want the unit forgotten", s)
	}
}
