package scheduler

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/flotilla/flotilla/internal/unit"
)

// This file checks the Cluster against a naive model: Decide, Fits and
// GlobalMachines computed by scanning every machine and every unit, with
// none of the indexes, over random clusters changed at random. Any index
// that drifts from the truth shows up as a different decision.

// naiveFits reports whether u may run on m, the slow way, with u's own
// placement on m treated as gone.
func naiveFits(c *Cluster, u *Unit, m *machine, decide bool) bool {
	return naiveFitsWithout(c, u, m, decide, nil)
}

// naiveFitsWithout is naiveFits with the units named in gone treated as
// gone too (the units a Replaces= unit displaces).
func naiveFitsWithout(c *Cluster, u *Unit, m *machine, decide bool, gone map[string]bool) bool {
	f := *u.Fleet
	units := unitsOn(m)
	if f.MachineID != "" && f.MachineID != m.ID {
		return false
	}
	for key, vals := range unit.MetadataRequirements(f) {
		if v, ok := m.Metadata[key]; !ok || !slices.Contains(vals, v) {
			return false
		}
	}
	for _, peer := range f.MachineOf {
		if units[peer] == nil || (decide && peer == u.Name) {
			return false
		}
	}
	var used Resources
	for name, pl := range units {
		if name == u.Name || gone[name] {
			continue
		}
		used = used.add(pl.u.Needs)
		for _, g := range f.Conflicts {
			if ok, _ := path.Match(g, name); ok {
				return false
			}
		}
		for _, g := range pl.u.Fleet.Conflicts {
			if ok, _ := path.Match(g, u.Name); ok {
				return false
			}
		}
		if !pl.u.Fleet.Global && slices.Contains(pl.u.Fleet.Replaces, u.Name) {
			return false
		}
		if slices.Contains(f.Replaces, name) && !f.Global && (decide || pl.u.Fleet.Global) {
			return false // the model does not displace
		}
	}
	if !decide && units[u.Name] != nil {
		// Of two placed units that replace each other, the first by name
		// stays.
		for _, om := range c.machines {
			for name, pl := range unitsOn(om) {
				if name < u.Name && !pl.u.Fleet.Global && slices.Contains(f.Replaces, name) && slices.Contains(pl.u.Fleet.Replaces, u.Name) {
					return false
				}
			}
		}
		// A resident unit: the name-ordered rule of checkResident.
		over := func(capa, total int64) bool { return capa > 0 && total > capa }
		total := used.add(u.Needs)
		if !over(m.Capacity.CPUPercent, total.CPUPercent) && !over(m.Capacity.MemoryBytes, total.MemoryBytes) {
			return true
		}
		var before Resources
		for name, pl := range units {
			if name < u.Name {
				before = before.add(pl.u.Needs)
			}
		}
		if u.Needs.CPUPercent > 0 && over(m.Capacity.CPUPercent, total.CPUPercent) && over(m.Capacity.CPUPercent, before.CPUPercent+u.Needs.CPUPercent) {
			return false
		}
		return !(u.Needs.MemoryBytes > 0 && over(m.Capacity.MemoryBytes, total.MemoryBytes) && over(m.Capacity.MemoryBytes, before.MemoryBytes+u.Needs.MemoryBytes))
	}
	fits := func(need, capa, used int64) bool { return need == 0 || capa == 0 || used+need <= capa }
	return fits(u.Needs.CPUPercent, m.Capacity.CPUPercent, used.CPUPercent) &&
		fits(u.Needs.MemoryBytes, m.Capacity.MemoryBytes, used.MemoryBytes)
}

// unitsOn returns the units placed on m by name: the model's view of a
// machine.
func unitsOn(m *machine) map[string]*placement {
	units := map[string]*placement{}
	for _, pl := range m.placed {
		units[pl.u.Name] = pl
	}
	return units
}

