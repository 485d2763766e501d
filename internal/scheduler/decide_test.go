package scheduler

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestDecide(t *testing.T) {
	two := []Machine{mach("m1", "region=us,disk=ssd", 0, 0), mach("m2", "region=eu,disk=hdd", 0, 0)}
	three := []Machine{mach("m1", "region=us", 0, 0), mach("m2", "region=us", 0, 0), mach("m3", "region=eu", 0, 0)}
	small := []Machine{mach("m1", "", 400, 4*gib), mach("m2", "", 200, 2*gib), mach("m3", "", 0, 0)}
	// Twenty machines, one in eu: the metadata index picks the candidates.
	twenty := machines(20, "region=us", 0, 0)
	twenty[7] = mach("m08", "region=eu", 0, 0)

	tests := []struct {
		name     string
		machines []Machine
		placed   []at
		unit     *Unit
		want     Decision
	}{
		// Ranking with no rules: fewest units, then most free, then ID.
		{name: "empty cluster", unit: mk(t, "a.service"), want: Decision{Reason: "no machines available"}},
		{name: "tie goes to the lowest ID", machines: three, unit: mk(t, "a.service"), want: Decision{Machine: "m1"}},
		{
			name: "fewest units", machines: three,
			placed: []at{{mk(t, "x.service"), "m1"}, {mk(t, "y.service"), "m2"}},
			unit:   mk(t, "a.service"), want: Decision{Machine: "m3"},
		},
		{
			name: "same count: most free resources", machines: small,
			placed: []at{{mk(t, "x.service", "CPUQuota=100%"), "m1"}, {mk(t, "y.service", "CPUQuota=100%"), "m2"}, {mk(t, "z.service"), "m3"}},
			unit:   mk(t, "a.service"), want: Decision{Machine: "m3"}, // unknown capacity counts as all free
		},

		// MachineID=.
		{name: "MachineID", machines: three, unit: mk(t, "a.service", "MachineID=m2"), want: Decision{Machine: "m2"}},
		{
			name: "MachineID absent", machines: three, unit: mk(t, "a.service", "MachineID=m9"),
			want: Decision{Reason: "MachineID=m9: no such machine is available"},
		},
		{
			name: "MachineID without room", machines: small,
			unit: mk(t, "a.service", "MachineID=m2", "MemoryMax=3G"),
			want: Decision{Reason: "needs 3G memory, largest free is 2G on m2"},
		},
		{
			name: "MachineID with other metadata", machines: two,
			unit: mk(t, "a.service", "MachineID=m2", "MachineMetadata=region=us"),
			want: Decision{Reason: "metadata does not match region=us on m2"},
		},

		// MachineMetadata=: keys AND, values of one key OR.
		{name: "metadata", machines: two, unit: mk(t, "a.service", "MachineMetadata=region=eu"), want: Decision{Machine: "m2"}},
		{
			name: "metadata values OR", machines: three, placed: []at{{mk(t, "x.service"), "m1"}},
			unit: mk(t, "a.service", "MachineMetadata=region=eu region=us"), want: Decision{Machine: "m2"},
		},
		{
			name: "metadata keys AND", machines: two,
			unit: mk(t, "a.service", "MachineMetadata=region=eu region=us", "MachineMetadata=disk=hdd"), want: Decision{Machine: "m2"},
		},
		{
			name: "no machine has the value", machines: two, unit: mk(t, "a.service", "MachineMetadata=region=ap"),
			want: Decision{Reason: "no machine has region=ap"},
		},
		{
			name: "no machine has one of the keys", machines: two, unit: mk(t, "a.service", "MachineMetadata=region=us gpu=yes"),
			want: Decision{Reason: "no machine has gpu=yes"},
		},
		{
			name: "no machine has the combination", machines: two, unit: mk(t, "a.service", "MachineMetadata=region=us disk=hdd"),
			want: Decision{Reason: "no machine has disk=hdd, region=us"},
		},
		{name: "metadata index", machines: twenty, unit: mk(t, "a.service", "MachineMetadata=region=eu"), want: Decision{Machine: "m08"}},
		{
			name: "metadata index, candidate rejected", machines: twenty,
			placed: []at{{mk(t, "x.service", "Conflicts=a.service"), "m08"}},
			unit:   mk(t, "a.service", "MachineMetadata=region=eu"),
			want:   Decision{Reason: "metadata does not match region=eu on m01, m02, m03, m04, m05 and 14 more; conflicts with x.service on m08"},
		},

		// MachineOf=.
		{
			name: "MachineOf", machines: three, placed: []at{{mk(t, "db.service"), "m3"}},
			unit: mk(t, "a.service", "MachineOf=db.service"), want: Decision{Machine: "m3"},
		},
		{
			name: "MachineOf two units together", machines: three,
			placed: []at{{mk(t, "db.service"), "m2"}, {mk(t, "cache.service"), "m2"}},
			unit:   mk(t, "a.service", "MachineOf=db.service cache.service"), want: Decision{Machine: "m2"},
		},
		{
			name: "MachineOf unscheduled", machines: three,
			unit: mk(t, "a.service", "MachineOf=db.service"), want: Decision{Reason: "MachineOf=db.service: that unit is not scheduled"},
		},
		{
			name: "MachineOf units apart", machines: three,
			placed: []at{{mk(t, "db.service"), "m2"}, {mk(t, "cache.service"), "m1"}},
			unit:   mk(t, "a.service", "MachineOf=db.service cache.service"),
			want:   Decision{Reason: "MachineOf=db.service, cache.service: no machine runs them all (db.service on m2; cache.service on m1)"},
		},
		{
			name: "MachineOf a global unit", machines: three,
			placed: []at{{mk(t, "log.service", "Global=true"), "m2"}, {mk(t, "log.service", "Global=true"), "m3"}, {mk(t, "x.service"), "m2"}},
			unit:   mk(t, "a.service", "MachineOf=log.service"), want: Decision{Machine: "m3"},
		},
		{
			name: "MachineOf machine full", machines: small,
			placed: []at{{mk(t, "db.service", "MemoryMax=1536M"), "m2"}},
			unit:   mk(t, "a.service", "MachineOf=db.service", "MemoryMax=1G"),
			want:   Decision{Reason: "needs 1G memory, largest free is 512M on m2"},
		},

		// Conflicts=, in both directions.
		{
			name: "conflicts: its pattern matches a unit there", machines: three,
			placed: []at{{mk(t, "web@1.service"), "m1"}},
			unit:   mk(t, "web@2.service", "Conflicts=web@*.service"), want: Decision{Machine: "m2"},
		},
		{
			name: "conflicts: a unit there matches it", machines: three,
			placed: []at{{mk(t, "web@1.service", "Conflicts=web@*.service"), "m1"}},
			unit:   mk(t, "web@2.service"), want: Decision{Machine: "m2"},
		},
		{
			name: "conflicts: exact name", machines: three,
			placed: []at{{mk(t, "db.service"), "m1"}, {mk(t, "x.service"), "m2"}, {mk(t, "y.service"), "m3"}},
			unit:   mk(t, "a.service", "Conflicts=db.service"), want: Decision{Machine: "m2"},
		},
		{
			name: "conflicts: a unit matching its own pattern", machines: three[:1],
			unit: mk(t, "web@1.service", "Conflicts=web@*.service"), want: Decision{Machine: "m1"},
		},
		{
			name: "conflicts everywhere, one unit", machines: three[:2],
			placed: []at{{mk(t, "log.service", "Global=true", "Conflicts=batch-*"), "m1"}, {mk(t, "log.service", "Global=true", "Conflicts=batch-*"), "m2"}},
			unit:   mk(t, "batch-1.service"), want: Decision{Reason: "conflicts with log.service on m1, m2"},
		},
		{
			name: "conflicts everywhere, several units", machines: three,
			placed: []at{{mk(t, "web@1.service"), "m1"}, {mk(t, "web@2.service", "Conflicts=api.service"), "m2"}, {mk(t, "web@3.service"), "m3"}},
			unit:   mk(t, "api.service", "Conflicts=web@1.service web@3.service"),
			want:   Decision{Reason: "conflicts with web@1.service on m1, web@2.service on m2, web@3.service on m3"},
		},
		{
			name: "conflicts with a glob of character classes", machines: three[:2],
			placed: []at{{mk(t, "db-a.service"), "m1"}, {mk(t, "db-c.service"), "m2"}},
			unit:   mk(t, "x.service", "Conflicts=db-[ab].service"), want: Decision{Machine: "m2"},
		},

		// Replaces= (fleet's rule): take the replaced unit's machine and
		// displace it; keep off it only when it does not fit there.
		{
			name: "replaces: takes its machine though another is emptier", machines: three[:2],
			placed: []at{{mk(t, "old.service"), "m1"}, {mk(t, "x.service"), "m1"}, {mk(t, "y.service"), "m2"}},
			unit:   mk(t, "new.service", "Replaces=old.service"),
			want:   Decision{Machine: "m1", Displaced: []string{"old.service"}},
		},
		{
			// fleet's functional TestScheduleReplace: replace.0 on m0,
			// replace.1 and replace.2 on m1; replace-kick0 takes m0.
			name: "replaces: fleet's TestScheduleReplace", machines: three[:2],
			placed: []at{{mk(t, "replace.0.service"), "m1"}, {mk(t, "replace.1.service"), "m2"}, {mk(t, "replace.2.service", "MachineOf=replace.1.service"), "m2"}},
			unit:   mk(t, "replace-kick0.service", "Replaces=replace.0.service"),
			want:   Decision{Machine: "m1", Displaced: []string{"replace.0.service"}},
		},
		{
			name: "replaces: several, the best of their machines", machines: three,
			placed: []at{{mk(t, "a.service"), "m1"}, {mk(t, "x.service"), "m1"}, {mk(t, "b.service"), "m2"}},
			unit:   mk(t, "new.service", "Replaces=a.service b.service"),
			want:   Decision{Machine: "m2", Displaced: []string{"b.service"}},
		},
		{
			name: "replaces: its machine does not fit, another does", machines: two,
			placed: []at{{mk(t, "old.service"), "m2"}},
			unit:   mk(t, "new.service", "Replaces=old.service", "MachineMetadata=region=us"),
			want:   Decision{Machine: "m1"},
		},
		{
			name: "replaces: nothing placed to replace", machines: three[:2],
			placed: []at{{mk(t, "x.service"), "m1"}},
			unit:   mk(t, "new.service", "Replaces=old.service"), want: Decision{Machine: "m2"},
		},
		{
			name: "replaces: the only machine runs it", machines: two,
			placed: []at{{mk(t, "old.service"), "m1"}},
			unit:   mk(t, "new.service", "Replaces=old.service", "MachineMetadata=region=us"),
			want:   Decision{Machine: "m1", Displaced: []string{"old.service"}},
		},
		{
			name: "replaces: its room counts as free", machines: small[:2],
			placed: []at{{mk(t, "old.service", "MemoryMax=3G"), "m1"}, {mk(t, "x.service", "MemoryMax=1G"), "m2"}},
			unit:   mk(t, "new.service", "Replaces=old.service", "MemoryMax=4G"),
			want:   Decision{Machine: "m1", Displaced: []string{"old.service"}},
		},
		{
			name: "replaces: its conflicts leave with it", machines: two[:1],
			placed: []at{{mk(t, "old.service", "Conflicts=new.service"), "m1"}},
			unit:   mk(t, "new.service", "Replaces=old.service"),
			want:   Decision{Machine: "m1", Displaced: []string{"old.service"}},
		},
		{
			name: "replaces: displacing is not enough", machines: small[:1],
			placed: []at{{mk(t, "old.service", "MemoryMax=1G"), "m1"}, {mk(t, "x.service", "MemoryMax=2G"), "m1"}},
			unit:   mk(t, "new.service", "Replaces=old.service", "MemoryMax=3G"),
			want:   Decision{Reason: "needs 3G memory, largest free is 2G on m1"},
		},
		{
			name: "replaced by a unit there", machines: three[:2],
			placed: []at{{mk(t, "new.service", "Replaces=old.service"), "m1"}},
			unit:   mk(t, "old.service"), want: Decision{Machine: "m2"},
		},
		{
			name: "replaced by a unit on the only machine", machines: three[:1],
			placed: []at{{mk(t, "new.service", "Replaces=old.service"), "m1"}},
			unit:   mk(t, "old.service"), want: Decision{Reason: "replaced by new.service on m1"},
		},
		{
			name: "replacing each other: only one runs", machines: three,
			placed: []at{{mk(t, "b.service", "Replaces=a.service"), "m1"}},
			unit:   mk(t, "a.service", "Replaces=b.service"),
			want:   Decision{Reason: "a.service and b.service replace each other (Replaces=), and b.service runs on m1: only one of them runs at a time"},
		},
		{
			name: "replacing each other: the first placed runs", machines: three[:2],
			placed: []at{{mk(t, "b.service"), "m1"}},
			unit:   mk(t, "a.service", "Replaces=b.service"),
			want:   Decision{Machine: "m1", Displaced: []string{"b.service"}},
		},
		{
			name: "replaces a global unit", machines: three[:1],
			placed: []at{{mk(t, "old.service", "Global=true"), "m1"}},
			unit:   mk(t, "new.service", "Replaces=old.service"),
			want:   Decision{Reason: "Replaces=old.service names a global unit, which runs on m1"},
		},

		// Resources.
		{
			name: "resources: fits where free", machines: small[:2],
			placed: []at{{mk(t, "x.service", "MemoryMax=3G"), "m1"}},
			unit:   mk(t, "a.service", "MemoryMax=2G"), want: Decision{Machine: "m2"},
		},
		{
			name: "resources: unknown capacity takes anything", machines: small,
			unit: mk(t, "a.service", "CPUQuota=800%", "MemoryMax=64G"), want: Decision{Machine: "m3"},
		},
		{
			name: "resources: cpu", machines: small[:2],
			placed: []at{{mk(t, "x.service", "CPUQuota=300%"), "m1"}},
			unit:   mk(t, "a.service", "CPUQuota=250%"), want: Decision{Reason: "needs 250% CPU, largest free is 200% on m1, m2"},
		},
		{
			name: "resources: memory on many machines", machines: machines(8, "", 400, 1*gib),
			unit: mk(t, "a.service", "MemoryMax=4096M"),
			want: Decision{Reason: "needs 4G memory, largest free is 1G on m01, m02, m03, m04, m05 and 3 more"},
		},
		{
			name: "resources: one machine short of cpu, one of memory", machines: small[:2],
			placed: []at{{mk(t, "x.service", "CPUQuota=400%"), "m1"}},
			unit:   mk(t, "a.service", "CPUQuota=100%", "MemoryMax=3G"),
			want:   Decision{Reason: "needs 100% CPU, largest free is 0% on m1; needs 3G memory, largest free is 2G on m2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := build(tt.machines, tt.placed)
			got := c.Decide(tt.unit)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Decide(%s) = %+v, want %+v", tt.unit.Name, got, tt.want)
			}
			if got.Machine != "" {
				if ok, why := c.Fits(tt.unit, got.Machine); !ok && len(got.Displaced) == 0 {
					t.Errorf("Fits(%s, %s) = false, %q after Decide chose it", tt.unit.Name, got.Machine, why)
				}
			}
		})
	}
}

