package scheduler

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/flotilla/flotilla/internal/unit"
)

// DefaultRole is the role of units whose [X-Fleet] Role= is empty.
const DefaultRole = "*"

// The placement strategies, for Options.Strategy and [X-Fleet] Placement=.
const (
	// Spread ranks first the machine running the fewest units, then the one
	// with the most free resources: load and failures spread across the
	// cluster. It is the default.
	Spread = unit.PlacementSpread
	// Binpack ranks first the machine left with the least free resources
	// once the unit is placed, keeping whole machines free for large units.
	Binpack = unit.PlacementBinpack
)

// ErrInvalidOptions is returned, wrapped, by SetOptions for options it
// rejects.
var ErrInvalidOptions = errors.New("scheduler: invalid options")

// Resources is an amount of CPU and memory. A zero field is "not declared":
// for a unit, it needs none of that resource; for a machine, its capacity is
// unknown and anything fits; for a quota, there is no cap.
type Resources struct {
	// CPUPercent is CPU time in percent of one CPU (100 = one CPU), as
	// systemd's CPUQuota=.
	CPUPercent int64
	// MemoryBytes is memory in bytes, as systemd's MemoryMax=.
	MemoryBytes int64
}

// IsZero reports whether r declares no resource.
func (r Resources) IsZero() bool { return r == Resources{} }

func (r Resources) add(o Resources) Resources {
	return Resources{r.CPUPercent + o.CPUPercent, r.MemoryBytes + o.MemoryBytes}
}

func (r Resources) sub(o Resources) Resources {
	return Resources{r.CPUPercent - o.CPUPercent, r.MemoryBytes - o.MemoryBytes}
}

// Machine is a machine units may be placed on.
type Machine struct {
	ID       string
	Metadata map[string]string
	// Capacity is what the units placed on the machine may need in all. A
	// zero field is unknown: any unit fits in that dimension.
	Capacity Resources
	// Drivers are the drivers the machine runs units with; none means exec
	// (see unit.DriverSet.Runs).
	Drivers unit.DriverSet
}

// Unit is what the scheduler needs to know of a unit. A Unit must not be
// changed once given to a Cluster; give a new one to Place instead.
type Unit struct {
	Name string
	// ID is the unit's number in a Cluster whose owner numbers its units
	// (SetIDs): unique among the units the owner holds, the same in every
	// Unit of one name, small (the Cluster keeps a slice indexed by it) and
	// not 0. A Cluster without IDs numbers units itself, by name, and
	// ignores it.
	ID int32
	// Spec is what the unit's file says of its placement, shared by the
	// units of one file (every instance of a template that shares one):
	// a unit is its name, its number and a pointer, 32 bytes, a million
	// times.
	*Spec
}

// Spec is a unit file's placement: its [X-Fleet] section and what it
// needs. Never changed once made.
type Spec struct {
	// Fleet is the unit's [X-Fleet] section, shared with its file (a copy
	// a unit was 190 bytes of the leader's heap). Never nil.
	Fleet *unit.Fleet
	// Needs is what the unit needs of a machine's capacity.
	Needs Resources
	// Drivers are the drivers that can run the unit (unit.File.Drivers);
	// zero means any.
	Drivers unit.DriverSet
}

// NewUnit returns the scheduler's view of a unit file: its name, its
// [X-Fleet] options, and as Needs its [Service] CPUQuota= and MemoryMax=.
func NewUnit(f *unit.File) *Unit {
	return &Unit{Name: f.Name, Spec: &Spec{
		Fleet:   &f.Fleet,
		Needs:   Resources{CPUPercent: int64(f.Service.CPUQuotaPercent), MemoryBytes: f.Service.MemoryMax},
		Drivers: f.Drivers(),
	}}
}

// Role returns the unit's role: its [X-Fleet] Role=, or DefaultRole.
func (u *Unit) Role() string {
	if u.Fleet.Role == "" {
		return DefaultRole
	}
	return u.Fleet.Role
}

// Options are a Cluster's settings, which may change at any time.
type Options struct {
	// Strategy ranks machines for units without [X-Fleet] Placement=:
	// Spread or Binpack. Empty means Spread.
	Strategy string
	// Roles holds the policy of roles by name (DefaultRole for units
	// without Role=). A role not listed has weight 1 and no quota.
	Roles map[string]RolePolicy
	// ReservedMetadata are metadata keys whose values only an admin sets:
	// the engine drops a machine's own values for them before the
	// machine's metadata reaches the scheduler, which does not read this.
	ReservedMetadata []string
}