// naiveDecide is Decide, the slow way: the machine and the units
// displaced there.
func naiveDecide(c *Cluster, u *Unit) (string, []string) {
	// Of two units that replace each other, only one is placed.
	placedAt := map[string]*placement{}
	for _, m := range c.machines {
		for name, pl := range unitsOn(m) {
			if !pl.u.Fleet.Global {
				placedAt[name] = pl
			}
		}
	}
	for _, x := range u.Fleet.Replaces {
		if pl := placedAt[x]; pl != nil && x != u.Name && slices.Contains(pl.u.Fleet.Replaces, u.Name) {
			return "", nil
		}
	}
	if naiveOverQuota(c, u) {
		return "", nil
	}
	// The machines of the units it replaces first, those units gone.
	gone := map[string]bool{}
	taken := map[string]bool{}
	if !u.Fleet.Global {
		for _, x := range u.Fleet.Replaces {
			if pl := placedAt[x]; pl != nil && x != u.Name {
				gone[x], taken[pl.m.ID] = true, true
			}
		}
	}
	if best := naiveBest(c, u, gone, func(id string) bool { return taken[id] }); best != "" {
		var displaced []string
		for name := range unitsOn(c.machines[best]) {
			if gone[name] {
				displaced = append(displaced, name)
			}
		}
		slices.Sort(displaced)
		return best, displaced
	}
	return naiveBest(c, u, nil, func(string) bool { return true }), nil
}

// naiveBest returns the best machine among those ok lets in where u fits
// with the units in gone treated as gone, or "".
func naiveBest(c *Cluster, u *Unit, gone map[string]bool, ok func(string) bool) string {
	strategy := c.strategy(u)
	best, bestKey := "", rankKey{}
	for id, m := range c.machines {
		if !ok(id) || !naiveFitsWithout(c, u, m, true, gone) {
			continue
		}
		var used Resources
		n := 0
		for name, pl := range unitsOn(m) {
			if name != u.Name && !gone[name] {
				used = used.add(pl.u.Needs)
				n++
			}
		}
		k := rankKey{a: int64(n), b: -freeScore(m.Capacity, used), id: id}
		if strategy == Binpack {
			k = rankKey{a: freeScore(m.Capacity, used.add(u.Needs)), id: id}
		}
		if best == "" || k.less(bestKey) {
			best, bestKey = id, k
		}
	}
	return best
}

// naiveOverQuota reports whether placing u takes its role over its quota.
func naiveOverQuota(c *Cluster, u *Unit) bool {
	var roleUsed Resources
	for _, m := range c.machines {
		for name, pl := range unitsOn(m) {
			if name != u.Name && pl.u.Role() == u.Role() {
				roleUsed = roleUsed.add(pl.u.Needs)
			}
		}
	}
	q := c.opts.policy(u.Role()).Quota
	return (q.CPUPercent > 0 && u.Needs.CPUPercent > 0 && roleUsed.CPUPercent+u.Needs.CPUPercent > q.CPUPercent) ||
		(q.MemoryBytes > 0 && u.Needs.MemoryBytes > 0 && roleUsed.MemoryBytes+u.Needs.MemoryBytes > q.MemoryBytes)
}