func TestDecidePlacedUnit(t *testing.T) {
	// A unit already placed is decided as if it were not, and stays placed.
	c := build(machines(2, "", 0, 0), nil)
	a := mk(t, "a.service")
	c.Place(a, "m02")
	c.Place(mk(t, "b.service"), "m01")
	if got := c.Decide(a); got.Machine != "m02" {
		t.Errorf("Decide(a) = %+v, want m02 (empty without a; m01 runs b)", got)
	}
	if m, ok := c.Where("a.service"); !ok || m != "m02" {
		t.Errorf("Where(a) = %q, %v after Decide, want m02, true", m, ok)
	}
}

func TestStrategies(t *testing.T) {
	ms := []Machine{mach("m1", "", 800, 8*gib), mach("m2", "", 800, 8*gib), mach("m3", "", 400, 2*gib)}
	placed := []at{
		{mk(t, "x.service", "CPUQuota=400%", "MemoryMax=4G"), "m1"},
		{mk(t, "y.service", "CPUQuota=100%", "MemoryMax=1G"), "m2"},
		{mk(t, "z.service", "CPUQuota=100%", "MemoryMax=1G"), "m2"},
	}
	tests := []struct {
		cluster string
		opts    []string
		want    string
	}{
		// Spread: m3 has no unit.
		{"", nil, "m3"},
		{Spread, nil, "m3"},
		// Binpack: after placing 1 CPU and 1G, m1 has 3/8 CPU and 3/8
		// memory free, m2 5/8 and 5/8, m3 3/4 and 1/2: m1.
		{Binpack, nil, "m1"},
		// The unit's Placement= wins over the cluster's.
		{Spread, []string{"Placement=binpack"}, "m1"},
		{Binpack, []string{"Placement=spread"}, "m3"},
	}
	for _, tt := range tests {
		c := build(ms, placed)
		if err := c.SetOptions(Options{Strategy: tt.cluster}); err != nil {
			t.Fatal(err)
		}
		u := mk(t, "a.service", append([]string{"CPUQuota=100%", "MemoryMax=1G"}, tt.opts...)...)
		if got := c.Decide(u); got.Machine != tt.want {
			t.Errorf("cluster %q, unit %q: Decide = %+v, want %s", tt.cluster, tt.opts, got, tt.want)
		}
	}
}

