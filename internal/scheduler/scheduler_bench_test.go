package scheduler

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/flotilla/flotilla/internal/unit"
)

// The benchmarks run on a cluster the size the scheduler is built for:
// 1,000 machines holding 100,000 units, placed by Decide. Its mix:
//
//   - machines in three regions (50/30/20%), a quarter with disk=ssd, 2%
//     with gpu=yes; 90% declare a capacity of 64 CPUs and 256G, 10% none;
//   - units are 1,000 services of 100 instances (svc0042@17.service) in
//     four roles; half the units declare resources (25-100% CPU,
//     256M-2G), which fills the cluster to about half its CPU and a
//     quarter of its memory; a tenth of the services require metadata (a region,
//     disk=ssd, or for a few gpu=yes); a tenth keep their instances apart
//     (Conflicts=svc0042@*.service), and 2% conflict with another service;
//   - three global units run on every machine.

const (
	benchMachines = 1000
	benchServices = 1000
	benchPerSvc   = 100
)

// benchMachine returns machine i of the benchmark cluster.
func benchMachine(i int) Machine {
	region := "us-east"
	switch {
	case i%10 >= 8:
		region = "eu"
	case i%10 >= 5:
		region = "us-west"
	}
	md := map[string]string{"region": region, "rack": fmt.Sprintf("r%02d", i%50)}
	if i%4 == 0 {
		md["disk"] = "ssd"
	}
	if i%50 == 7 {
		md["gpu"] = "yes"
	}
	m := Machine{ID: fmt.Sprintf("machine-%04d", i), Metadata: md}
	if i%10 != 3 {
		m.Capacity = Resources{CPUPercent: 6400, MemoryBytes: 256 * gib}
	}
	return m
}

// benchUnit returns instance inst of service svc in the mix; prefix names
// the service so that probes do not collide with placed units.
func benchUnit(prefix string, svc, inst int) *Unit {
	name := fmt.Sprintf("%s%04d@%d.service", prefix, svc, inst)
	f := unit.Fleet{Role: []string{"web", "batch", "db", ""}[svc%4]}
	switch svc % 20 {
	case 1:
		f.MachineMetadata = []string{"region=us-east", "region=us-west"}
	case 2:
		f.MachineMetadata = []string{"disk=ssd"}
	case 3, 4:
		f.Conflicts = []string{fmt.Sprintf("%s%04d@*.service", prefix, svc)}
	}
	if svc%100 == 5 {
		f.MachineMetadata = []string{"gpu=yes"}
	}
	if svc%50 == 6 {
		f.Conflicts = []string{fmt.Sprintf("svc%04d@*.service", (svc+1)%benchServices)}
	}
	u := &Unit{Name: name, Spec: &Spec{Fleet: &f}}
	if (svc+inst)%2 == 0 {
		u.Needs = Resources{CPUPercent: int64(25 * (1 + (svc+inst)%4)), MemoryBytes: int64(256*(1+inst%8)) * mib}
	}
	return u
}

// benchCluster is built once: Decide benchmarks restore it after use.
var benchCluster = sync.OnceValues(func() (*Cluster, []at) {
	c := NewCluster()
	for i := range benchMachines {
		c.SetMachine(benchMachine(i))
	}
	for _, name := range []string{"log.service", "metrics.service", "sshd-keys.service"} {
		g := &Unit{Name: name, Spec: &Spec{Fleet: &unit.Fleet{Global: true}, Needs: Resources{CPUPercent: 10, MemoryBytes: 64 * mib}}}
		for _, id := range c.GlobalMachines(g) {
			c.Place(g, id)
		}
	}
	var placed []at
	for inst := range benchPerSvc {
		for svc := range benchServices {
			u := benchUnit("svc", svc, inst)
			if d := c.Decide(u); d.Machine != "" {
				c.Place(u, d.Machine)
				placed = append(placed, at{u, d.Machine})
			}
		}
	}
	return c, placed
})

// probes returns n units of the mix that are not placed.
func probes(n int) []*Unit {
	rng := rand.New(rand.NewPCG(1, 1))
	out := make([]*Unit, n)
	for i := range out {
		out[i] = benchUnit("svc", rng.IntN(benchServices), benchPerSvc+i)
	}
	return out
}

// BenchmarkDecide1kMachines100kUnits places one unit of the mix into the
// full cluster: Decide, Place, then Unplace to leave the cluster as it was.
func BenchmarkDecide1kMachines100kUnits(b *testing.B) {
	c, placed := benchCluster()
	if len(placed) < benchServices*benchPerSvc*99/100 {
		b.Fatalf("only %d units placed of %d", len(placed), benchServices*benchPerSvc)
	}
	us := probes(4096)
	for _, strategy := range []string{Spread, Binpack} {
		b.Run(strategy, func(b *testing.B) {
			if err := c.SetOptions(Options{Strategy: strategy}); err != nil {
				b.Fatal(err)
			}
			defer c.SetOptions(Options{})
			unplaced := 0
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				u := us[i%len(us)]
				i++
				d := c.Decide(u)
				if d.Machine == "" {
					unplaced++
					continue
				}
				c.Place(u, d.Machine)
				c.Unplace(u.Name)
			}
			b.ReportMetric(float64(unplaced)/float64(i), "unplaced/op")
		})
	}
	// The worst case: no machine fits (the unit conflicts with a global
	// unit, or needs more memory than any machine of known capacity has),
	// so every machine is checked and the reason gathered.
	b.Run("unplaceable", func(b *testing.B) {
		u := &Unit{Name: "huge.service", Spec: &Spec{Fleet: &unit.Fleet{Conflicts: []string{"log.service"}}, Needs: Resources{MemoryBytes: 512 * gib}}}
		b.ReportAllocs()
		for b.Loop() {
			if d := c.Decide(u); d.Machine != "" {
				b.Fatalf("Decide(huge) = %+v, want no machine", d)
			}
		}
	})
}