// checkInvariants compares the Cluster's aggregates and indexes with the
// placements.
func checkInvariants(t *testing.T, c *Cluster) {
	t.Helper()
	if len(c.ids) != len(c.machines) || !slices.IsSorted(c.ids) {
		t.Fatalf("ids = %v, want the %d machine IDs sorted", c.ids, len(c.machines))
	}
	for _, o := range []*order{&c.spread, &c.binpack} {
		ms := o.all()
		if len(ms) != len(c.machines) || !slices.IsSortedFunc(ms, func(a, b *machine) int {
			if o.less(a, b) {
				return -1
			}
			return 1
		}) {
			t.Fatalf("an order is not sorted or has %d machines, want %d", len(ms), len(c.machines))
		}
		for i, ch := range o.chunks {
			if len(ch) == 0 || len(ch) > maxChunk {
				t.Fatalf("an order's chunk %d of %d holds %d machines; want 1 to %d", i, len(o.chunks), len(ch), maxChunk)
			}
		}
	}
	var capa Resources
	for _, m := range c.machines {
		capa.CPUPercent += max(m.Capacity.CPUPercent, 0)
		capa.MemoryBytes += max(m.Capacity.MemoryBytes, 0)
	}
	if capa != c.total {
		t.Fatalf("total capacity %+v, want %+v", c.total, capa)
	}
	roles := map[string]roleUsage{}
	listed := 0
	for _, m := range c.machines {
		var used Resources
		names := map[string]bool{}
		for i, pl := range m.placed {
			name := pl.u.Name
			if pl.m != m || int(pl.idx) != i || names[name] {
				t.Fatalf("placement %d of %s records %s on %s at %d, or lists it twice", i, m.ID, name, pl.m.ID, pl.idx)
			}
			names[name] = true
			used = used.add(pl.u.Needs)
			r := roles[pl.u.Role()]
			r.used, r.count = r.used.add(pl.u.Needs), r.count+1
			roles[pl.u.Role()] = r
			if pl.u.Fleet.Global != (c.global[name][m] == pl) || !pl.u.Fleet.Global != (c.byName(name) == pl) || !pl.u.Fleet.Global != (c.placementOf(pl.u) == pl) || c.on(m, name) != pl {
				t.Fatalf("placement %s on %s missing from the where/global maps", name, m.ID)
			}
		}
		listed += len(m.placed)
		if used != m.used || m.free != freeScore(m.Capacity, used) {
			t.Fatalf("machine %s: used %+v free %d, want %+v %d", m.ID, m.used, m.free, used, freeScore(m.Capacity, used))
		}
		for k, v := range m.Metadata {
			if _, ok := c.meta[k][v][m]; !ok {
				t.Fatalf("metadata index lacks %s=%s for %s", k, v, m.ID)
			}
		}
	}
	// The other way: each placement the maps hold is listed by its
	// machine, so that with the counts equal the two views are the same.
	isListed := func(pl *placement) bool {
		return c.machines[pl.m.ID] == pl.m && int(pl.idx) < len(pl.m.placed) && pl.m.placed[pl.idx] == pl
	}
	inMaps := 0
	for id, pl := range c.where {
		if pl == nil {
			continue
		}
		if int(c.idOf(pl.u)) != id || pl.u.Fleet.Global || !isListed(pl) {
			t.Fatalf("where[%d] = %s on %s, not listed there", id, pl.u.Name, pl.m.ID)
		}
		inMaps++
	}
	for name, inst := range c.global {
		if len(inst) == 0 || c.byName(name) != nil {
			t.Fatalf("global[%s] has %d instances; where has it: %v", name, len(inst), c.byName(name) != nil)
		}
		for m, pl := range inst {
			if pl.u.Name != name || pl.m != m || !pl.u.Fleet.Global || !isListed(pl) {
				t.Fatalf("global[%s][%s] = %s on %s, not listed there", name, m.ID, pl.u.Name, pl.m.ID)
			}
			inMaps++
		}
	}
	if inMaps != listed {
		t.Fatalf("the machines list %d placements, the where/global maps %d", listed, inMaps)
	}
	for pl, list := range c.matches {
		if !isListed(pl) || len(list) == 0 {
			t.Fatalf("matches of %s on %s: %d patterns, listed %v", pl.u.Name, pl.m.ID, len(list), isListed(pl))
		}
		for _, p := range list {
			if c.pats.byGlob[p.glob] != p || !p.match(pl.u.Name) {
				t.Fatalf("matches of %s: %s, not a registered pattern matching it", pl.u.Name, p.glob)
			}
		}
	}
	if len(roles) != len(c.roles) {
		t.Fatalf("roles = %d, want %d", len(c.roles), len(roles))
	}
	for role, r := range roles {
		if got := c.roles[role]; got == nil || *got != r {
			t.Fatalf("role %s usage = %+v, want %+v", role, got, r)
		}
	}
	for glob, p := range c.pats.byGlob {
		declared, matched, refs := map[*machine]int{}, map[*machine]int{}, 0
		for _, m := range c.machines {
			for name, pl := range unitsOn(m) {
				for _, g := range pl.u.Fleet.Conflicts {
					if g == glob {
						declared[m]++
						refs++
					}
				}
				if p.match(name) {
					matched[m]++
					if !slices.Contains(c.matches[pl], p) {
						t.Fatalf("pattern %s: placement %s lacks it", glob, name)
					}
				}
			}
		}
		if refs != p.refs || !mapsEqual(declared, p.declared) || !mapsEqual(matched, p.matched) {
			t.Fatalf("pattern %s: refs %d declared %v matched %v, want %d %v %v", glob, p.refs, p.declared, p.matched, refs, declared, matched)
		}
	}
}