// RolePolicy is how a role shares the cluster.
type RolePolicy struct {
	// Weight scales the role's fair share in Allocate: a role of weight 2
	// is entitled to twice the dominant share of a role of weight 1.
	// Zero means 1; it must not be negative.
	Weight float64
	// Quota caps the resources of all the role's placed units together. A
	// zero field is no cap in that dimension; fields must not be negative.
	Quota Resources
}

// validate returns o with defaults filled in, or an error naming the
// offending field.
func (o Options) validate() (Options, error) {
	switch o.Strategy {
	case "":
		o.Strategy = Spread
	case Spread, Binpack:
	default:
		return o, fmt.Errorf("%w: strategy %q (want %s or %s)", ErrInvalidOptions, o.Strategy, Spread, Binpack)
	}
	roles := make(map[string]RolePolicy, len(o.Roles))
	for name, p := range o.Roles {
		switch {
		case name == "":
			return o, fmt.Errorf("%w: empty role name (the default role is %q)", ErrInvalidOptions, DefaultRole)
		case math.IsNaN(p.Weight) || math.IsInf(p.Weight, 0) || p.Weight < 0:
			return o, fmt.Errorf("%w: role %s: weight %v (want a positive number, or 0 for 1)", ErrInvalidOptions, name, p.Weight)
		case p.Quota.CPUPercent < 0 || p.Quota.MemoryBytes < 0:
			return o, fmt.Errorf("%w: role %s: negative quota (want 0 for no cap)", ErrInvalidOptions, name)
		}
		if p.Weight == 0 {
			p.Weight = 1
		}
		roles[name] = p
	}
	o.Roles = roles
	return o, nil
}

// policy returns the policy of role.
func (o *Options) policy(role string) RolePolicy {
	if p, ok := o.Roles[role]; ok {
		return p
	}
	return RolePolicy{Weight: 1}
}

// Decision is the outcome of Decide: a machine, or the reason there is none.
type Decision struct {
	// Machine is the machine the unit should run on, "" if none can take it.
	Machine string
	// Reason says why no machine can take the unit; "" when Machine is set.
	Reason string
	// Displaced are units (sorted by name) that the unit replaces
	// ([X-Fleet] Replaces=) and that run on Machine: they must move before
	// the unit is placed there.
	Displaced []string
}

// machine is a machine and the aggregates of the units placed on it.
type machine struct {
	Machine
	// placed are the units placed on it, in no order: Cluster.on finds
	// one by name in where or global. A map by name here cost 23 bytes a
	// placed unit more (101.9 against 78.5, BenchmarkPlace100kUnitsHeap).
	placed []*placement
	used   Resources // sum of the placed units' Needs
	free   int64     // freeScore(used), kept for the orders
	mark   uint64    // == Cluster.epoch when in the current candidate set
}

// placement is one unit placed on one machine (a global unit has one per
// machine it runs on). It is 32 bytes, a size class: one field more
// would make it 48, 16 bytes a placed unit (TestPlacementSize).
type placement struct {
	u    *Unit
	m    *machine
	prep *prep
	idx  int32 // its index in m.placed
}

// roleUsage is what a role's placed units use.
type roleUsage struct {
	used  Resources
	count int
}

