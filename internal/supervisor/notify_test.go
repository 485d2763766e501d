package supervisor

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// TestNotifyOutlivesDaemon: a Type=notify unit with WatchdogSec= runs
// under the supervisor: it is active once it sends READY=1, and its
// WATCHDOG=1 pings reach the supervisor while no daemon is attached, so
// it is not killed; a next daemon adopts it, same PID, still active.
func TestNotifyOutlivesDaemon(t *testing.T) {
	const notify = "/usr/bin/systemd-notify"
	if _, err := os.Stat(notify); err != nil {
		t.Skip("no systemd-notify")
	}
	t.Parallel()
	dir := newTestDir(t)
	c1, rec1 := newClient(t, dir)
	f := parseUnit(t, "dog.service", `[Service]
Type=notify
NotifyAccess=all
WatchdogSec=1s
ExecStart=/bin/sh -c '`+notify+` --ready --status=up; while :; do `+notify+` WATCHDOG=1 && echo ping; sleep 0.1; done'
`)
	mustLoadStart(t, c1, f)
	st := rec1.wait(t, f.Name, "active", func(st unit.Status) bool { return st.Active == "active" })
	if st.Message != "up" || st.PID == 0 {
		t.Fatalf("active: %+v, want STATUS= up and a PID", st)
	}
	if err := c1.Detach(context.Background()); err != nil {
		t.Fatal(err)
	}
	pings := func() int { return strings.Count(journal(t, c1, f.Name), "ping") }
	n := pings()
	// Three watchdog limits' worth of pings with no daemon.
	waitfor.True(t, waitTimeout, "30 more pings", func() bool { return pings() >= n+30 })
	c2, _ := newClient(t, dir)
	got := c2.States()
	if len(got) != 1 || got[0].PID != st.PID || got[0].Active != "active" || got[0].Result != "success" {
		t.Fatalf("after the daemon's absence: %+v, want %s active with pid %d", got, f.Name, st.PID)
	}
	if log := journal(t, c2, f.Name); strings.Contains(log, "Watchdog timeout") {
		t.Errorf("the watchdog fired:\n%s", log)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := c2.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestUpgradeKeepsNotify: across the supervisor's upgrade in place (an
// execve of another binary) a Type=notify unit keeps its READY=1 state and
// its WATCHDOG=1 pings reach the new image, which binds the socket again:
// the watchdog does not fire.
func TestUpgradeKeepsNotify(t *testing.T) {
	const notify = "/usr/bin/systemd-notify"
	if _, err := os.Stat(notify); err != nil {
		t.Skip("no systemd-notify")
	}
	t.Parallel()
	dir := newTestDir(t)
	a, b := otherBinary(t, "flotilla-A"), otherBinary(t, "flotilla-B")
	c1, rec1, _ := newClientFrom(t, dir, a)
	f := parseUnit(t, "dog.service", `[Service]
Type=notify
NotifyAccess=all
WatchdogSec=1s
ExecStart=/bin/sh -c '`+notify+` --ready; while :; do `+notify+` WATCHDOG=1 && echo ping; sleep 0.1; done'
`)
	mustLoadStart(t, c1, f)
	st := rec1.wait(t, f.Name, "active", func(st unit.Status) bool { return st.Active == "active" })
	sup := supervisorPID(t, dir)
	if err := c1.Detach(context.Background()); err != nil {
		t.Fatal(err)
	}
	c2, _, logs := newClientFrom(t, dir, b)
	if got := exeOf(t, sup); got != b || supervisorPID(t, dir) != sup {
		t.Fatalf("supervisor %d runs %s, want %s after an upgrade in place\n%s", supervisorPID(t, dir), got, b, logs)
	}
	pings := func() int { return strings.Count(journal(t, c2, f.Name), "ping") }
	n := pings()
	waitfor.True(t, waitTimeout, "30 more pings after the upgrade", func() bool { return pings() >= n+30 })
	if got := stateOf(t, c2, f.Name); got.PID != st.PID || got.Active != "active" {
		t.Fatalf("after the upgrade: %+v, want active with pid %d", got, st.PID)
	}
	if log := journal(t, c2, f.Name); strings.Contains(log, "Watchdog timeout") {
		t.Errorf("the watchdog fired across the upgrade:\n%s", log)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := c2.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