func mapsEqual(a, b map[*machine]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// randomUnit returns a unit with random [X-Fleet] rules and needs.
func randomUnit(t *testing.T, rng *rand.Rand, name string) *Unit {
	var opts []string
	pick := func(p float64) bool { return rng.Float64() < p }
	if pick(0.3) {
		opts = append(opts, fmt.Sprintf("CPUQuota=%d%%", 25*rng.IntN(8)+25))
	}
	if pick(0.3) {
		opts = append(opts, fmt.Sprintf("MemoryMax=%dM", 256*(rng.IntN(8)+1)))
	}
	if pick(0.3) {
		opts = append(opts, "Role="+[]string{"web", "batch"}[rng.IntN(2)])
	}
	if pick(0.2) {
		opts = append(opts, "Placement="+[]string{Spread, Binpack}[rng.IntN(2)])
	}
	global := pick(0.1)
	if global {
		opts = append(opts, "Global=true")
	}
	if pick(0.3) {
		opts = append(opts, fmt.Sprintf("MachineMetadata=region=%s", []string{"us", "eu", "ap"}[rng.IntN(3)]))
		if pick(0.3) {
			opts = append(opts, "MachineMetadata=region=eu disk=ssd")
		}
	}
	if pick(0.1) {
		opts = append(opts, "MachineMetadata=gpu=yes")
	}
	switch {
	case !global && pick(0.05):
		opts = append(opts, fmt.Sprintf("MachineID=m%02d", rng.IntN(25)+1))
	case pick(0.2):
		opts = append(opts, "Conflicts="+[]string{"a*", "b?.service", "c[0-4].service", "a1.service", "*3.service"}[rng.IntN(5)])
	case !global && pick(0.1):
		opts = append(opts, fmt.Sprintf("MachineOf=%c%d.service", 'a'+rng.IntN(3), rng.IntN(10)))
	case !global && pick(0.1):
		opts = append(opts, fmt.Sprintf("Replaces=%c%d.service", 'a'+rng.IntN(3), rng.IntN(10)))
	}
	return mk(t, name, opts...)
}

func randomMachine(rng *rand.Rand, i int) Machine {
	md := map[string]string{"region": []string{"us", "eu", "ap"}[rng.IntN(3)]}
	if rng.IntN(2) == 0 {
		md["disk"] = "ssd"
	}
	if rng.IntN(10) == 0 {
		md["gpu"] = "yes" // rare: the metadata index picks the candidates
	}
	capa := Resources{}
	if rng.IntN(4) > 0 {
		capa.CPUPercent = int64(100 * (rng.IntN(8) + 1))
	}
	if rng.IntN(4) > 0 {
		capa.MemoryBytes = int64(rng.IntN(8)+1) * gib
	}
	return Machine{ID: fmt.Sprintf("m%02d", i), Metadata: md, Capacity: capa}
}

func TestAgainstModel(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			c := NewCluster()
			if seed%4 >= 2 {
				numbered(c) // the owner's IDs, as the engine's
			}
			if seed%2 == 1 {
				_ = c.SetOptions(Options{Strategy: Binpack, Roles: map[string]RolePolicy{"batch": {Quota: Resources{CPUPercent: 800, MemoryBytes: 6 * gib}}}})
			}
			// Too few machines and the metadata index is never selective
			// enough to be used; too many and the test is slow.
			for i := range 25 {
				c.SetMachine(randomMachine(rng, i+1))
			}
			units := map[string]*Unit{}
			for step := range 600 {
				name := fmt.Sprintf("%c%d.service", 'a'+rng.IntN(3), rng.IntN(10))
				u := randomUnit(t, rng, name)
				if old := units[name]; old != nil && old.Fleet.Global != u.Fleet.Global {
					// A unit file does not change between global and not.
					c.Unplace(name)
					delete(units, name)
				}
				switch r := rng.IntN(20); {
				case r == 0 && len(c.ids) > 0:
					c.RemoveMachine(c.ids[rng.IntN(len(c.ids))])
				case r == 1:
					c.SetMachine(randomMachine(rng, rng.IntN(30)+1))
				case r == 4:
					// A batch: its decisions are where its units end up.
					var batch []*Unit
					seen := map[string]bool{}
					for range 6 {
						n := fmt.Sprintf("%c%d.service", 'a'+rng.IntN(3), rng.IntN(10))
						_, placed := c.Where(n)
						if b := randomUnit(t, rng, n); !seen[n] && !placed && !b.Fleet.Global && c.global[n] == nil {
							seen[n] = true
							batch = append(batch, b)
						}
					}
					for i, d := range c.Allocate(batch) {
						got, ok := c.Where(batch[i].Name)
						if d.Machine != "" && got != d.Machine || d.Machine == "" && (ok || d.Reason == "") {
							t.Fatalf("step %d: Allocate decided %s: %+v, but Where = %q, %v", step, batch[i].Name, d, got, ok)
						}
						if d.Machine != "" {
							units[batch[i].Name] = batch[i]
						}
					}
				case r < 4 && len(units) > 0:
					names := slices.Sorted(maps.Keys(units))
					c.Unplace(names[rng.IntN(len(names))])
				case u.Fleet.Global:
					want := []string{}
					for _, id := range c.ids {
						if naiveFits(c, u, c.machines[id], false) {
							want = append(want, id)
						}
					}
					got := c.GlobalMachines(u)
					if q := c.opts.policy(u.Role()).Quota; q.IsZero() && strings.Join(got, " ") != strings.Join(want, " ") {
						t.Fatalf("step %d: GlobalMachines(%s %+v needs %+v) = %v, want %v", step, name, u.Fleet, u.Needs, got, want)
					}
					c.Unplace(name)
					for _, id := range got {
						c.Place(u, id)
					}
					units[name] = u
				default:
					d := c.Decide(u)
					want, wantDisplaced := naiveDecide(c, u)
					if d.Machine != want || !slices.Equal(d.Displaced, wantDisplaced) {
						t.Fatalf("step %d: Decide(%s %+v needs %+v) = %+v, want machine %q displacing %v\ncluster: %s", step, name, u.Fleet, u.Needs, d, want, wantDisplaced, c.state())
					}
					if d.Machine == "" && d.Reason == "" {
						t.Fatalf("step %d: Decide(%s) = %+v, want a reason", step, name, d)
					}
					if d.Machine != "" {
						for _, x := range d.Displaced {
							c.Unplace(x)
						}
						c.Place(u, d.Machine)
						units[name] = u
						if ok, why := c.Fits(u, d.Machine); !ok {
							t.Fatalf("step %d: Decide(%s) = %+v, then Fits = false, %q", step, name, d, why)
						}
					}
				}
				if step%5 != 0 {
					continue
				}
				checkInvariants(t, c)
				// Fits agrees with the model for every placed unit.
				for _, id := range c.ids {
					m := c.machines[id]
					for _, pl := range m.placed {
						got, why := c.Fits(pl.u, id)
						if want := naiveFits(c, pl.u, m, false); got != want || got == (why != "") {
							t.Fatalf("step %d: Fits(%s %+v, %s) = %v, %q, want %v\ncluster: %s", step, pl.u.Name, pl.u.Fleet, id, got, why, want, c.state())
						}
					}
				}
			}
		})
	}
}