// Cluster is the scheduler's view: the machines available for placement and
// the units placed on them. It keeps per-machine aggregates and indexes up
// to date as units are placed, so that a decision costs time in the number
// of machines it looks at, never in the number of units. A Cluster is not
// safe for concurrent use. The zero value is not usable; use NewCluster.
type Cluster struct {
	opts     Options
	machines map[string]*machine
	ids      []string // sorted machine IDs
	spread   order    // machines by spread rank
	binpack  order    // machines by binpack rank
	meta     map[string]map[string]map[*machine]struct{}
	drivers  map[unit.DriverSet]int // how many machines run each set of drivers
	total    Resources              // sum of known capacities, for shares
	minCap   Resources              // smallest known capacity per dimension, for binpack's bound

	// where holds the placement of each placed unit that is not global
	// at its number (id): a slice, where a map by name was 50 bytes and a
	// hashed lookup a unit, the largest part of a million-unit scheduler.
	where []*placement
	// resolve numbers units by name for the owner's IDs (SetIDs); without
	// it the Cluster numbers them itself in names.
	resolve   func(name string) (int32, bool)
	names     map[string]int32
	slab      []placement                        // placements not handed out yet (newPlacement)
	global    map[string]map[*machine]*placement // global units' instances
	replacers map[string]map[*placement]struct{} // replaced name -> placed units replacing it
	pats      patterns
	// matches are the registered patterns matching a placed unit's name,
	// for the few placements that have any: a field would take every
	// placement from 32 bytes to 48.
	matches map[*placement][]*pattern
	roles   map[string]*roleUsage

	// lastFleet and lastPrep are the last prep made without patterns, and
	// the section it was made of (prepare).
	lastFleet *unit.Fleet
	lastPrep  *prep

	epoch uint64      // candidate marks
	rej   []rejection // scratch for decisions
	ev    eval        // scratch for decisions
}

// NewCluster returns an empty cluster with default options.
func NewCluster() *Cluster {
	c := &Cluster{
		machines:  map[string]*machine{},
		drivers:   map[unit.DriverSet]int{},
		meta:      map[string]map[string]map[*machine]struct{}{},
		names:     map[string]int32{},
		global:    map[string]map[*machine]*placement{},
		replacers: map[string]map[*placement]struct{}{},
		matches:   map[*placement][]*pattern{},
		roles:     map[string]*roleUsage{},
		pats:      newPatterns(),
	}
	c.opts, _ = Options{}.validate()
	c.spread.less = spreadLess
	c.binpack.less = binpackLess
	return c
}

// SetIDs tells the Cluster that its owner numbers units: every Unit given
// to it carries its ID (Unit.ID), and id returns the ID of the unit of
// that name, if the owner holds one. The owner frees an ID only once the
// Cluster no longer places its unit. The Cluster then keeps no map of
// units by name; units named by others (MachineOf=, Replaces=, Unplace)
// are found through id. It must be called before any unit is placed.
func (c *Cluster) SetIDs(id func(name string) (int32, bool)) {
	if len(c.names) > 0 || c.where != nil {
		panic("scheduler: SetIDs after units were placed")
	}
	c.resolve, c.names = id, nil
}

// idOf returns u's number. Placing a unit the owner has not numbered is
// the owner's error.
func (c *Cluster) idOf(u *Unit) int32 {
	if c.resolve != nil {
		if u.ID <= 0 {
			panic(fmt.Sprintf("scheduler: unit %s has no ID (%d)", u.Name, u.ID))
		}
		return u.ID
	}
	id, ok := c.names[u.Name]
	if !ok {
		id = int32(len(c.names))
		c.names[u.Name] = id
	}
	return id
}

// at returns the placement of the unit numbered id, named name (a unit
// that is not global), or nil.
func (c *Cluster) at(id int32, name string) *placement {
	if int(id) < len(c.where) {
		if pl := c.where[id]; pl != nil && pl.u.Name == name {
			return pl
		}
	}
	return nil
}

// placementOf returns where u is placed if it is not global, or nil. A
// unit the owner has not numbered (one it asks about before it holds it:
// a plan's new unit) is placed nowhere.
func (c *Cluster) placementOf(u *Unit) *placement {
	if c.resolve != nil && u.ID <= 0 {
		return nil
	}
	return c.at(c.idOf(u), u.Name)
}

// byName returns where the named unit is placed if it is not global, or nil.
func (c *Cluster) byName(name string) *placement {
	var id int32
	var ok bool
	if c.resolve != nil {
		id, ok = c.resolve(name)
	} else {
		id, ok = c.names[name]
	}
	if !ok {
		return nil
	}
	return c.at(id, name)
}

// SetOptions replaces the cluster's options. Placed units stay where they
// are, even over a lowered quota. It returns an error wrapping
// ErrInvalidOptions, and changes nothing, if o is invalid.
func (c *Cluster) SetOptions(o Options) error {
	v, err := o.validate()
	if err != nil {
		return err
	}
	c.opts = v
	return nil
}

// Options returns the cluster's options, defaults filled in.
func (c *Cluster) Options() Options {
	o := c.opts
	o.Roles = maps.Clone(o.Roles)
	return o
}

