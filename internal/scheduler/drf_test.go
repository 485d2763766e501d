package scheduler

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// pendingUnits returns n units of role named role01.., each needing cpu
// and mem.
func pendingUnits(t *testing.T, role string, n int, opts ...string) []*Unit {
	out := make([]*Unit, n)
	for i := range out {
		out[i] = mk(t, fmt.Sprintf("%s%02d.service", role, i+1), append([]string{"Role=" + role}, opts...)...)
	}
	return out
}

// placedByRole counts the placed units of each role among decisions.
func placedByRole(pending []*Unit, ds []Decision) map[string]int {
	out := map[string]int{}
	for i, d := range ds {
		if d.Machine != "" {
			out[pending[i].Role()]++
		}
	}
	return out
}

// TestAllocateDRFPaper is the example of the DRF paper (Ghodsi et al.,
// NSDI 2011, section 4): 9 CPUs and 18 GB; user A's tasks need <1 CPU,
// 4 GB>, user B's <3 CPUs, 1 GB>. DRF gives A three tasks and B two, and
// both end with a dominant share of 2/3.
func TestAllocateDRFPaper(t *testing.T) {
	c := build([]Machine{mach("m1", "", 900, 18*gib)}, nil)
	var pending []*Unit
	pending = append(pending, pendingUnits(t, "b", 10, "CPUQuota=300%", "MemoryMax=1G")...)
	pending = append(pending, pendingUnits(t, "a", 10, "CPUQuota=100%", "MemoryMax=4G")...)
	ds := c.Allocate(pending)
	if got, want := placedByRole(pending, ds), map[string]int{"a": 3, "b": 2}; !reflect.DeepEqual(got, want) {
		t.Errorf("Allocate placed %v, want %v", got, want)
	}
	shares := c.Shares()
	if math.Abs(shares["a"]-2.0/3) > 1e-9 || math.Abs(shares["b"]-2.0/3) > 1e-9 {
		t.Errorf("Shares() = %v, want a and b at 2/3", shares)
	}
	// Each role's first units by name got the machine; the rest say why not.
	if ds[0].Machine != "m1" || ds[1].Machine != "m1" || ds[2].Machine != "" {
		t.Errorf("decisions for b01, b02, b03 = %+v, %+v, %+v, want m1, m1, none", ds[0], ds[1], ds[2])
	}
	if want := "needs 300% CPU, largest free is 0% on m1"; ds[2].Reason != want {
		t.Errorf("decision for b03 = %+v, want reason %q", ds[2], want)
	}
}

func TestAllocateWeights(t *testing.T) {
	// 12 CPUs; each unit needs one. Weight 2 against 1: 8 and 4.
	c := build([]Machine{mach("m1", "", 1200, 0)}, nil)
	if err := c.SetOptions(Options{Roles: map[string]RolePolicy{"a": {Weight: 2}}}); err != nil {
		t.Fatal(err)
	}
	pending := append(pendingUnits(t, "a", 20, "CPUQuota=100%"), pendingUnits(t, "b", 20, "CPUQuota=100%")...)
	ds := c.Allocate(pending)
	if got, want := placedByRole(pending, ds), map[string]int{"a": 8, "b": 4}; !reflect.DeepEqual(got, want) {
		t.Errorf("Allocate placed %v, want %v", got, want)
	}
}

func TestAllocateQuota(t *testing.T) {
	// Quotas cap a role even when the cluster has room.
	c := build(machines(2, "", 800, 8*gib), nil)
	err := c.SetOptions(Options{Roles: map[string]RolePolicy{"batch": {Quota: Resources{CPUPercent: 400, MemoryBytes: 8 * gib}}}})
	if err != nil {
		t.Fatal(err)
	}
	pending := append(pendingUnits(t, "batch", 10, "CPUQuota=100%", "MemoryMax=1G"), pendingUnits(t, "web", 3, "CPUQuota=100%")...)
	ds := c.Allocate(pending)
	if got, want := placedByRole(pending, ds), map[string]int{"batch": 4, "web": 3}; !reflect.DeepEqual(got, want) {
		t.Errorf("Allocate placed %v, want %v", got, want)
	}
	if want := "role batch would exceed its quota (cpu 400%, memory 8G; in use: cpu 400%, memory 4G)"; ds[4].Reason != want {
		t.Errorf("decision for batch05 = %+v, want reason %q", ds[4], want)
	}
}