func TestBinpackFillsMachines(t *testing.T) {
	c := build(machines(3, "", 400, 4*gib), nil)
	if err := c.SetOptions(Options{Strategy: Binpack}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := range 9 {
		u := mk(t, "u"+string(rune('a'+i))+".service", "CPUQuota=100%", "MemoryMax=1G")
		d := c.Decide(u)
		c.Place(u, d.Machine)
		got = append(got, d.Machine)
	}
	want := "m01 m01 m01 m01 m02 m02 m02 m02 m03"
	if strings.Join(got, " ") != want {
		t.Errorf("binpack placements = %s, want %s", strings.Join(got, " "), want)
	}
}

func TestQuota(t *testing.T) {
	c := build(machines(2, "", 800, 8*gib), nil)
	err := c.SetOptions(Options{Roles: map[string]RolePolicy{"batch": {Quota: Resources{CPUPercent: 400, MemoryBytes: 8 * gib}}}})
	if err != nil {
		t.Fatal(err)
	}
	c.Place(mk(t, "b1.service", "Role=batch", "CPUQuota=300%", "MemoryMax=1G"), "m01")
	tests := []struct {
		unit *Unit
		want string // reason, "" for placed
	}{
		{mk(t, "b2.service", "Role=batch", "CPUQuota=100%"), ""},
		{mk(t, "b2.service", "Role=batch", "CPUQuota=200%"), "role batch would exceed its quota (cpu 400%, memory 8G; in use: cpu 300%, memory 1G)"},
		{mk(t, "b2.service", "Role=batch", "MemoryMax=7G"), ""},
		{mk(t, "b2.service", "Role=batch", "MemoryMax=8G"), "role batch would exceed its quota (cpu 400%, memory 8G; in use: cpu 300%, memory 1G)"},
		{mk(t, "b2.service", "Role=batch"), ""},   // needs nothing
		{mk(t, "w.service", "CPUQuota=800%"), ""}, // another role
	}
	for _, tt := range tests {
		if got := c.Decide(tt.unit); got.Reason != tt.want {
			t.Errorf("Decide(%s needing %+v) = %+v, want reason %q", tt.unit.Name, tt.unit.Needs, got, tt.want)
		}
	}
}

func TestOptionsValidation(t *testing.T) {
	bad := []struct {
		opts Options
		want string
	}{
		{Options{Strategy: "random"}, `strategy "random" (want spread or binpack)`},
		{Options{Roles: map[string]RolePolicy{"a": {Weight: -1}}}, "role a: weight -1"},
		{Options{Roles: map[string]RolePolicy{"": {}}}, "empty role name"},
		{Options{Roles: map[string]RolePolicy{"a": {Quota: Resources{CPUPercent: -1}}}}, "role a: negative quota"},
	}
	c := NewCluster()
	for _, tt := range bad {
		err := c.SetOptions(tt.opts)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("SetOptions(%+v) = %v, want ErrInvalidOptions containing %q", tt.opts, err, tt.want)
		}
	}
	if got := c.Options(); got.Strategy != Spread || len(got.Roles) != 0 {
		t.Errorf("Options() after rejected SetOptions = %+v, want the defaults", got)
	}
	if err := c.SetOptions(Options{Roles: map[string]RolePolicy{"a": {}}}); err != nil {
		t.Fatal(err)
	}
	if got := c.Options().Roles["a"].Weight; got != 1 {
		t.Errorf("Options().Roles[a].Weight = %v, want 1 filled in", got)
	}
}

