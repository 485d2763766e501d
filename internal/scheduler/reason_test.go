package scheduler

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

func TestReasons(t *testing.T) {
	twelve := machines(12, "role=web", 400, 1*gib)
	web := func(i int) *Unit { return mk(t, fmt.Sprintf("web@%d.service", i), "Conflicts=web@*.service") }
	tests := []struct {
		name     string
		machines []Machine
		placed   []at
		unit     *Unit
		want     string
	}{
		{"no machines", nil, nil, mk(t, "a.service"), "no machines available"},
		{"no machine has the metadata", twelve, nil, mk(t, "db.service", "MachineMetadata=role=db"), "no machine has role=db"},
		{
			"values OR, keys AND", twelve, nil, mk(t, "db.service", "MachineMetadata=role=db role=cache", "MachineMetadata=disk=ssd"),
			"no machine has disk=ssd, role=db|cache",
		},
		{
			"one unit on several machines", twelve[:2],
			[]at{{mk(t, "web@2.service", "Global=true"), "m01"}, {mk(t, "web@2.service", "Global=true"), "m02"}},
			web(1), "conflicts with web@2.service on m01, m02",
		},
		{
			"a different unit on each machine", twelve[:7],
			[]at{{web(1), "m01"}, {web(2), "m02"}, {web(3), "m03"}, {web(4), "m04"}, {web(5), "m05"}, {web(6), "m06"}, {web(7), "m07"}},
			web(8), "conflicts with web@1.service on m01, web@2.service on m02, web@3.service on m03, web@4.service on m04, web@5.service on m05 and 2 more",
		},
		{
			"machines listed by ID, at most five", twelve, nil, mk(t, "big.service", "MemoryMax=4096M"),
			"needs 4G memory, largest free is 1G on m01, m02, m03, m04, m05 and 7 more",
		},
		{
			"largest free among the machines of the clause", twelve[:3],
			[]at{{mk(t, "x.service", "MemoryMax=512M"), "m01"}, {mk(t, "y.service", "MemoryMax=768M"), "m03"}},
			mk(t, "a.service", "MemoryMax=1536M"), "needs 1536M memory, largest free is 1G on m01, m02, m03",
		},
		{
			"clauses in chain order", twelve[:4],
			[]at{{mk(t, "x.service", "CPUQuota=400%"), "m04"}, {mk(t, "db.service"), "m02"}},
			mk(t, "a.service", "Conflicts=db.service", "CPUQuota=100%", "MemoryMax=2G"),
			"conflicts with db.service on m02; needs 100% CPU, largest free is 0% on m04; needs 2G memory, largest free is 1G on m01, m03",
		},
		{"MachineOf", twelve, nil, mk(t, "a.service", "MachineOf=db.service"), "MachineOf=db.service: that unit is not scheduled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := build(tt.machines, tt.placed)
			if got := c.Decide(tt.unit); got.Reason != tt.want || got.Machine != "" {
				t.Errorf("Decide(%s) = %+v, want reason %q", tt.unit.Name, got, tt.want)
			}
		})
	}
}