// TestPlacedLists: units are placed, moved, unplaced and forgotten with
// their machines at random, global or not, some matching Conflicts=
// patterns; after every step the machines' lists of placed units agree with
// the where and global maps, and both with a model of where units are.
func TestPlacedLists(t *testing.T) {
	for seed := range uint64(10) {
		rng := rand.New(rand.NewPCG(seed, 11))
		c := NewCluster()
		if seed%2 == 1 {
			numbered(c)
		}
		model := map[string]map[string]bool{} // unit -> machine IDs
		global := map[string]bool{}           // how each unit is placed
		for step := range 500 {
			name := fmt.Sprintf("u%d.service", rng.IntN(12))
			id := fmt.Sprintf("m%d", rng.IntN(6))
			switch r := rng.IntN(10); {
			case r < 5:
				var opts []string
				switch rng.IntN(4) {
				case 0:
					opts = append(opts, "Global=true")
				case 1:
					opts = append(opts, "Conflicts=u1*")
				case 2:
					opts = append(opts, "Replaces=u2.service")
				}
				u := mk(t, name, opts...)
				c.Place(u, id)
				if !u.Fleet.Global || !global[name] {
					delete(model, name)
				}
				if c.HasMachine(id) {
					if model[name] == nil {
						model[name] = map[string]bool{}
					}
					model[name][id], global[name] = true, u.Fleet.Global
				}
			case r < 6:
				c.Unplace(name)
				delete(model, name)
			case r < 7:
				c.UnplaceFrom(name, id)
				if delete(model[name], id); len(model[name]) == 0 {
					delete(model, name)
				}
			case r < 8:
				c.RemoveMachine(id)
				for name, on := range model {
					if delete(on, id); len(on) == 0 {
						delete(model, name)
					}
				}
			default:
				c.SetMachine(Machine{ID: id})
			}
			checkInvariants(t, c)
			var want []string
			for _, name := range slices.Sorted(maps.Keys(model)) {
				want = append(want, name+":"+strings.Join(slices.Sorted(maps.Keys(model[name])), ","))
			}
			if got := c.state(); got != strings.Join(want, " ") {
				t.Fatalf("seed %d step %d: placed %s, want %s", seed, step, got, strings.Join(want, " "))
			}
		}
	}
}

