package execdriver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// chatty is a oneshot-like unit printing "line 0" to "line <n-1>" and exiting.
func chatty(name string, n int) *unit.File {
	return newUnit(name, []string{"/bin/sh", "-c", fmt.Sprintf("i=0; while [ $i -lt %d ]; do echo line $i; i=$((i+1)); done", n)}, nil)
}

// logFiles lists the unit's log files, current first: "" for the current
// one, then ".1", ".2"...
func logFiles(t *testing.T, d *Driver, name string) []string {
	t.Helper()
	matches, err := filepath.Glob(d.logPath(name) + "*")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range matches {
		out = append(out, strings.TrimPrefix(m, d.logPath(name)))
	}
	return out
}

func TestLogMaxFiles(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, func(c *Config) { c.MaxLogBytes = 1024; c.MaxLogFiles = 3 })
	mustLoadStart(t, d, chatty("three.service", 300))
	rec.waitEnded(t, "three.service", "inactive")
	// The last lines may still be on their way from the output pipe (and a
	// rotation under way) when the unit is reported ended: wait until the
	// journal holds the last one and the unit's end after it.
	var got, all string
	waitfor.Until(t, waitTimeout, "the last line and the unit's end in the journal", func() error {
		got = strings.Join(logFiles(t, d, "three.service"), " ")
		all = journal(t, d, "three.service")
		switch {
		case got != " .1 .2 .3":
			return fmt.Errorf("log files %q, want the current one and .1 to .3", got)
		case !strings.Contains(all, ": line 299\n") || !strings.HasSuffix(all, "Deactivated successfully.\n"):
			return fmt.Errorf("journal ends:\n%s", all[max(len(all)-300, 0):])
		}
		return nil
	})
	for _, suf := range []string{"", ".1", ".2", ".3"} {
		if fi, err := os.Stat(d.logPath("three.service") + suf); err != nil || fi.Size() > 1024 {
			t.Errorf("log file %q: %v, size over 1024", suf, err)
		}
	}
	// The whole journal is every kept line in order, across the four files.
	if !strings.HasSuffix(all, "Deactivated successfully.\n") {
		t.Errorf("journal does not end with the unit's end:\n%s", all)
	}
	prev := -1
	for _, l := range strings.Split(all, "\n") {
		var n int
		i := strings.Index(l, ": line ")
		if i < 0 {
			continue
		}
		fmt.Sscan(l[i+len(": line "):], &n)
		if prev >= 0 && n != prev+1 {
			t.Fatalf("line %d follows line %d in the journal", n, prev)
		}
		prev = n
	}
	if prev != 299 {
		t.Errorf("last process line %d, want 299", prev)
	}
	// The last 50 lines reach into the rotated files (each holds under 20).
	var b bytes.Buffer
	if err := d.Journal(context.Background(), "three.service", 50, false, &b); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "\n"); n != 50 {
		t.Errorf("last 50 lines gave %d", n)
	}
}

func TestLogMaxFilesZero(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, func(c *Config) { c.MaxLogBytes = 1024; c.MaxLogFiles = -1 })
	mustLoadStart(t, d, chatty("none.service", 200))
	rec.waitEnded(t, "none.service", "inactive")
	if got := strings.Join(logFiles(t, d, "none.service"), " "); got != "" {
		t.Fatalf("log files %q, want only the current one", got)
	}
}

func TestUnitLogLimits(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, func(c *Config) { c.MaxLogBytes = 1024; c.MaxLogFiles = 1 })
	// The unit's own limits override the machine's.
	two := 2
	f := chatty("own.service", 300)
	f.Fleet.LogMaxSize, f.Fleet.LogMaxFiles = 2048, &two
	mustLoadStart(t, d, f)
	rec.waitEnded(t, "own.service", "inactive")
	if got := strings.Join(logFiles(t, d, "own.service"), " "); got != " .1 .2" {
		t.Fatalf("log files %q, want the current one, .1 and .2", got)
	}
	fi, err := os.Stat(d.logPath("own.service") + ".1")
	if err != nil || fi.Size() <= 1024 || fi.Size() > 2048 {
		t.Errorf("rotated file: %v, size %d, want over 1024 (the machine's) and at most 2048 (the unit's)", err, fi.Size())
	}
}

func TestSetLogConfig(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, func(c *Config) { c.MaxLogBytes = 1024; c.MaxLogFiles = 4 })
	mustLoadStart(t, d, chatty("shrink.service", 300))
	rec.waitEnded(t, "shrink.service", "inactive")
	if got := strings.Join(logFiles(t, d, "shrink.service"), " "); got != " .1 .2 .3 .4" {
		t.Fatalf("log files %q, want the current one and .1 to .4", got)
	}
	for _, bad := range []struct {
		c    LogConfig
		want string
	}{
		{LogConfig{Limits: LogLimits{MaxBytes: 10, MaxFiles: 1}}, "log max size 10 is below the minimum"},
		{LogConfig{Limits: LogLimits{MaxBytes: 4096, MaxFiles: -1}}, "log max files -1 is out of range"},
		{LogConfig{Limits: LogLimits{MaxBytes: 4096, MaxFiles: 101}}, "log max files 101 is out of range"},
	} {
		if err := d.SetLogConfig(bad.c); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("SetLogConfig(%+v) = %v, want %q", bad.c, err, bad.want)
		}
	}
	// Fewer files: the next rotation of the loaded unit removes the extra ones.
	if err := d.SetLogConfig(LogConfig{Limits: LogLimits{MaxBytes: 1024, MaxFiles: 1}}); err != nil {
		t.Fatal(err)
	}
	if got := d.LogConfig(); got.Limits.MaxFiles != 1 {
		t.Fatalf("LogConfig() = %+v after setting MaxFiles 1", got)
	}
	if err := d.Start("shrink.service"); err != nil {
		t.Fatal(err)
	}
	rec.waitEnded(t, "shrink.service", "inactive")
	if got := strings.Join(logFiles(t, d, "shrink.service"), " "); got != " .1" {
		t.Fatalf("log files %q after MaxFiles 1, want the current one and .1", got)
	}
}