// SetMachine adds a machine or replaces its metadata and capacity. Units
// placed on it stay; Fits tells which no longer may.
func (c *Cluster) SetMachine(m Machine) {
	m.Metadata = maps.Clone(m.Metadata)
	ms, ok := c.machines[m.ID]
	if !ok {
		ms = &machine{Machine: m}
		ms.free = freeScore(ms.Capacity, ms.used)
		c.machines[m.ID] = ms
		i, _ := slices.BinarySearch(c.ids, m.ID)
		c.ids = slices.Insert(c.ids, i, m.ID)
		c.spread.insert(ms)
		c.binpack.insert(ms)
		c.addCapacity(ms.Capacity)
	} else {
		c.unindexMetadata(ms)
		c.countDrivers(ms.Drivers, -1)
		at := c.unrank(ms)
		ms.Metadata = m.Metadata
		ms.Capacity = m.Capacity
		ms.Drivers = m.Drivers
		c.rerank(ms, at)
		c.capacityChanged()
	}
	c.countDrivers(ms.Drivers, 1)
	c.indexMetadata(ms)
}

// countDrivers adds n machines running the drivers in set.
func (c *Cluster) countDrivers(set unit.DriverSet, n int) {
	if c.drivers[set] += n; c.drivers[set] == 0 {
		delete(c.drivers, set)
	}
}

// driverCheck reports whether some machine cannot run u's drivers (so
// that the driver checker must run), and whether any machine can.
func (c *Cluster) driverCheck(u *Unit) (some, any bool) {
	if u.Drivers == 0 {
		return false, len(c.machines) > 0
	}
	for set := range c.drivers {
		if set.Runs(u.Drivers) {
			any = true
		} else {
			some = true
		}
	}
	return some, any
}

// RemoveMachine removes a machine; the units placed on it are forgotten.
func (c *Cluster) RemoveMachine(id string) {
	ms, ok := c.machines[id]
	if !ok {
		return
	}
	for _, pl := range slices.SortedFunc(slices.Values(ms.placed), byName) {
		c.remove(pl)
	}
	c.unindexMetadata(ms)
	c.countDrivers(ms.Drivers, -1)
	c.spread.remove(ms)
	c.binpack.remove(ms)
	delete(c.machines, id)
	i, _ := slices.BinarySearch(c.ids, id)
	c.ids = slices.Delete(c.ids, i, i+1)
	c.capacityChanged()
}

// HasMachine reports whether id is a machine of the cluster.
func (c *Cluster) HasMachine(id string) bool { _, ok := c.machines[id]; return ok }

// Place records that u runs on machine id. For a unit that is not global,
// this moves it there from wherever it was; a global unit runs on every
// machine it is placed on, and Place adds one. Place records what it is
// told, checking nothing: Decide, Allocate and GlobalMachines say where
// units fit, Fits whether they still do. Placing on a machine the cluster
// does not have only forgets where a non-global unit was.
func (c *Cluster) Place(u *Unit, id string) {
	if pl := c.placementOf(u); pl != nil {
		c.remove(pl)
	}
	ms := c.machines[id]
	if !u.Fleet.Global {
		for _, name := range c.globalMachines(u.Name) {
			c.remove(c.global[u.Name][c.machines[name]])
		}
	} else if pl := c.on(ms, u.Name); pl != nil {
		c.remove(pl)
	}
	if ms != nil {
		c.add(u, ms)
	}
}

// Reserve makes room for n placed units in a cluster with none placed: a
// new leader places every unit of the cluster as the machines reconnect,
// and the map of where they are grew, and was copied, all the way to its
// size while the agents waited. It does nothing once units are placed.
func (c *Cluster) Reserve(n int) {
	if len(c.where) == 0 && n > 0 {
		c.where = make([]*placement, 0, n+1)
	}
}

// placementSlab is how many placements are allocated at once: a million
// placed units are a thousand allocations, not a million, while one kept
// keeps at most a slab's worth of others' memory.
const placementSlab = 1024

// newPlacement returns a placement to fill in.
func (c *Cluster) newPlacement() *placement {
	if len(c.slab) == 0 {
		c.slab = make([]placement, placementSlab)
	}
	pl := &c.slab[0]
	c.slab = c.slab[1:]
	return pl
}