func TestAllocateRolesWithoutResources(t *testing.T) {
	// Units that declare nothing have no dominant share: roles take turns
	// by placed count. Cluster capacity is unknown, so all fit.
	c := build(machines(2, "", 0, 0), nil)
	c.Place(mk(t, "x.service", "Role=a"), "m01")
	pending := append(pendingUnits(t, "a", 2), pendingUnits(t, "b", 2)...)
	ds := c.Allocate(pending)
	// Placed in turn: b01 (b has no unit yet) on m02, the empty machine;
	// a01 (a and b tie at one unit; a by name) on m01, by ID; b02 on m02,
	// now the less loaded; a02 on m01, by ID.
	want := []Decision{{Machine: "m01"}, {Machine: "m01"}, {Machine: "m02"}, {Machine: "m02"}}
	if !reflect.DeepEqual(ds, want) {
		t.Errorf("Allocate = %+v, want %+v", ds, want)
	}
}

func TestAllocateBookkeeping(t *testing.T) {
	c := build([]Machine{mach("m1", "region=us", 0, 0), mach("m2", "region=eu", 0, 0)}, nil)
	old := mk(t, "old.service", "Role=legacy")
	c.Place(old, "m1")
	u := mk(t, "new.service", "Replaces=old.service", "MachineMetadata=region=us")
	pending := []*Unit{
		mk(t, "z.service"),
		u,
		mk(t, "g.service", "Global=true"),
		mk(t, "z.service"),
		mk(t, "x.service", "MachineMetadata=region=ap"),
	}
	ds := c.Allocate(pending)
	want := []Decision{
		{Machine: "m2"},
		{Machine: "m1", Displaced: []string{"old.service"}},
		{Reason: "global unit: it runs on every machine GlobalMachines lists"},
		{Machine: "m2"}, // the first listing's decision
		{Reason: "no machine has region=ap"},
	}
	if !reflect.DeepEqual(ds, want) {
		t.Errorf("Allocate = %+v, want %+v", ds, want)
	}
	if m, ok := c.Where("old.service"); ok {
		t.Errorf("Where(old.service) = %s after it was displaced, want unplaced", m)
	}
	if m, _ := c.Where("new.service"); m != "m1" {
		t.Errorf("Where(new.service) = %q, want m1", m)
	}
	if _, ok := c.Shares()["legacy"]; ok {
		t.Errorf("Shares() = %v, want no share for legacy, which has no unit placed", c.Shares())
	}
}

// TestAllocateOrderIndependent checks that Allocate's outcome depends on
// the pending units, not the order they are listed in.
func TestAllocateOrderIndependent(t *testing.T) {
	ms := []Machine{mach("m1", "disk=ssd", 800, 16*gib), mach("m2", "", 800, 8*gib), mach("m3", "disk=ssd", 400, 4*gib)}
	var pending []*Unit
	for i := range 30 {
		opts := []string{fmt.Sprintf("Role=r%d", i%3), fmt.Sprintf("CPUQuota=%d%%", 50+50*(i%4)), fmt.Sprintf("MemoryMax=%dM", 512*(1+i%5))}
		if i%4 == 0 {
			opts = append(opts, "MachineMetadata=disk=ssd")
		}
		if i%5 == 0 {
			opts = append(opts, "Conflicts=u1*")
		}
		pending = append(pending, mk(t, fmt.Sprintf("u%02d.service", i), opts...))
	}
	run := func(order []*Unit) map[string]Decision {
		c := build(ms, nil)
		ds := c.Allocate(order)
		out := map[string]Decision{}
		for i, d := range ds {
			out[order[i].Name] = d
		}
		return out
	}
	want := run(pending)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5 {
		shuffled := append([]*Unit(nil), pending...)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if got := run(shuffled); !reflect.DeepEqual(got, want) {
			t.Fatalf("Allocate(shuffled) = %v, want %v as in name order", got, want)
		}
	}
}

func TestAllocateDisplacesWithinBatch(t *testing.T) {
	// old is placed first (by name), on m1; new needs m1 and replaces it;
	// old is decided again and goes to m2. In name order the batch is
	// searched by name rather than indexed by a map: both find old.
	for _, ordered := range []bool{false, true} {
		c := build([]Machine{mach("m1", "disk=ssd", 0, 0), mach("m2", "", 0, 0)}, nil)
		pending := []*Unit{
			mk(t, "b-new.service", "Replaces=a-old.service", "MachineMetadata=disk=ssd"),
			mk(t, "a-old.service"),
		}
		want := []Decision{{Machine: "m1", Displaced: []string{"a-old.service"}}, {Machine: "m2"}}
		if ordered {
			slices.Reverse(pending)
			slices.Reverse(want)
		}
		ds := c.Allocate(pending)
		if !reflect.DeepEqual(ds, want) {
			t.Errorf("ordered %v: Allocate = %+v, want %+v", ordered, ds, want)
		}
		if got := c.state(); got != "a-old.service:m2 b-new.service:m1" {
			t.Errorf("ordered %v: placements = %s, want a-old on m2, b-new on m1", ordered, got)
		}
	}
}
