package scheduler

import (
	"maps"
	"slices"

	"github.com/flotilla/flotilla/internal/unit"
)

// This file holds the feasibility checkers: each decides, for one unit and
// one machine, whether an [X-Fleet] rule lets the unit run there, and when
// it does not, records a rejection that reason.go turns into words.

// prep is what the checkers need of a unit beyond the Unit itself, computed
// once per decision and kept with each placement.
type prep struct {
	role    string
	req     []metaReq  // MachineMetadata=, sorted by key
	forward []*pattern // Conflicts=, registered
}

// metaReq is one key of MachineMetadata=: a machine must have one of values.
type metaReq struct {
	key    string
	values []string
}

// prepare computes u's prep, registering its Conflicts= patterns. A prep
// without patterns depends on the unit's [X-Fleet] section alone, which
// the instances of a template share: the last one made is given again to
// the next unit of the same section (a million instances placed were a
// million preps, 66 MB of the leader's heap).
func (c *Cluster) prepare(u *Unit) *prep {
	if len(u.Fleet.Conflicts) == 0 && u.Fleet == c.lastFleet && c.lastPrep != nil {
		return c.lastPrep
	}
	pr := &prep{role: u.Role()}
	defer func() {
		if len(pr.forward) == 0 {
			c.lastFleet, c.lastPrep = u.Fleet, pr
		}
	}()
	if reqs := unit.MetadataRequirements(*u.Fleet); len(reqs) > 0 {
		pr.req = make([]metaReq, 0, len(reqs))
		for _, k := range slices.Sorted(maps.Keys(reqs)) {
			pr.req = append(pr.req, metaReq{k, reqs[k]})
		}
	}
	if len(u.Fleet.Conflicts) > 0 {
		pr.forward = make([]*pattern, len(u.Fleet.Conflicts))
		for i, g := range u.Fleet.Conflicts {
			pr.forward[i] = c.pats.register(c, g)
		}
	}
	return pr
}

// kind is what a machine was rejected for. Kinds are in chain order, which
// is also the order reasons list them in.
type kind uint8

const (
	kindDriver         kind = iota // runs none of the drivers that can run the unit
	kindMachineID                  // not the machine MachineID= names
	kindMetadata                   // metadata does not match MachineMetadata=
	kindMachineOf                  // a MachineOf= unit does not run there
	kindConflict                   // a unit there conflicts with it, or it with a unit there
	kindReplacedBy                 // a unit there replaces it
	kindReplacesGlobal             // it replaces a global unit that runs there
	kindReplaces                   // it replaces a unit there (which may be displaced)
	kindCPU                        // not enough free CPU
	kindMemory                     // not enough free memory
	numKinds
)

// rejection is why a machine cannot take a unit.
type rejection struct {
	kind kind
	m    *machine
	name string // the other unit, for MachineOf, replaced-by and replaces kinds
	free int64  // for CPU and memory: what is free for the unit
}

// checker is one link of a feasibility chain.
type checker struct {
	name  string // the [X-Fleet] rule checked, for tests and debugging
	check func(e *eval, m *machine) (rejection, bool)
}

// The checkers, each a few map lookups at most thanks to the Cluster's
// indexes. Chains run them in this order: Replaces first, which in
// Decide's first pass only sets aside the machines to try again in the
// second; then the rules users write, before the resources they fill, so
// that a machine both forbidden and full is reported as forbidden.
var (
	driverChecker         = checker{"Drivers", (*eval).checkDriver}
	replacesChecker       = checker{"Replaces", (*eval).checkReplaces}
	machineIDChecker      = checker{"MachineID", (*eval).checkMachineID}
	metadataChecker       = checker{"MachineMetadata", (*eval).checkMetadata}
	machineOfChecker      = checker{"MachineOf", (*eval).checkMachineOf}
	conflictsChecker      = checker{"Conflicts", (*eval).checkConflicts}
	replacedByChecker     = checker{"ReplacedBy", (*eval).checkReplacedBy}
	replacesGlobalChecker = checker{"ReplacesGlobal", (*eval).checkReplacesGlobal}
	resourcesChecker      = checker{"Resources", (*eval).checkResources}
	residentChecker       = checker{"Resources", (*eval).checkResident}
)