// TestChains shows the checkers each kind of decision runs for a unit: only
// those its rules need.
func TestChains(t *testing.T) {
	c := build(machines(1, "", 0, 0), []at{
		{mk(t, "x.service", "Conflicts=a*"), "m01"},
		{mk(t, "y.service", "Replaces=a.service"), "m01"},
	})
	names := func(ch []checker) string {
		var s []string
		for _, k := range ch {
			s = append(s, k.name)
		}
		return strings.Join(s, " ")
	}
	tests := []struct {
		unit             *Unit
		decide, resident string
	}{
		{mk(t, "b.service"), "", ""},
		{mk(t, "b.service", "MemoryMax=1G"), "Resources", "Resources"},
		{mk(t, "a.service"), "Conflicts ReplacedBy", "Conflicts ReplacedBy"},
		{
			mk(t, "b.service", "MachineMetadata=k=v", "Replaces=z.service", "CPUQuota=10%"),
			"Replaces MachineMetadata ReplacesGlobal Resources",
			"MachineMetadata ReplacesGlobal Resources",
		},
		{mk(t, "b.service", "MachineID=m01"), "", "MachineID"},
		{mk(t, "b.service", "MachineOf=x.service", "Conflicts=q*"), "Conflicts", "MachineOf Conflicts"},
	}
	for _, tt := range tests {
		e := c.newEval(tt.unit, c.prepare(tt.unit), nil)
		if got := names(e.decideChain()); got != tt.decide {
			t.Errorf("decide chain of %s %+v = %q, want %q", tt.unit.Name, tt.unit.Fleet, got, tt.decide)
		}
		if got := names(e.residentChain()); got != tt.resident {
			t.Errorf("resident chain of %s %+v = %q, want %q", tt.unit.Name, tt.unit.Fleet, got, tt.resident)
		}
	}
}