// Unplace forgets where the named unit runs (every machine, for a global
// unit).
func (c *Cluster) Unplace(name string) {
	if pl := c.byName(name); pl != nil {
		c.remove(pl)
	}
	for _, id := range c.globalMachines(name) {
		c.remove(c.global[name][c.machines[id]])
	}
}

// UnplaceUnit is Unplace for a caller holding the unit: no lookup by name
// when it is not global.
func (c *Cluster) UnplaceUnit(u *Unit) {
	if !u.Fleet.Global {
		if pl := c.placementOf(u); pl != nil {
			c.remove(pl)
		}
		return
	}
	c.Unplace(u.Name)
}

// UnplaceFrom forgets that the named unit runs on machine id; its other
// placements (a global unit's) stay.
func (c *Cluster) UnplaceFrom(name, id string) {
	if ms := c.machines[id]; ms != nil {
		if pl := c.on(ms, name); pl != nil {
			c.remove(pl)
		}
	}
}

// on returns the placement of the named unit on m, or nil. A name is placed
// either as a unit that is not global (where) or as a global one, never
// both (Place).
func (c *Cluster) on(m *machine, name string) *placement {
	if pl := c.byName(name); pl != nil {
		if pl.m == m {
			return pl
		}
		return nil
	}
	return c.global[name][m]
}

// byName orders placements by unit name.
func byName(a, b *placement) int { return strings.Compare(a.u.Name, b.u.Name) }

// Where returns the machine a unit that is not global is placed on.
func (c *Cluster) Where(name string) (string, bool) {
	if pl := c.byName(name); pl != nil {
		return pl.m.ID, true
	}
	return "", false
}

// WhereUnit is Where for a caller holding the unit: no lookup by name.
func (c *Cluster) WhereUnit(u *Unit) (string, bool) {
	if pl := c.placementOf(u); pl != nil {
		return pl.m.ID, true
	}
	return "", false
}

// GlobalPlacements returns the machines a global unit is placed on, sorted.
func (c *Cluster) GlobalPlacements(name string) []string { return c.globalMachines(name) }

