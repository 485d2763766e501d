package daemontest_test

import (
	"context"
	"strings"
	"syscall"
	"testing"

	"github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/daemon/daemontest"
)

// alive reports whether a process with the PID exists.
func alive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

func running(u *api.Unit) bool {
	return u.State != nil && u.State.Active == "active" && u.State.PID > 0 && u.State.Machine == u.Machine
}

// TestReplaces: fleet's Replaces= on real processes. A unit replacing a
// running one takes its machine and the replaced unit moves to the other
// machine (its old process gone, a new one running there); a replaced unit
// that may run nowhere else stays unplaced with the reason; of two units
// that replace each other, only one runs.
func TestReplaces(t *testing.T) {
	c := daemontest.Start(t, daemontest.Machine{ID: "a", Exec: true}, daemontest.Machine{ID: "b", Exec: true})
	cl, err := client.New(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	put := func(name, file string) {
		t.Helper()
		if _, err := cl.PutUnit(ctx, api.UnitChange{Name: name, File: file, DesiredState: "launched"}); err != nil {
			t.Fatalf("put %s: %v", name, err)
		}
	}
	const sleep = "[Service]\nExecStart=/bin/sleep 1000\n"

	// old.service runs on a (the first of two empty machines); the unit
	// replacing it takes a, though b is empty, and pushes it to b.
	put("old.service", sleep)
	old := daemontest.WaitUnit(t, cl, "old.service", running)
	if old.Machine != "a" {
		t.Fatalf("old.service on %s, want a", old.Machine)
	}

	put("new.service", sleep+"[X-Fleet]\nReplaces=old.service\n")
	nu := daemontest.WaitUnit(t, cl, "new.service", running)
	if nu.Machine != "a" {
		t.Fatalf("new.service on %s, want a (the machine of old.service, which it replaces)", nu.Machine)
	}
	moved := daemontest.WaitUnit(t, cl, "old.service", func(u *api.Unit) bool { return running(u) && u.Machine == "b" })
	if alive(old.State.PID) {
		t.Errorf("old.service's process %d on a still runs after it moved to b", old.State.PID)
	}
	if !alive(moved.State.PID) || !alive(nu.State.PID) {
		t.Errorf("processes: old.service on b %d alive %v, new.service on a %d alive %v", moved.State.PID, alive(moved.State.PID), nu.State.PID, alive(nu.State.PID))
	}

	// A replaced unit pinned to its machine cannot move: it stops, and
	// says why it runs nowhere.
	put("pinned.service", sleep+"[X-Fleet]\nMachineID=b\n")
	pinned := daemontest.WaitUnit(t, cl, "pinned.service", running)
	put("pusher.service", sleep+"[X-Fleet]\nReplaces=pinned.service\n")
	daemontest.WaitUnit(t, cl, "pusher.service", func(u *api.Unit) bool { return running(u) && u.Machine == "b" })
	stuck := daemontest.WaitUnit(t, cl, "pinned.service", func(u *api.Unit) bool {
		return u.Machine == "" && strings.Contains(u.Reason, "replaced by pusher.service on b")
	})
	if alive(pinned.State.PID) {
		t.Errorf("pinned.service's process %d still runs; reason %q", pinned.State.PID, stuck.Reason)
	}

	// Two units replacing each other: the first placed runs, the other
	// waits with the reason.
	put("x.service", sleep+"[X-Fleet]\nReplaces=y.service\n")
	x := daemontest.WaitUnit(t, cl, "x.service", running)
	put("y.service", sleep+"[X-Fleet]\nReplaces=x.service\n")
	y := daemontest.WaitUnit(t, cl, "y.service", func(u *api.Unit) bool { return u.Reason != "" })
	if y.Machine != "" || !strings.Contains(y.Reason, "replace each other") || (y.State != nil && y.State.Active == "active") {
		t.Fatalf("y.service = %+v, want it unplaced: x.service replaces it and it replaces x.service", y)
	}
	if x2, err := cl.Unit(ctx, "x.service"); err != nil || x2.State == nil || x2.State.PID != x.State.PID || !alive(x.State.PID) {
		t.Fatalf("x.service = %+v, %v; want it still running as %d", x2, err, x.State.PID)
	}
	// Once x.service stops, y.service runs.
	if _, err := cl.PutUnit(ctx, api.UnitChange{Name: "x.service", DesiredState: "inactive"}); err != nil {
		t.Fatal(err)
	}
	daemontest.WaitUnit(t, cl, "y.service", running)
}
