package scheduler

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/flotilla/flotilla/internal/unit"
)

// NoMachines is the reason of a unit not placed because the cluster has no
// machine at all. A leader says it too until its machines have joined (a
// new cluster, a failover): clients waiting for a unit give it a moment.
const NoMachines = "no machines available"

// Decide picks the machine a unit that is not global should run on, or says
// why there is none. It changes nothing: the caller records the decision
// with Place, after moving the Displaced units (Unplace them, then decide
// them again). A unit already placed is decided as if it were not.
//
// The decision runs in three stages:
//
//  1. Unit checks, on no machine in particular: the unit's role must stay
//     within its quota; MachineID= and MachineOf= name the only candidate
//     machines; MachineMetadata= picks candidates from the metadata index
//     when few machines match.
//  2. The feasibility chain (see decideChain) on candidate machines, in
//     rank order, until the best feasible machine is known: for spread,
//     the first feasible machine in spread order; for binpack, a walk from
//     the fullest machine that stops once no further machine can rank
//     better.
//  3. Replaces= (fleet's rule): a unit that replaces placed units takes
//     one of their machines, chosen by the chain and the rank with those
//     units treated as gone, and the units it replaces there are
//     Displaced (the caller moves them elsewhere). Only when none of those
//     machines fits is it placed as any other unit, keeping off them. Two
//     units that replace each other never both run: while one is placed,
//     the other is not, with a reason.
//
// When no machine is left, Reason gathers the rejections by kind.
func (c *Cluster) Decide(u *Unit) Decision {
	if u.Fleet.Global {
		return Decision{Reason: "global unit: it runs on every machine GlobalMachines lists"}
	}
	if pl := c.placementOf(u); pl != nil {
		c.remove(pl)
		defer c.add(pl.u, pl.m)
	}
	return c.decide(u)
}

func (c *Cluster) decide(u *Unit) Decision {
	if len(c.machines) == 0 {
		return Decision{Reason: NoMachines}
	}
	if why := c.replacedEachOther(u); why != "" {
		return Decision{Reason: why}
	}
	pr := c.prepare(u)
	if why := c.overQuota(pr.role, u.Needs); why != "" {
		return Decision{Reason: why}
	}
	e := c.newEval(u, pr, nil)
	cands, metaSubset, why := c.candidates(e)
	if why != "" {
		return Decision{Reason: why}
	}
	strategy := c.strategy(u)
	c.rej = c.rej[:0]
	var best *machine
	if taken := c.replacedOn(u, cands); len(taken) > 0 {
		// First pass: the machines of the units u replaces, with those
		// units treated as gone.
		e.displacing = true
		e.decideChain()
		best = c.search(e, taken, strategy)
	}
	if best == nil {
		// Every machine, keeping off those of the units u replaces (the
		// first pass said why they do not fit; the second pass's
		// rejections of them say nothing more).
		e.displacing = false
		e.decideChain()
		n := len(c.rej)
		best = c.search(e, cands, strategy)
		kept := c.rej[:n]
		for _, r := range c.rej[n:] {
			if r.kind != kindReplaces {
				kept = append(kept, r)
			}
		}
		c.rej = kept
	}
	if best == nil {
		return Decision{Reason: c.explain(e, cands, metaSubset)}
	}
	d := Decision{Machine: best.ID}
	if e.displacing {
		e.at(best)
		for _, pl := range e.ex {
			if pl.u.Name != u.Name {
				d.Displaced = append(d.Displaced, pl.u.Name)
			}
		}
		slices.Sort(d.Displaced)
	}
	return d
}

// replacedOn returns the machines, among the candidates (nil: every
// machine), that run a unit u replaces and may take from it: placed, not
// global (a global unit is not displaced), not u itself.
func (c *Cluster) replacedOn(u *Unit, cands []*machine) []*machine {
	if len(u.Fleet.Replaces) == 0 || u.Fleet.Global {
		return nil
	}
	c.epoch++
	for _, m := range cands {
		m.mark = c.epoch
	}
	var out []*machine
	for _, x := range u.Fleet.Replaces {
		pl := c.byName(x)
		if pl == nil || x == u.Name || pl.u.Fleet.Global || (cands != nil && pl.m.mark != c.epoch) || slices.Contains(out, pl.m) {
			continue
		}
		out = append(out, pl.m)
	}
	c.epoch++
	return out
}

