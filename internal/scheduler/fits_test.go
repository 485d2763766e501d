package scheduler

import (
	"reflect"
	"slices"
	"testing"
)

func TestFits(t *testing.T) {
	ms := []Machine{mach("m1", "region=us", 400, 4*gib), mach("m2", "region=eu", 400, 4*gib)}
	type check struct {
		unit    *Unit
		machine string
		ok      bool
		why     string
	}
	db := mk(t, "db.service")
	follower := mk(t, "app.service", "MachineOf=db.service")
	web1 := mk(t, "web@1.service", "Conflicts=web@*.service")
	web2 := mk(t, "web@2.service", "Conflicts=web@*.service")
	older, newer := mk(t, "old.service"), mk(t, "new.service", "Replaces=old.service")
	a, b, c2 := mk(t, "a.service", "MemoryMax=2G"), mk(t, "b.service", "MemoryMax=2G"), mk(t, "c.service", "MemoryMax=2G")
	tests := []struct {
		name   string
		placed []at
		change func(c *Cluster)
		checks []check
	}{
		{
			name:   "a unit alone fits",
			placed: []at{{web1, "m1"}},
			checks: []check{{web1, "m1", true, ""}, {web1, "m2", true, ""}},
		},
		{
			name:   "machine gone",
			checks: []check{{db, "m9", false, "machine m9 is not available"}},
		},
		{
			name:   "MachineID",
			checks: []check{{mk(t, "x.service", "MachineID=m2"), "m1", false, "MachineID=m2 rules out m1"}},
		},
		{
			name:   "metadata changed under it",
			placed: []at{{mk(t, "x.service", "MachineMetadata=region=us"), "m1"}},
			change: func(c *Cluster) { c.SetMachine(mach("m1", "region=eu", 400, 4*gib)) },
			checks: []check{{mk(t, "x.service", "MachineMetadata=region=us"), "m1", false, "metadata does not match region=us on m1"}},
		},
		{
			name:   "MachineOf unit moved",
			placed: []at{{db, "m1"}, {follower, "m1"}},
			change: func(c *Cluster) { c.Place(db, "m2") },
			checks: []check{{follower, "m1", false, "MachineOf=db.service: that unit is not on m1"}, {follower, "m2", true, ""}},
		},
		{
			name:   "MachineOf unit stopped",
			placed: []at{{db, "m1"}, {follower, "m1"}},
			change: func(c *Cluster) { c.Unplace("db.service") },
			checks: []check{{follower, "m1", false, "MachineOf=db.service: that unit is not scheduled"}},
		},
		{
			name:   "conflicting units together: both must move",
			placed: []at{{web1, "m1"}, {web2, "m1"}},
			checks: []check{
				{web1, "m1", false, "conflicts with web@2.service on m1"},
				{web2, "m1", false, "conflicts with web@1.service on m1"},
			},
		},
		{
			name:   "a replaced unit is the one to move",
			placed: []at{{older, "m1"}, {newer, "m1"}},
			checks: []check{{newer, "m1", true, ""}, {older, "m1", false, "replaced by new.service on m1"}, {older, "m2", true, ""}},
		},
		{
			name:   "units replacing each other on two machines: the first by name stays",
			placed: []at{{mk(t, "a.service", "Replaces=b.service"), "m1"}, {mk(t, "b.service", "Replaces=a.service"), "m2"}},
			checks: []check{
				{mk(t, "a.service", "Replaces=b.service"), "m1", true, ""},
				{mk(t, "b.service", "Replaces=a.service"), "m2", false, "b.service and a.service replace each other (Replaces=), and a.service runs on m1: only one of them runs at a time"},
			},
		},
		{
			name:   "resources of a unit not placed there",
			placed: []at{{a, "m1"}, {b, "m1"}},
			checks: []check{{c2, "m1", false, "needs 2G memory, largest free is 0B on m1"}, {c2, "m2", true, ""}},
		},
		{
			name:   "capacity shrank: the units sorting first keep their room",
			placed: []at{{a, "m1"}, {b, "m1"}, {c2, "m1"}, {mk(t, "d.service"), "m1"}},
			checks: []check{
				{a, "m1", true, ""}, {b, "m1", true, ""},
				{c2, "m1", false, "needs 2G memory, largest free is 0B on m1"},
				{mk(t, "d.service"), "m1", true, ""}, // needs no memory
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := build(ms, tt.placed)
			if tt.change != nil {
				tt.change(c)
			}
			for _, ck := range tt.checks {
				ok, why := c.Fits(ck.unit, ck.machine)
				if ok != ck.ok || why != ck.why {
					t.Errorf("Fits(%s, %s) = %v, %q, want %v, %q", ck.unit.Name, ck.machine, ok, why, ck.ok, ck.why)
				}
			}
		})
	}
}

