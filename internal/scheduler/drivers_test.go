package scheduler

import (
	"testing"

	"github.com/flotilla/flotilla/internal/unit"
)

// parseUnit parses a unit file for the scheduler.
func parseUnit(t *testing.T, name, text string) *Unit {
	t.Helper()
	f, err := unit.Parse(name, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return NewUnit(f)
}

func TestDecideDrivers(t *testing.T) {
	withDrivers := func(id string, d unit.DriverSet) Machine {
		m := mach(id, "", 0, 0)
		m.Drivers = d
		return m
	}
	service := parseUnit(t, "web.service", "[Service]\nExecStart=/bin/web\n")
	timer := parseUnit(t, "backup.timer", "[Timer]\nOnCalendar=daily\n")
	container := parseUnit(t, "db.service", "[X-Container]\nImage=db:1\n")
	forking := parseUnit(t, "old.service", "[Service]\nType=forking\nExecStart=/usr/sbin/oldd\n")

	c := build([]Machine{withDrivers("m1", unit.DriverExec), withDrivers("m2", 0), withDrivers("m3", unit.DriverExec|unit.DriverDocker)}, nil)
	for _, tt := range []struct {
		u      *Unit
		want   string
		reason string
	}{
		{service, "m1", ""},
		{container, "m3", ""},
		{timer, "", "needs a machine with the systemd driver (.timer units run under systemd); no machine runs it"},
		{forking, "", "needs a machine with the systemd driver (Type=forking services run under systemd); no machine runs it"},
	} {
		d := c.Decide(tt.u)
		if d.Machine != tt.want || d.Reason != tt.reason {
			t.Errorf("Decide(%s) = %q, %q; want %q, %q", tt.u.Name, d.Machine, d.Reason, tt.want, tt.reason)
		}
	}

	// With a systemd machine that is full, the reason names the others.
	sd := withDrivers("m4", unit.DriverSystemd)
	sd.Capacity = Resources{CPUPercent: 10}
	c.SetMachine(sd)
	heavy := parseUnit(t, "heavy.service", "[Service]\nType=forking\nExecStart=/usr/sbin/heavyd\nCPUQuota=50%\n")
	d := c.Decide(heavy)
	if want := "needs a machine with the systemd driver (Type=forking services run under systemd), not on m1, m2, m3; needs 50% CPU, largest free is 10% on m4"; d.Reason != want || d.Machine != "" {
		t.Errorf("Decide(heavy) = %q, %q; want the reason %q", d.Machine, d.Reason, want)
	}
	// The timer goes where its service is.
	backup := parseUnit(t, "backup.service", "[Service]\nExecStart=/bin/backup\n")
	c.Place(backup, "m4")
	if d := c.Decide(timer); d.Machine != "m4" {
		t.Errorf("Decide(timer) = %+v, want m4", d)
	}
	// A placed unit no longer fits where its driver went away.
	c.Place(container, "m3")
	c.SetMachine(withDrivers("m3", unit.DriverExec))
	if ok, why := c.Fits(container, "m3"); ok || why != "needs a machine with the docker driver (the unit has an [X-Container] section), not on m3" {
		t.Errorf("Fits(container, m3) = %v, %q", ok, why)
	}
	// The simulated driver runs everything.
	c.SetMachine(withDrivers("m5", unit.DriverSim))
	c.RemoveMachine("m4")
	c.Place(backup, "m5")
	if d := c.Decide(timer); d.Machine != "m5" {
		t.Errorf("Decide(timer) with a sim machine = %+v, want m5", d)
	}
}

// TestAllocateTriggerWithItsUnit: a timer and the service it triggers,
// pending together, land on one machine whatever their order.
func TestAllocateTriggerWithItsUnit(t *testing.T) {
	c := build(machines(3, "", 0, 0), nil)
	for i := range 3 {
		m := c.machines[machineID(i+1)].Machine
		m.Drivers = unit.DriverSystemd
		c.SetMachine(m)
	}
	timer := parseUnit(t, "backup.timer", "[Timer]\nOnCalendar=daily\n")
	service := parseUnit(t, "backup.service", "[Service]\nType=oneshot\nExecStart=/bin/backup\n")
	ds := c.Allocate([]*Unit{timer, service})
	got := map[string]string{}
	for i, d := range ds {
		if d.Machine == "" {
			t.Fatalf("Allocate: decision %d = %+v", i, d)
		}
		got[[]string{"backup.timer", "backup.service"}[i]] = d.Machine
	}
	if got["backup.timer"] != got["backup.service"] {
		t.Errorf("Allocate placed the timer on %s and its service on %s", got["backup.timer"], got["backup.service"])
	}
}