// eval is one unit being checked against machines.
type eval struct {
	c       *Cluster
	u       *Unit
	pr      *prep
	reverse []*pattern // patterns placed units declare that match u's name

	// placed is set when u is placed somewhere: at then looks for it.
	placed bool
	// displacing treats the units u replaces as gone (Decide's second pass).
	displacing bool
	// ex are the placements on the machine being checked that are treated
	// as gone: u's own, and in the second pass the units it displaces.
	ex    []*placement
	exBuf [4]*placement
	chain []checker
	buf   [8]checker
}

// newEval returns an eval of u; self is u's placement, if it is placed,
// whose pattern matches are already known. The eval is the cluster's
// scratch one, valid until the next call.
func (c *Cluster) newEval(u *Unit, pr *prep, self *placement) *eval {
	e := &c.ev
	reverse := e.reverse[:0]
	*e = eval{c: c, u: u, pr: pr, placed: c.placementOf(u) != nil || c.global[u.Name] != nil}
	if self != nil {
		for _, p := range c.matches[self] {
			if p.refs > 0 {
				reverse = append(reverse, p)
			}
		}
	} else {
		for _, p := range c.pats.candidates(u.Name) {
			if p.refs > 0 && p.match(u.Name) {
				reverse = append(reverse, p)
			}
		}
	}
	e.reverse = reverse
	return e
}

// decideChain returns the chain Decide runs on candidate machines. The
// candidate set already guarantees MachineID= and MachineOf=.
func (e *eval) decideChain() []checker {
	ch := e.buf[:0]
	if some, _ := e.c.driverCheck(e.u); some {
		ch = append(ch, driverChecker)
	}
	if len(e.u.Fleet.Replaces) > 0 && !e.u.Fleet.Global && !e.displacing {
		// First, so that every machine running a unit u replaces is
		// checked again, with that unit gone, if no other machine fits.
		ch = append(ch, replacesChecker)
	}
	if len(e.pr.req) > 0 {
		ch = append(ch, metadataChecker)
	}
	if len(e.pr.forward) > 0 || len(e.reverse) > 0 {
		ch = append(ch, conflictsChecker)
	}
	if len(e.c.replacers[e.u.Name]) > 0 {
		ch = append(ch, replacedByChecker)
	}
	if len(e.u.Fleet.Replaces) > 0 && !e.u.Fleet.Global {
		ch = append(ch, replacesGlobalChecker)
	}
	if !e.u.Needs.IsZero() {
		ch = append(ch, resourcesChecker)
	}
	e.chain = ch
	return ch
}

// residentChain returns the chain Fits and GlobalMachines run: every rule,
// for a unit that may already run on the machine. Replaces= is not
// checked: a unit it replaces is the one to move (see checkReplacedBy).
func (e *eval) residentChain() []checker {
	ch := e.buf[:0]
	if some, _ := e.c.driverCheck(e.u); some {
		ch = append(ch, driverChecker)
	}
	if e.u.Fleet.MachineID != "" {
		ch = append(ch, machineIDChecker)
	}
	if len(e.pr.req) > 0 {
		ch = append(ch, metadataChecker)
	}
	if len(e.u.Fleet.MachineOf) > 0 {
		ch = append(ch, machineOfChecker)
	}
	if len(e.pr.forward) > 0 || len(e.reverse) > 0 {
		ch = append(ch, conflictsChecker)
	}
	if len(e.c.replacers[e.u.Name]) > 0 {
		ch = append(ch, replacedByChecker)
	}
	if len(e.u.Fleet.Replaces) > 0 && !e.u.Fleet.Global {
		ch = append(ch, replacesGlobalChecker)
	}
	if !e.u.Needs.IsZero() {
		ch = append(ch, residentChecker)
	}
	e.chain = ch
	return ch
}