// TestPlacementSize: a placement is made for each placed unit, a million
// at flotilla bench's scale; past 32 bytes Go allocates 48.
func TestPlacementSize(t *testing.T) {
	if n := unsafe.Sizeof(placement{}); n > 32 {
		t.Errorf("a placement is %d bytes; want at most 32", n)
	}
}

// TestOwnersIDs: a Cluster told to use its owner's IDs finds units by
// number, names through the owner (MachineOf=, Unplace), and takes back
// the placement of a unit whose number the owner gave to another.
func TestOwnersIDs(t *testing.T) {
	ids := map[string]int32{}
	c := NewCluster()
	c.SetIDs(func(name string) (int32, bool) { id, ok := ids[name]; return id, ok })
	for _, id := range []string{"m1", "m2"} {
		c.SetMachine(Machine{ID: id})
	}
	unitOf := func(name string, id int32, opts ...string) *Unit {
		u := mk(t, name, opts...)
		u.ID, ids[name] = id, id
		return u
	}
	a := unitOf("a.service", 1)
	// A unit the owner does not hold yet (a plan's new unit) has no
	// number: it can be decided, not placed.
	fresh := mk(t, "new.service")
	fresh.ID = 0
	if d := c.Decide(fresh); d.Machine == "" {
		t.Fatalf("Decide(an unnumbered unit) = %+v, want a machine", d)
	}
	c.Place(a, "m1")
	follower := unitOf("f.service", 2, "MachineOf=a.service")
	if d := c.Decide(follower); d.Machine != "m1" {
		t.Fatalf("Decide(f, MachineOf=a) = %+v, want m1", d)
	}
	// The owner forgets a and gives its number to b, a still placed.
	delete(ids, "a.service")
	if m, ok := c.Where("a.service"); ok {
		t.Errorf("Where(a) = %s once the owner forgot it, want none", m)
	}
	b := unitOf("b.service", 1)
	if m, ok := c.WhereUnit(b); ok {
		t.Errorf("WhereUnit(b) = %s before b was placed (a had its number), want none", m)
	}
	c.Place(b, "m2")
	if c.Load("m1") != 0 || c.Load("m2") != 1 {
		t.Errorf("loads m1 %d m2 %d after b took a's number, want 0 and 1", c.Load("m1"), c.Load("m2"))
	}
	c.UnplaceUnit(b)
	if _, ok := c.Where("b.service"); ok || c.Load("m2") != 0 {
		t.Errorf("b still placed after UnplaceUnit (load m2 %d)", c.Load("m2"))
	}
}