func TestGlobalMachines(t *testing.T) {
	ms := []Machine{
		mach("m1", "region=us", 400, 4*gib),
		mach("m2", "region=eu", 400, 4*gib),
		mach("m3", "region=us", 400, 4*gib),
		mach("m4", "region=us", 400, 1*gib),
	}
	tests := []struct {
		name   string
		opts   Options
		placed []at
		unit   *Unit
		want   []string
	}{
		{name: "every machine", unit: mk(t, "g.service", "Global=true"), want: []string{"m1", "m2", "m3", "m4"}},
		{name: "metadata", unit: mk(t, "g.service", "Global=true", "MachineMetadata=region=us"), want: []string{"m1", "m3", "m4"}},
		{name: "not global", unit: mk(t, "g.service"), want: nil},
		{
			name: "resources", unit: mk(t, "g.service", "Global=true", "MemoryMax=2G", "MachineMetadata=region=us"),
			want: []string{"m1", "m3"},
		},
		{
			name:   "conflicts both ways",
			placed: []at{{mk(t, "x.service", "Conflicts=g.service"), "m1"}, {mk(t, "batch.service"), "m3"}},
			unit:   mk(t, "g.service", "Global=true", "Conflicts=batch*"),
			want:   []string{"m2", "m4"},
		},
		{
			name:   "already placed: still fits where it runs",
			placed: []at{{mk(t, "g.service", "Global=true", "Conflicts=g.service", "MemoryMax=3G"), "m1"}},
			unit:   mk(t, "g.service", "Global=true", "Conflicts=g.service", "MemoryMax=3G"),
			want:   []string{"m1", "m2", "m3"},
		},
		{
			name:   "quota: machines it runs on stay, new ones in ID order",
			opts:   Options{Roles: map[string]RolePolicy{"ops": {Quota: Resources{CPUPercent: 300}}}},
			placed: []at{{mk(t, "g.service", "Global=true", "Role=ops", "CPUQuota=100%"), "m3"}},
			unit:   mk(t, "g.service", "Global=true", "Role=ops", "CPUQuota=100%"),
			want:   []string{"m1", "m2", "m3"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := build(ms, nil)
			if err := c.SetOptions(tt.opts); err != nil {
				t.Fatal(err)
			}
			for _, p := range tt.placed {
				c.Place(p.u, p.m)
			}
			if got := c.GlobalMachines(tt.unit); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("GlobalMachines(%s) = %q, want %q", tt.unit.Name, got, tt.want)
			}
		})
	}
}

// TestGlobalConvergence runs the engine's loop for global units: two that
// conflict, found together on a machine, settle after one round and stay.
func TestGlobalConvergence(t *testing.T) {
	c := build(machines(3, "", 0, 0), nil)
	units := []*Unit{
		mk(t, "a.service", "Global=true", "Conflicts=b.service"),
		mk(t, "b.service", "Global=true"),
	}
	// Start from a bad state: both on m02.
	c.Place(units[0], "m02")
	c.Place(units[1], "m02")
	var history []string
	for range 4 {
		for _, u := range units {
			want := c.GlobalMachines(u)
			for _, id := range c.GlobalPlacements(u.Name) {
				if !slices.Contains(want, id) {
					c.UnplaceFrom(u.Name, id)
				}
			}
			for _, id := range want {
				c.Place(u, id)
			}
		}
		history = append(history, c.state())
	}
	// In round one, a leaves m02 (b conflicts with it there) for the
	// other machines; b then still fits on m02, and keeps it.
	want := "a.service:m01,m03 b.service:m02"
	for i, h := range history {
		if h != want {
			t.Errorf("round %d: placements %s, want %s (history %q)", i+1, h, want, history)
		}
	}
	// Starting clean, the first by name takes every machine.
	c = build(machines(3, "", 0, 0), nil)
	for _, u := range units {
		for _, id := range c.GlobalMachines(u) {
			c.Place(u, id)
		}
	}
	if got, want := c.state(), "a.service:m01,m02,m03"; got != want {
		t.Errorf("placements from scratch = %s, want %s", got, want)
	}
	if d := c.Decide(units[0]); d.Machine != "" || d.Reason == "" {
		t.Errorf("Decide(global unit) = %+v, want a reason and no machine", d)
	}
}