// replacedEachOther says why u may not be placed because a unit it
// replaces, which also replaces it, is placed: of such a pair only one
// runs at a time (fleet's functional tests ran one of a circular pair).
// It returns "" otherwise.
func (c *Cluster) replacedEachOther(u *Unit) string {
	if p := c.circularPartner(u); p != nil {
		return fmt.Sprintf("%s and %s replace each other (Replaces=), and %s runs on %s: only one of them runs at a time", u.Name, p.u.Name, p.u.Name, p.m.ID)
	}
	return ""
}

// circularPartner returns the placement of a unit that u replaces and
// that replaces u, other than u's own, or nil.
func (c *Cluster) circularPartner(u *Unit) *placement {
	for _, x := range u.Fleet.Replaces {
		if pl := c.byName(x); pl != nil && x != u.Name && slices.Contains(pl.u.Fleet.Replaces, u.Name) {
			return pl
		}
	}
	return nil
}

// strategy returns the placement strategy for u.
func (c *Cluster) strategy(u *Unit) string {
	switch u.Fleet.Placement {
	case Spread, Binpack:
		return u.Fleet.Placement
	}
	return c.opts.Strategy
}

// overQuota returns why placing a unit of role needing need would take the
// role over its quota, or "". A dimension the unit needs none of is not
// checked: a role over its memory quota may still place units that need
// only CPU.
func (c *Cluster) overQuota(role string, need Resources) string {
	q := c.opts.policy(role).Quota
	if q.IsZero() {
		return ""
	}
	var used Resources
	if ru := c.roles[role]; ru != nil {
		used = ru.used
	}
	if (q.CPUPercent > 0 && need.CPUPercent > 0 && used.CPUPercent+need.CPUPercent > q.CPUPercent) ||
		(q.MemoryBytes > 0 && need.MemoryBytes > 0 && used.MemoryBytes+need.MemoryBytes > q.MemoryBytes) {
		return fmt.Sprintf("role %s would exceed its quota (%s; in use: %s)", role, formatResources(q, q), formatResources(used, q))
	}
	return ""
}

// candidates returns the machines the unit checks before the chain allow
// (nil for every machine), whether they were picked by the metadata index,
// or why there is none.
func (c *Cluster) candidates(e *eval) (cands []*machine, metaSubset bool, why string) {
	f := e.u.Fleet
	if _, any := c.driverCheck(e.u); !any && len(c.machines) > 0 {
		return nil, false, "needs " + unit.DriversReason(e.u.Name, e.u.Drivers) + "; no machine runs it"
	}
	if f.MachineID != "" {
		m := c.machines[f.MachineID]
		if m == nil {
			return nil, false, fmt.Sprintf("MachineID=%s: no such machine is available", f.MachineID)
		}
		cands = []*machine{m}
	}
	if len(f.MachineOf) > 0 {
		c.epoch++
		for i, peer := range f.MachineOf {
			var on []*machine
			if pl := c.byName(peer); pl != nil {
				on = append(on, pl.m)
			}
			for m := range c.global[peer] {
				on = append(on, m)
			}
			if len(on) == 0 {
				return nil, false, fmt.Sprintf("MachineOf=%s: that unit is not scheduled", peer)
			}
			if i == 0 && cands == nil {
				cands = on
				continue
			}
			// Intersect with the candidates so far.
			for _, m := range on {
				m.mark = c.epoch
			}
			kept := cands[:0:0]
			for _, m := range cands {
				if m.mark == c.epoch {
					kept = append(kept, m)
				}
			}
			c.epoch++
			if cands = kept; len(cands) == 0 {
				return nil, false, machineOfApart(c, f.MachineOf)
			}
		}
	}
	if cands != nil || len(e.pr.req) == 0 {
		return cands, false, ""
	}
	// MachineMetadata=: the key matched by the fewest machines picks the
	// candidates, if it is selective enough that scanning them beats
	// walking every machine in rank order.
	best, bestN := -1, 0
	var missing []metaReq
	for i, r := range e.pr.req {
		n := 0
		for _, v := range r.values {
			n += len(c.meta[r.key][v])
		}
		if n == 0 {
			missing = append(missing, r)
		}
		if best < 0 || n < bestN {
			best, bestN = i, n
		}
	}
	if len(missing) > 0 {
		return nil, false, "no machine has " + formatReq(missing)
	}
	if bestN*8 > len(c.machines) {
		return nil, false, ""
	}
	r := e.pr.req[best]
	cands = make([]*machine, 0, bestN)
	for _, v := range r.values {
		for m := range c.meta[r.key][v] {
			cands = append(cands, m)
		}
	}
	return cands, true, ""
}