// BenchmarkAllocate10kUnits allocates 10,000 pending units of the mix at
// once, by weighted DRF with a quota on one role, into the full cluster.
func BenchmarkAllocate10kUnits(b *testing.B) {
	c, _ := benchCluster()
	err := c.SetOptions(Options{Roles: map[string]RolePolicy{
		"web":   {Weight: 2},
		"batch": {Quota: Resources{CPUPercent: 800_000, MemoryBytes: 16 << 40}},
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.SetOptions(Options{})
	pending := probes(10_000)
	b.ReportAllocs()
	placed := 0
	for b.Loop() {
		ds := c.Allocate(pending)
		b.StopTimer()
		placed = 0
		for i, d := range ds {
			if d.Machine != "" {
				placed++
				c.Unplace(pending[i].Name)
			}
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(placed), "placed")
}

// BenchmarkFitsAll100kUnits is a full reconcile pass: Fits for every unit
// placed in the cluster, on its machine.
func BenchmarkFitsAll100kUnits(b *testing.B) {
	c, placed := benchCluster()
	b.ReportAllocs()
	misfits := 0
	for b.Loop() {
		misfits = 0
		for _, p := range placed {
			if ok, _ := c.Fits(p.u, p.m); !ok {
				misfits++
			}
		}
	}
	b.ReportMetric(float64(len(placed)), "units")
	b.ReportMetric(float64(misfits), "misfits")
}

// BenchmarkBuild100kUnits places the benchmark cluster's units one by one,
// from empty: 100,000 decisions as the cluster fills.
func BenchmarkBuild100kUnits(b *testing.B) {
	for b.Loop() {
		c := NewCluster()
		for i := range benchMachines {
			c.SetMachine(benchMachine(i))
		}
		for inst := range benchPerSvc {
			for svc := range benchServices {
				u := benchUnit("svc", svc, inst)
				if d := c.Decide(u); d.Machine != "" {
					c.Place(u, d.Machine)
				}
			}
		}
	}
}

// numberedUnits returns n instances of one plain template numbered as the
// engine numbers units (Cluster.SetIDs), and their IDs by name.
func numberedUnits(n int) ([]*Unit, func(string) (int32, bool)) {
	spec := &Spec{Fleet: &unit.Fleet{}}
	us := make([]*Unit, n)
	byName := make(map[string]int32, n)
	for i := range us {
		us[i] = &Unit{Name: fmt.Sprintf("bench@%07d.service", i), ID: int32(i + 1), Spec: spec}
		byName[us[i].Name] = us[i].ID
	}
	return us, func(name string) (int32, bool) { id, ok := byName[name]; return id, ok }
}

// BenchmarkAllocateSpread10kMachines is flotilla bench's start of a
// million units, a tenth of it: 100,000 instances of one plain template,
// in name order, spread over 10,000 machines that declare no capacity.
func BenchmarkAllocateSpread10kMachines(b *testing.B) {
	c := NewCluster()
	for i := range 10_000 {
		c.SetMachine(Machine{ID: fmt.Sprintf("sim-%05d", i)})
	}
	pending, ids := numberedUnits(100_000)
	c.SetIDs(ids)
	b.ReportAllocs()
	for b.Loop() {
		ds := c.Allocate(pending)
		b.StopTimer()
		for i, d := range ds {
			if d.Machine == "" {
				b.Fatalf("%s not placed: %s", pending[i].Name, d.Reason)
			}
			c.Unplace(pending[i].Name)
		}
		b.StartTimer()
	}
}

// BenchmarkPlace100kUnitsHeap places 100,000 instances of one plain
// template round the 1,000 machines of a cluster, and reports the heap
// the placements hold per unit (the units themselves are made before):
// at flotilla bench's million units this is the leader's largest item.
func BenchmarkPlace100kUnitsHeap(b *testing.B) {
	us, byName := numberedUnits(100_000)
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = fmt.Sprintf("sim-%04d", i)
	}
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	var perUnit float64
	for b.Loop() {
		b.StopTimer()
		c := NewCluster()
		c.SetIDs(byName)
		for _, id := range ids {
			c.SetMachine(Machine{ID: id})
		}
		before := heap()
		b.StartTimer()
		for i, u := range us {
			c.Place(u, ids[i%len(ids)])
		}
		b.StopTimer()
		perUnit = float64(heap()-before) / float64(len(us))
		runtime.KeepAlive(c)
		b.StartTimer()
	}
	b.ReportMetric(perUnit, "B/unit")
}