func TestRemoveLog(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, func(c *Config) { c.MaxLogBytes = 1024; c.MaxLogFiles = 2 })
	mustLoadStart(t, d, chatty("gone.service", 200))
	rec.waitEnded(t, "gone.service", "inactive")
	if err := d.RemoveLog("gone.service"); !errors.Is(err, ErrUnitLoaded) {
		t.Fatalf("RemoveLog of a loaded unit = %v, want ErrUnitLoaded", err)
	}
	if got := logFiles(t, d, "gone.service"); len(got) != 3 {
		t.Fatalf("log files %q, want three", got)
	}
	if err := d.Unload(context.Background(), "gone.service"); err != nil {
		t.Fatal(err)
	}
	// Unloading keeps the log: a stopped or moved unit's history stays.
	if !strings.Contains(journal(t, d, "gone.service"), "line 199") {
		t.Fatal("the log did not outlive Unload")
	}
	if err := d.RemoveLog("gone.service"); err != nil {
		t.Fatal(err)
	}
	if got := logFiles(t, d, "gone.service"); len(got) != 0 {
		t.Fatalf("log files %q left after RemoveLog", got)
	}
	if err := d.RemoveLog("gone.service"); err != nil {
		t.Errorf("RemoveLog of a unit without a log = %v, want nil", err)
	}
	if err := d.RemoveLog("../x"); err == nil {
		t.Error("RemoveLog(../x) = nil, want an error")
	}
}

func TestJournaldFields(t *testing.T) {
	got := journaldFields("web.service", "m1", "web.service", 42)
	want := map[string]string{"SYSLOG_IDENTIFIER": "web.service", "SYSLOG_PID": "42", "FLOTILLA_UNIT": "web.service", "FLOTILLA_MACHINE": "m1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("journaldFields = %v, want %v", got, want)
	}
}

// TestJournald sends a unit's output to the host's journald and reads it
// back with journalctl; it runs only where journald listens.
func TestJournald(t *testing.T) {
	if _, err := os.Stat("/run/systemd/journal/socket"); err != nil {
		t.Skip("no journald socket at /run/systemd/journal/socket")
	}
	if _, err := exec.LookPath("journalctl"); err != nil {
		t.Skip("no journalctl")
	}
	d, rec := newTestDriver(t, func(c *Config) { c.Journald = true })
	name := fmt.Sprintf("journald-test-%d.service", os.Getpid())
	mustLoadStart(t, d, newUnit(name, []string{"/bin/echo", "hello journald"}, nil))
	rec.waitEnded(t, name, "inactive")
	waitfor.True(t, waitTimeout, "journalctl to show the unit's line", func() bool {
		out, _ := exec.Command("journalctl", "--no-pager", "-o", "cat", "FLOTILLA_UNIT="+name, "FLOTILLA_MACHINE=m1", "SYSLOG_IDENTIFIER="+name).Output()
		return strings.Contains(string(out), "hello journald")
	})
}

// TestOutputLoggedBeforeEnd: all a process wrote is in the log before its
// exit is acted on, however far behind the copier is (here: a full pipe of
// lines, a rotation shifting a hundred files every few lines), so the
// unit's end follows its last line; and all a unit wrote is in the log
// before Unload returns, after which nothing is written.
func TestOutputLoggedBeforeEnd(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, func(c *Config) { c.MaxLogBytes = 1024; c.MaxLogFiles = 100 })
	const n = 5000 // ~110 KiB: the pipe is full when the process exits
	mustLoadStart(t, d, newUnit("flood.service", []string{"/bin/sh", "-c", fmt.Sprintf("seq -f 'line %%.0f of the flood' 0 %d", n-1)}, nil))
	rec.waitEnded(t, "flood.service", "inactive")
	all := journal(t, d, "flood.service")
	last := fmt.Sprintf(": line %d of the flood\n", n-1)
	if i := strings.Index(all, last); i < 0 || !strings.HasSuffix(all, "Deactivated successfully.\n") || strings.Count(all[i:], "\n") != 2 {
		t.Fatalf("journal when the unit was reported inactive (has the last line: %v) ends:\n%s", strings.Contains(all, last), all[max(len(all)-300, 0):])
	}

	// Unload with a flood in the pipe: the log stands still once it returns.
	mustLoadStart(t, d, newUnit("flood.service", []string{"/bin/sh", "-c", "while :; do seq -f 'more %.0f' 0 2000; done"}, nil))
	rec.waitState(t, "flood.service", "active", "running")
	if err := d.Unload(context.Background(), "flood.service"); err != nil {
		t.Fatal(err)
	}
	all = journal(t, d, "flood.service")
	if !strings.HasSuffix(all, "Stopped flood.service.\n") {
		t.Errorf("journal after Unload ends:\n%s", all[max(len(all)-300, 0):])
	}
	if err := d.RemoveLog("flood.service"); err != nil {
		t.Fatal(err)
	}
	waitfor.Holds(t, 200*time.Millisecond, "no log written after Unload and RemoveLog", func() error {
		if got := logFiles(t, d, "flood.service"); len(got) != 0 {
			return fmt.Errorf("log files %q", got)
		}
		return nil
	})
}