// machineOfApart says why the units named by MachineOf= share no machine.
func machineOfApart(c *Cluster, names []string) string {
	where := make([]string, len(names))
	for i, n := range names {
		where[i] = n + " on " + strings.Join(placedOn(c, n), ", ")
	}
	return "MachineOf=" + strings.Join(names, ", ") + ": no machine runs them all (" + strings.Join(where, "; ") + ")"
}

// placedOn returns the machines the named unit runs on, sorted.
func placedOn(c *Cluster, name string) []string {
	if pl := c.byName(name); pl != nil {
		return []string{pl.m.ID}
	}
	return c.globalMachines(name)
}

// search runs the chain on the candidates (nil for every machine) and
// returns the best feasible machine for the strategy, or nil.
func (c *Cluster) search(e *eval, cands []*machine, strategy string) *machine {
	if cands == nil && strategy == Spread {
		// The spread order is the rank: the first feasible machine wins.
		for _, ch := range c.spread.chunks {
			for _, m := range ch {
				if e.feasible(m) {
					return m
				}
			}
		}
		return nil
	}
	if cands == nil {
		return c.walkBinpack(e)
	}
	var best *machine
	var bestKey rankKey
	for _, m := range cands {
		if !e.feasible(m) {
			continue
		}
		if k := e.rankKey(m, strategy); best == nil || k.less(bestKey) {
			best, bestKey = m, k
		}
	}
	return best
}

// walkBinpack finds the best binpack machine by walking the machines from
// the fullest. A machine's score after placement is at most bound below
// its score now, so the walk stops at the first machine whose score now,
// less bound, is worse than the best found: no later machine can beat it.
func (c *Cluster) walkBinpack(e *eval) *machine {
	bound := binpackBound(e.u.Needs, c.minCap)
	var best *machine
	var bestKey rankKey
	for _, ch := range c.binpack.chunks {
		for _, m := range ch {
			if best != nil && (m.free-bound > bestKey.a || (bound == 0 && m.free >= bestKey.a)) {
				return best
			}
			if !e.feasible(m) {
				continue
			}
			if k := e.rankKey(m, Binpack); best == nil || k.less(bestKey) {
				best, bestKey = m, k
			}
		}
	}
	return best
}

// binpackBound returns how much placing need can lower a machine's
// freeScore at most: need over the smallest capacity, per dimension, plus
// one for rounding.
func binpackBound(need, minCap Resources) int64 {
	return dimBound(need.CPUPercent, minCap.CPUPercent) + dimBound(need.MemoryBytes, minCap.MemoryBytes)
}

func dimBound(need, minCap int64) int64 {
	if need <= 0 || minCap <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(min(need, minCap)), scoreScale)
	q, _ := bits.Div64(hi, lo, uint64(minCap))
	return int64(q) + 1
}

// rankKey is a machine's rank for one unit; lower is better.
type rankKey struct {
	a, b int64
	id   string
}

