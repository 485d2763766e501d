package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/driver"
	execdriver "github.com/flotilla/flotilla/internal/driver/exec"
	"github.com/flotilla/flotilla/internal/waitfor"
	"github.com/flotilla/flotilla/proto/supervisorpb"
)

// newClientLogs is newClient with the machine's log settings.
func newClientLogs(t *testing.T, dir string, lc execdriver.LogConfig) (*Client, *recorder) {
	t.Helper()
	rec := &recorder{}
	cfg := clientConfig(dir, rec.notify)
	cfg.Logs = &lc
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Detach(context.Background()) })
	return c, rec
}

// rotated lists the rotated files of the unit's log (".1", ".2"...).
func rotated(t *testing.T, dir, name string) []string {
	t.Helper()
	base := filepath.Join(dir, "logs", name+".log")
	m, err := filepath.Glob(base + ".*")
	if err != nil {
		t.Fatal(err)
	}
	for i := range m {
		m[i] = strings.TrimPrefix(m[i], base)
	}
	return m
}

// TestLogConfigFollowsDaemon: the supervisor takes the log settings of each
// daemon that connects, even one restarted with other settings while the
// supervisor and its units kept running.
func TestLogConfigFollowsDaemon(t *testing.T) {
	t.Parallel()
	dir := newTestDir(t)
	c1, rec1 := newClientLogs(t, dir, execdriver.LogConfig{Limits: execdriver.LogLimits{MaxBytes: 1024, MaxFiles: 3}})
	const chatty = `[Service]
ExecStart=/bin/sh -c 'while :; do echo a line of about forty bytes or so; sleep 0.002; done'
`
	mustLoadStart(t, c1, parseUnit(t, "chatty.service", chatty))
	pid := rec1.activePID(t, "chatty.service")
	waitfor.True(t, waitTimeout, "three rotated files", func() bool { return len(rotated(t, dir, "chatty.service")) == 3 })
	if err := c1.Detach(context.Background()); err != nil {
		t.Fatal(err)
	}

	// The next daemon keeps one rotated file: the running unit's log obeys
	// at its next rotation, without a restart.
	c2, _ := newClientLogs(t, dir, execdriver.LogConfig{Limits: execdriver.LogLimits{MaxBytes: 1024, MaxFiles: 1}})
	waitfor.True(t, waitTimeout, "one rotated file", func() bool { return strings.Join(rotated(t, dir, "chatty.service"), " ") == ".1" })
	if st := stateOf(t, c2, "chatty.service"); st.PID != pid {
		t.Errorf("unit pid %d after the new daemon's settings, want %d: it must not restart", st.PID, pid)
	}

	// A destroyed unit's log goes once it is unloaded, over the socket.
	if err := c2.RemoveLog("chatty.service"); err == nil || !strings.Contains(err.Error(), "unit is loaded") {
		t.Errorf("RemoveLog of a loaded unit = %v, want an error saying it is loaded", err)
	}
	if err := c2.Unload(context.Background(), "chatty.service"); err != nil {
		t.Fatal(err)
	}
	var lr driver.LogRemover = c2
	if err := lr.RemoveLog("chatty.service"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "logs", "chatty.service.log")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("log after RemoveLog: %v, want it gone", err)
	}
	if got := rotated(t, dir, "chatty.service"); len(got) != 0 {
		t.Errorf("rotated files %q after RemoveLog", got)
	}
	var b strings.Builder
	if err := c2.Journal(context.Background(), "chatty.service", -1, false, &b); !errors.Is(err, driver.ErrUnknownUnit) {
		t.Errorf("Journal after RemoveLog = %v, want ErrUnknownUnit", err)
	}
}

// TestBadLogConfig: a daemon with settings out of range is refused with the
// reason.
func TestBadLogConfig(t *testing.T) {
	t.Parallel()
	dir := newTestDir(t)
	cfg := clientConfig(dir, nil)
	cfg.Logs = &execdriver.LogConfig{Limits: execdriver.LogLimits{MaxBytes: 10, MaxFiles: 1}}
	_, err := New(cfg)
	if err == nil || !strings.Contains(err.Error(), "log max size 10 is below the minimum") {
		t.Fatalf("New with MaxBytes 10 = %v, want the size named", err)
	}
}

// TestUnloadIsFinal: once Unload returns, the client has forgotten the unit
// for good, however late the supervisor's event stream tells of its stop:
// no status of it is notified any more, and once its log is removed Journal
// finds it unknown. The stream is slowed here as heavy load slows it.
func TestUnloadIsFinal(t *testing.T) {
	t.Parallel()
	dir := newTestDir(t)
	const name = "late.service"
	rec := &recorder{}
	cfg := clientConfig(dir, rec.notify)
	cfg.beforeApply = func(ev *supervisorpb.Event) {
		for _, u := range ev.GetUnits() {
			if u.GetName() == name && u.GetActive() != "active" {
				time.Sleep(200 * time.Millisecond) // the slow apply the test is about, not a wait
				return
			}
		}
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Detach(context.Background()) })
	mustLoadStart(t, c, parseUnit(t, name, "[Service]\nExecStart=/bin/sh -c 'while :; do echo a line; sleep 0.002; done'\n"))
	rec.activePID(t, name)
	if err := c.Unload(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	heard := len(rec.seen)
	rec.mu.Unlock()
	if err := c.RemoveLog(name); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "logs", name+".log")
	waitfor.Holds(t, time.Second, "the log gone after Unload and RemoveLog", func() error {
		if _, err := os.Stat(log); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("log: %v, want it gone", err)
		}
		if err := c.Journal(context.Background(), name, -1, false, io.Discard); !errors.Is(err, driver.ErrUnknownUnit) {
			return fmt.Errorf("Journal = %v, want ErrUnknownUnit", err)
		}
		return nil
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, st := range rec.seen[heard:] {
		if st.Name == name {
			t.Errorf("status %s/%s of %s notified after Unload returned", st.Active, st.Sub, name)
		}
	}
}
