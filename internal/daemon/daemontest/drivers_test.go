package daemontest_test

import (
	"context"
	"slices"
	"testing"

	"github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/daemon/daemontest"
)

// TestDriversPlacement: machines say which drivers they run, and units go
// only where one of them can run them, with a reason otherwise.
func TestDriversPlacement(t *testing.T) {
	c := daemontest.Start(t,
		daemontest.Machine{ID: "a", Exec: true},
		daemontest.Machine{ID: "b", Driver: "sim"})
	cl, err := client.New(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ml, err := cl.Machines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := [][]string{ml.Machines[0].Drivers, ml.Machines[1].Drivers}; !slices.Equal(got[0], []string{"exec"}) || !slices.Equal(got[1], []string{"sim"}) {
		t.Fatalf("machine drivers = %q, want [exec] [sim]", got)
	}

	// A timer can only run on b (sim runs everything); pinned to a, it
	// says why it cannot be placed.
	put := func(name, file string) {
		t.Helper()
		if _, err := cl.PutUnit(ctx, api.UnitChange{Name: name, File: file, DesiredState: "launched"}); err != nil {
			t.Fatalf("PutUnit(%s) = %v", name, err)
		}
	}
	put("tick.service", "[Service]\nType=oneshot\nExecStart=/bin/true\n[X-Fleet]\nMachineID=b\n")
	put("tick.timer", "[Timer]\nOnActiveSec=1h\n")
	u := daemontest.WaitUnit(t, cl, "tick.timer", func(u *api.Unit) bool { return u.Machine != "" })
	if u.Machine != "b" {
		t.Errorf("tick.timer placed on %s, want b (with tick.service)", u.Machine)
	}
	put("old.service", "[Service]\nType=forking\nExecStart=/usr/sbin/oldd\n[X-Fleet]\nMachineID=a\n")
	u = daemontest.WaitUnit(t, cl, "old.service", func(u *api.Unit) bool { return u.Reason != "" })
	if want := "needs a machine with the systemd driver (Type=forking services run under systemd), not on a"; u.Reason != want {
		t.Errorf("old.service reason = %q, want %q", u.Reason, want)
	}
	put("db.service", "[X-Container]\nImage=db:1\n[X-Fleet]\nMachineID=a\n")
	u = daemontest.WaitUnit(t, cl, "db.service", func(u *api.Unit) bool { return u.Reason != "" })
	if want := "needs a machine with the docker driver (the unit has an [X-Container] section), not on a"; u.Reason != want {
		t.Errorf("db.service reason = %q, want %q", u.Reason, want)
	}
}