func (k rankKey) less(o rankKey) bool {
	if k.a != o.a {
		return k.a < o.a
	}
	if k.b != o.b {
		return k.b < o.b
	}
	return k.id < o.id
}

// rankKey returns m's rank for e's unit, with the excluded placements gone:
// for spread, fewest units then most free; for binpack, least free once
// the unit is there. Machine ID breaks ties.
func (e *eval) rankKey(m *machine, strategy string) rankKey {
	used := m.used.sub(e.exUsed())
	if strategy == Binpack {
		return rankKey{a: freeScore(m.Capacity, used.add(e.u.Needs)), id: m.ID}
	}
	return rankKey{a: int64(len(m.placed) - len(e.ex)), b: -freeScore(m.Capacity, used), id: m.ID}
}

// Fits reports whether u may run on machine id, and if not why, in the
// words of Decide's reasons. For a unit placed there it tells whether it
// may stay: every rule of the unit still holds against the units around
// it. A unit it replaces running there does not count against it (that unit
// is the one that must move), and a unit placed on a machine whose capacity
// shrank below what its units need keeps its room if the units sorting
// before it by name leave it enough. Quotas are not checked: placed units
// stay within a lowered quota. Of two placed units that replace each other,
// the one whose name sorts last does not fit. Fits works for global units
// too.
func (c *Cluster) Fits(u *Unit, id string) (bool, string) {
	m := c.machines[id]
	if m == nil {
		return false, "machine " + id + " is not available"
	}
	if p := c.circularPartner(u); p != nil && p.u.Name < u.Name {
		// Both of a pair that replace each other are placed (one was
		// changed to name the other): the one whose name sorts first
		// stays.
		return false, c.replacedEachOther(u)
	}
	e := c.residentEval(u, m)
	e.at(m)
	for _, ch := range e.residentChain() {
		if r, ok := ch.check(e, m); !ok {
			var gs groups
			gs.add(r)
			return false, c.render(e, &gs, false)
		}
	}
	return true, ""
}

// residentEval returns an eval of u, reusing what its placement on m knows.
func (c *Cluster) residentEval(u *Unit, m *machine) *eval {
	if pl := c.on(m, u.Name); pl != nil && pl.u == u {
		return c.newEval(u, pl.prep, pl)
	}
	return c.newEval(u, c.prepare(u), nil)
}

// GlobalMachines returns the machines a global unit should run on, sorted:
// every machine whose metadata matches its MachineMetadata=, where no unit
// conflicts with it and its needs fit (see Fits). Machines it runs on stay
// listed while it still fits there; new machines are added in ID order
// while its role's quota allows. It returns nil for a unit that is not
// global.
//
// The engine places the unit on the listed machines it is not on yet and
// unplaces it (UnplaceFrom) from the others. Doing so for the global units
// in name order converges: a unit placed first keeps its machines, and two
// conflicting global units never both hold one.
func (c *Cluster) GlobalMachines(u *Unit) []string {
	if !u.Fleet.Global || len(c.machines) == 0 {
		return nil
	}
	pr := c.prepare(u)
	e := c.newEval(u, pr, nil)
	cands, _, why := c.candidates(e)
	if why != "" {
		return nil
	}
	if cands == nil {
		cands = make([]*machine, len(c.ids))
		for i, id := range c.ids {
			cands[i] = c.machines[id]
		}
	} else {
		slices.SortFunc(cands, func(a, b *machine) int { return strings.Compare(a.ID, b.ID) })
	}
	e.residentChain()
	var added Resources
	var out []string
	for _, m := range cands {
		e.at(m)
		ok := true
		for _, ch := range e.chain {
			if _, ok = ch.check(e, m); !ok {
				break
			}
		}
		if !ok {
			continue
		}
		if c.on(m, u.Name) == nil {
			if c.overQuota(pr.role, u.Needs.add(added)) != "" {
				continue
			}
			added = added.add(u.Needs)
		}
		out = append(out, m.ID)
	}
	return out
}