func (c *Cluster) globalMachines(name string) []string {
	inst := c.global[name]
	if len(inst) == 0 {
		return nil
	}
	ids := make([]string, 0, len(inst))
	for m := range inst {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	return ids
}

// Load returns the number of units placed on machine id.
func (c *Cluster) Load(id string) int {
	if ms, ok := c.machines[id]; ok {
		return len(ms.placed)
	}
	return 0
}

// Used returns what the units placed on machine id need in all.
func (c *Cluster) Used(id string) Resources {
	if ms, ok := c.machines[id]; ok {
		return ms.used
	}
	return Resources{}
}

// add places u on ms, keeping every aggregate and index.
func (c *Cluster) add(u *Unit, ms *machine) {
	var id int32
	if !u.Fleet.Global {
		id = c.idOf(u)
		if int(id) >= len(c.where) {
			c.where = slices.Grow(c.where, int(id)+1-len(c.where))[:int(id)+1]
		}
		if old := c.where[id]; old != nil {
			// The owner freed the number of a unit still placed (Place
			// found none of this name): that unit is gone, and so is
			// its placement.
			c.remove(old)
		}
	}
	pr := c.prepare(u)
	for _, p := range pr.forward {
		p.refs++
		p.declared[ms]++
		if p.refs == 1 {
			c.pats.unused--
		}
	}
	pl := c.newPlacement()
	*pl = placement{u: u, m: ms, prep: pr, idx: int32(len(ms.placed))}
	for _, p := range c.pats.candidates(u.Name) {
		if p.match(u.Name) {
			c.match(pl, p)
		}
	}
	at := c.unrank(ms)
	ms.placed = append(ms.placed, pl)
	ms.used = ms.used.add(u.Needs)
	c.rerank(ms, at)
	ru := c.roles[pr.role]
	if ru == nil {
		ru = &roleUsage{}
		c.roles[pr.role] = ru
	}
	ru.used = ru.used.add(u.Needs)
	ru.count++
	if u.Fleet.Global {
		inst := c.global[u.Name]
		if inst == nil {
			inst = map[*machine]*placement{}
			c.global[u.Name] = inst
		}
		inst[ms] = pl
		return
	}
	c.where[id] = pl
	for _, name := range u.Fleet.Replaces {
		set := c.replacers[name]
		if set == nil {
			set = map[*placement]struct{}{}
			c.replacers[name] = set
		}
		set[pl] = struct{}{}
	}
}

// remove undoes add.
func (c *Cluster) remove(pl *placement) {
	u, ms := pl.u, pl.m
	for _, p := range pl.prep.forward {
		p.refs--
		decr(p.declared, ms)
		if p.refs == 0 {
			c.pats.unused++
		}
	}
	if list, ok := c.matches[pl]; ok {
		for _, p := range list {
			decr(p.matched, ms)
		}
		delete(c.matches, pl)
	}
	at := c.unrank(ms)
	last := ms.placed[len(ms.placed)-1]
	last.idx, ms.placed[pl.idx] = pl.idx, last
	ms.placed[len(ms.placed)-1] = nil
	ms.placed = ms.placed[:len(ms.placed)-1]
	ms.used = ms.used.sub(u.Needs)
	c.rerank(ms, at)
	ru := c.roles[pl.prep.role]
	ru.used = ru.used.sub(u.Needs)
	if ru.count--; ru.count == 0 {
		delete(c.roles, pl.prep.role)
	}
	if u.Fleet.Global {
		inst := c.global[u.Name]
		delete(inst, ms)
		if len(inst) == 0 {
			delete(c.global, u.Name)
		}
	} else {
		c.where[c.idOf(u)] = nil
		for _, name := range u.Fleet.Replaces {
			set := c.replacers[name]
			delete(set, pl)
			if len(set) == 0 {
				delete(c.replacers, name)
			}
		}
	}
	c.pats.maybeEvict(c)
}

// match notes that registered pattern p matches the unit placed as pl.
func (c *Cluster) match(pl *placement, p *pattern) {
	p.matched[pl.m]++
	c.matches[pl] = append(c.matches[pl], p)
}

func decr(counts map[*machine]int, ms *machine) {
	if counts[ms]--; counts[ms] <= 0 {
		delete(counts, ms)
	}
}

// rankAt is where a machine is in the orders.
type rankAt struct{ spread, binpack pos }

// unrank returns where ms is in the orders, before a change to its units,
// usage or capacity; rerank then moves it to its new places. Nothing else
// may change the orders in between.
func (c *Cluster) unrank(ms *machine) rankAt {
	return rankAt{c.spread.index(ms), c.binpack.index(ms)}
}

func (c *Cluster) rerank(ms *machine, at rankAt) {
	ms.free = freeScore(ms.Capacity, ms.used)
	c.spread.fix(at.spread)
	c.binpack.fix(at.binpack)
}

// capacityChanged recomputes the cluster-wide capacity aggregates after a
// machine's capacity changed or a machine left.
func (c *Cluster) capacityChanged() {
	c.total, c.minCap = Resources{}, Resources{}
	for _, ms := range c.machines {
		c.addCapacity(ms.Capacity)
	}
}

// addCapacity counts a machine's capacity in the cluster-wide aggregates.
func (c *Cluster) addCapacity(capa Resources) {
	if v := capa.CPUPercent; v > 0 {
		c.total.CPUPercent += v
		if c.minCap.CPUPercent == 0 || v < c.minCap.CPUPercent {
			c.minCap.CPUPercent = v
		}
	}
	if v := capa.MemoryBytes; v > 0 {
		c.total.MemoryBytes += v
		if c.minCap.MemoryBytes == 0 || v < c.minCap.MemoryBytes {
			c.minCap.MemoryBytes = v
		}
	}
}

func (c *Cluster) indexMetadata(ms *machine) {
	for k, v := range ms.Metadata {
		vals := c.meta[k]
		if vals == nil {
			vals = map[string]map[*machine]struct{}{}
			c.meta[k] = vals
		}
		set := vals[v]
		if set == nil {
			set = map[*machine]struct{}{}
			vals[v] = set
		}
		set[ms] = struct{}{}
	}
}

func (c *Cluster) unindexMetadata(ms *machine) {
	for k, v := range ms.Metadata {
		delete(c.meta[k][v], ms)
		if len(c.meta[k][v]) == 0 {
			delete(c.meta[k], v)
		}
		if len(c.meta[k]) == 0 {
			delete(c.meta, k)
		}
	}
}