// at makes m the machine being checked.
func (e *eval) at(m *machine) {
	e.ex = e.exBuf[:0]
	if e.placed {
		if pl := e.c.on(m, e.u.Name); pl != nil {
			e.ex = append(e.ex, pl)
		}
	}
	if e.displacing {
		for _, x := range e.u.Fleet.Replaces {
			if pl := e.c.on(m, x); pl != nil && x != e.u.Name && !pl.u.Fleet.Global {
				e.ex = append(e.ex, pl)
			}
		}
	}
}

// feasible runs the chain on m, recording a rejection in the cluster's
// scratch list.
func (e *eval) feasible(m *machine) bool {
	e.at(m)
	for _, ch := range e.chain {
		if r, ok := ch.check(e, m); !ok {
			e.c.rej = append(e.c.rej, r)
			return false
		}
	}
	return true
}

func (e *eval) excluded(pl *placement) bool {
	for _, x := range e.ex {
		if x == pl {
			return true
		}
	}
	return false
}

// exUsed returns what the excluded placements use.
func (e *eval) exUsed() Resources {
	var r Resources
	for _, x := range e.ex {
		r = r.add(x.u.Needs)
	}
	return r
}

func (e *eval) checkDriver(m *machine) (rejection, bool) {
	if !m.Drivers.Runs(e.u.Drivers) {
		return rejection{kind: kindDriver, m: m}, false
	}
	return rejection{}, true
}

func (e *eval) checkMachineID(m *machine) (rejection, bool) {
	if id := e.u.Fleet.MachineID; id != "" && id != m.ID {
		return rejection{kind: kindMachineID, m: m}, false
	}
	return rejection{}, true
}

func (e *eval) checkMetadata(m *machine) (rejection, bool) {
	for _, r := range e.pr.req {
		if v, ok := m.Metadata[r.key]; !ok || !slices.Contains(r.values, v) {
			return rejection{kind: kindMetadata, m: m}, false
		}
	}
	return rejection{}, true
}

func (e *eval) checkMachineOf(m *machine) (rejection, bool) {
	for _, peer := range e.u.Fleet.MachineOf {
		if e.c.on(m, peer) == nil {
			return rejection{kind: kindMachineOf, m: m, name: peer}, false
		}
	}
	return rejection{}, true
}

// checkConflicts checks both directions of Conflicts=: u's patterns
// against the names of the units on m, and the patterns of the units on m
// against u's name. The pattern registry counts both per machine; the
// excluded placements are taken off the counts.
func (e *eval) checkConflicts(m *machine) (rejection, bool) {
	for _, p := range e.pr.forward {
		if n := p.matched[m]; n > 0 {
			for _, x := range e.ex {
				if slices.Contains(e.c.matches[x], p) {
					n--
				}
			}
			if n > 0 {
				return rejection{kind: kindConflict, m: m}, false
			}
		}
	}
	for _, p := range e.reverse {
		if n := p.declared[m]; n > 0 {
			for _, x := range e.ex {
				for _, q := range x.prep.forward {
					if q == p {
						n--
					}
				}
			}
			if n > 0 {
				return rejection{kind: kindConflict, m: m}, false
			}
		}
	}
	return rejection{}, true
}

// checkReplacedBy rejects a machine running a unit that replaces u: in
// fleet, the replaced unit is the one that leaves. When two units replace
// each other, each keeps off the other's machine and neither displaces the
// other, so they cannot chase each other around the cluster.
func (e *eval) checkReplacedBy(m *machine) (rejection, bool) {
	by := ""
	for pl := range e.c.replacers[e.u.Name] {
		if pl.m == m && pl.u.Name != e.u.Name && (by == "" || pl.u.Name < by) {
			by = pl.u.Name
		}
	}
	if by != "" {
		return rejection{kind: kindReplacedBy, m: m, name: by}, false
	}
	return rejection{}, true
}