func TestFormatBytes(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0B"},
		{512, "512B"},
		{1024, "1K"},
		{1536, "1.5K"},
		{4096 * mib, "4G"},
		{1536 * mib, "1536M"},
		{gib + 1, "1.0G"},
		{3 << 40, "3T"},
		{-2 * gib, "-2G"},
	}
	for _, tt := range tests {
		if got := formatBytes(tt.in); got != tt.want {
			t.Errorf("formatBytes(%d) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestDeterminism builds one cluster in different orders and checks that
// it decides the same, reasons included.
func TestDeterminism(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var ms []Machine
	for i := range 40 {
		ms = append(ms, randomMachine(rng, i+1))
	}
	var placed []at
	for i := range 300 {
		u := randomUnit(t, rng, fmt.Sprintf("p%03d.service", i))
		placed = append(placed, at{u, ms[rng.IntN(len(ms))].ID})
	}
	var probes []*Unit
	for i := range 200 {
		probes = append(probes, randomUnit(t, rng, fmt.Sprintf("%c%d.service", 'a'+i%3, i)))
	}
	run := func(seed uint64) ([]Decision, []Decision, map[string]float64) {
		r := rand.New(rand.NewPCG(seed, seed))
		ms2, placed2 := append([]Machine(nil), ms...), append([]at(nil), placed...)
		r.Shuffle(len(ms2), func(i, j int) { ms2[i], ms2[j] = ms2[j], ms2[i] })
		// Placement order matters for global units only through the
		// final state, which is the same: shuffle non-global ones.
		r.Shuffle(len(placed2), func(i, j int) { placed2[i], placed2[j] = placed2[j], placed2[i] })
		c := build(ms2, placed2)
		var decided []Decision
		for _, u := range probes {
			decided = append(decided, c.Decide(u))
		}
		return decided, c.Allocate(probes), c.Shares()
	}
	d1, a1, s1 := run(1)
	for seed := uint64(2); seed < 5; seed++ {
		d2, a2, s2 := run(seed)
		for i := range d1 {
			if !reflect.DeepEqual(d1[i], d2[i]) {
				t.Errorf("build order %d: Decide(%s) = %+v, want %+v as in build order 1", seed, probes[i].Name, d2[i], d1[i])
			}
			if !reflect.DeepEqual(a1[i], a2[i]) {
				t.Errorf("build order %d: Allocate decided %s: %+v, want %+v as in build order 1", seed, probes[i].Name, a2[i], a1[i])
			}
		}
		if !reflect.DeepEqual(s1, s2) {
			t.Errorf("build order %d: Shares() = %v, want %v", seed, s2, s1)
		}
	}
}

// TestPatternEviction decides many units with patterns no placed unit
// declares, then checks that the registry drops them and still answers
// right.
func TestPatternEviction(t *testing.T) {
	c := build(machines(3, "", 0, 0), nil)
	keepU := mk(t, "keep.service", "Conflicts=web@*.service")
	c.Place(keepU, "m01")
	c.Place(mk(t, "web@1.service"), "m02")
	for i := range maxUnusedPatterns + 10 {
		c.Decide(mk(t, "x.service", fmt.Sprintf("Conflicts=tmp%d-*.service", i)))
	}
	if got := len(c.pats.byGlob); got <= maxUnusedPatterns {
		t.Fatalf("%d patterns registered, want more than %d before eviction", got, maxUnusedPatterns)
	}
	c.Place(mk(t, "tmp.service"), "m03")
	c.Unplace("tmp.service") // evicts
	if got := len(c.pats.byGlob); got != 1 {
		t.Errorf("%d patterns registered after eviction, want 1 (web@*.service, which keep.service declares)", got)
	}
	checkInvariants(t, c)
	if d := c.Decide(mk(t, "web@2.service")); d.Machine != "m03" {
		t.Errorf("Decide(web@2) = %+v, want m03 (keep.service conflicts on m01, web@1 on m02 is fine but loaded)", d)
	}
	if d := c.Decide(mk(t, "y.service", "Conflicts=web@*.service keep.service")); d.Machine != "m03" {
		t.Errorf("Decide(y) = %+v, want m03", d)
	}
}

func TestAccessors(t *testing.T) {
	c := build([]Machine{mach("m1", "", 400, gib), mach("m2", "", 0, 0)}, nil)
	a := mk(t, "a.service", "CPUQuota=100%", "MemoryMax=256M", "Role=web")
	g := mk(t, "g.service", "Global=true", "MemoryMax=128M")
	c.Place(a, "m1")
	c.Place(g, "m1")
	c.Place(g, "m2")
	if !c.HasMachine("m1") || c.HasMachine("m3") {
		t.Errorf("HasMachine(m1), HasMachine(m3) = %v, %v, want true, false", c.HasMachine("m1"), c.HasMachine("m3"))
	}
	if got := c.Load("m1"); got != 2 {
		t.Errorf("Load(m1) = %d, want 2", got)
	}
	if got, want := c.Used("m1"), (Resources{100, 384 * mib}); got != want {
		t.Errorf("Used(m1) = %+v, want %+v", got, want)
	}
	if got := c.GlobalPlacements("g.service"); !reflect.DeepEqual(got, []string{"m1", "m2"}) {
		t.Errorf("GlobalPlacements(g) = %v, want [m1 m2]", got)
	}
	if got := c.Shares(); got["web"] != 0.25 || got[DefaultRole] != 256.0/1024 {
		t.Errorf("Shares() = %v, want web 0.25 (cpu 100 of 400), * 0.25 (256M of 1G)", got)
	}
	c.UnplaceFrom("g.service", "m1")
	if got := c.GlobalPlacements("g.service"); !reflect.DeepEqual(got, []string{"m2"}) {
		t.Errorf("GlobalPlacements(g) after UnplaceFrom m1 = %v, want [m2]", got)
	}
	c.RemoveMachine("m1")
	if _, ok := c.Where("a.service"); ok || c.Load("m1") != 0 || c.Used("m1") != (Resources{}) {
		t.Errorf("after RemoveMachine(m1): a still placed, or m1 still loaded")
	}
	c.Place(a, "m2")
	c.Place(a, "m9") // no such machine: forgets where a was
	if m, ok := c.Where("a.service"); ok {
		t.Errorf("Where(a) = %s after Place on an unknown machine, want unplaced", m)
	}
	c.Unplace("g.service")
	if got := c.GlobalPlacements("g.service"); got != nil {
		t.Errorf("GlobalPlacements(g) after Unplace = %v, want none", got)
	}
	checkInvariants(t, c)
}