// checkReplacesGlobal rejects a machine running a global unit u replaces: a
// global unit is not displaced.
func (e *eval) checkReplacesGlobal(m *machine) (rejection, bool) {
	for _, x := range e.u.Fleet.Replaces {
		if pl := e.c.on(m, x); pl != nil && pl.u.Fleet.Global {
			return rejection{kind: kindReplacesGlobal, m: m, name: x}, false
		}
	}
	return rejection{}, true
}

// checkReplaces rejects, in Decide's first pass, a machine running a unit u
// replaces. The second pass takes such machines if no other fits.
func (e *eval) checkReplaces(m *machine) (rejection, bool) {
	for _, x := range e.u.Fleet.Replaces {
		if pl := e.c.on(m, x); pl != nil && x != e.u.Name && !pl.u.Fleet.Global {
			return rejection{kind: kindReplaces, m: m, name: x}, false
		}
	}
	return rejection{}, true
}

// checkResources checks that u fits in what m has free (its capacity less
// what the units placed there need), in every dimension where both the
// unit's need and the machine's capacity are known.
func (e *eval) checkResources(m *machine) (rejection, bool) {
	need, capa := e.u.Needs, m.Capacity
	used := m.used.sub(e.exUsed())
	if need.CPUPercent > 0 && capa.CPUPercent > 0 && used.CPUPercent+need.CPUPercent > capa.CPUPercent {
		return rejection{kind: kindCPU, m: m, free: capa.CPUPercent - used.CPUPercent}, false
	}
	if need.MemoryBytes > 0 && capa.MemoryBytes > 0 && used.MemoryBytes+need.MemoryBytes > capa.MemoryBytes {
		return rejection{kind: kindMemory, m: m, free: capa.MemoryBytes - used.MemoryBytes}, false
	}
	return rejection{}, true
}

// checkResident is checkResources for a unit that may already run on m.
// One that does fits unless the machine is overcommitted (its capacity
// shrank): then the units whose names sort first keep their room, and the
// rest do not fit, so that the fewest move and always the same ones.
func (e *eval) checkResident(m *machine) (rejection, bool) {
	self := e.c.on(m, e.u.Name)
	if self == nil {
		return e.checkResources(m)
	}
	need, capa := e.u.Needs, m.Capacity
	total := m.used.sub(self.u.Needs).add(need)
	overCPU := need.CPUPercent > 0 && capa.CPUPercent > 0 && total.CPUPercent > capa.CPUPercent
	overMem := need.MemoryBytes > 0 && capa.MemoryBytes > 0 && total.MemoryBytes > capa.MemoryBytes
	if !overCPU && !overMem {
		return rejection{}, true
	}
	var before Resources
	for _, pl := range m.placed {
		if pl.u.Name < e.u.Name {
			before = before.add(pl.u.Needs)
		}
	}
	if overCPU && before.CPUPercent+need.CPUPercent > capa.CPUPercent {
		return rejection{kind: kindCPU, m: m, free: capa.CPUPercent - before.CPUPercent}, false
	}
	if overMem && before.MemoryBytes+need.MemoryBytes > capa.MemoryBytes {
		return rejection{kind: kindMemory, m: m, free: capa.MemoryBytes - before.MemoryBytes}, false
	}
	return rejection{}, true
}

// conflictWith returns the first unit on m, by name, that conflicts with
// e's unit in either direction, for reasons.
func (e *eval) conflictWith(m *machine) string {
	e.at(m)
	first := ""
	for _, pl := range m.placed {
		name := pl.u.Name
		if name == e.u.Name || e.excluded(pl) || (first != "" && name >= first) {
			continue
		}
		hit := false
		matches := e.c.matches[pl]
		for _, p := range e.pr.forward {
			if slices.Contains(matches, p) {
				hit = true
				break
			}
		}
		for _, p := range pl.prep.forward {
			if !hit && p.match(e.u.Name) {
				hit = true
			}
		}
		if hit {
			first = name
		}
	}
	return first
}
