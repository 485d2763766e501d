package scheduler

import (
	"math/bits"
	"path"
	"strings"
)

// This file holds the Cluster's indexes: the machines in rank order, and the
// Conflicts= patterns with where their matches run.

// scoreScale is the score of one fully free resource dimension.
const scoreScale = 1_000_000

// freeScore scores how free a machine of capacity cap is when its units use
// used: the sum over CPU and memory of the free fraction of the capacity,
// scaled to scoreScale, where a dimension of unknown capacity counts as
// fully free. Integer arithmetic keeps it exact, hence deterministic.
func freeScore(cap, used Resources) int64 {
	return freeFraction(cap.CPUPercent, used.CPUPercent) + freeFraction(cap.MemoryBytes, used.MemoryBytes)
}

func freeFraction(cap, used int64) int64 {
	if cap <= 0 {
		return scoreScale
	}
	free := min(max(cap-used, 0), cap)
	hi, lo := bits.Mul64(uint64(free), scoreScale)
	q, _ := bits.Div64(hi, lo, uint64(cap)) // free <= cap, so hi < cap
	return int64(q)
}

// order keeps machines sorted by a rank. Keys are unique (machine ID breaks
// ties), so a machine's position is found by binary search on its key. When
// a machine's key changes, fix moves it to its new position, shifting the
// machines in between: a binary search and a memmove of at most one
// pointer per machine, a fraction of a microsecond for a thousand machines.
type order struct {
	ms   []*machine
	less func(a, b *machine) bool
}

// search returns the position of m's key in ms[lo:hi], which excludes m.
func (o *order) search(m *machine, lo, hi int) int {
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if o.less(o.ms[h], m) {
			lo = h + 1
		} else {
			hi = h
		}
	}
	return lo
}

// index returns m's position; its key must not have changed since it was
// placed.
func (o *order) index(m *machine) int {
	i := o.search(m, 0, len(o.ms))
	if i == len(o.ms) || o.ms[i] != m {
		panic("scheduler: machine " + m.ID + " missing from its order (rank key changed outside unrank and rerank)")
	}
	return i
}

func (o *order) insert(m *machine) {
	i := o.search(m, 0, len(o.ms))
	o.ms = append(o.ms, nil)
	copy(o.ms[i+1:], o.ms[i:])
	o.ms[i] = m
}

func (o *order) remove(m *machine) {
	i := o.index(m)
	copy(o.ms[i:], o.ms[i+1:])
	o.ms[len(o.ms)-1] = nil
	o.ms = o.ms[:len(o.ms)-1]
}

// fix moves the machine at position i, whose key changed, to its place.
func (o *order) fix(i int) {
	m := o.ms[i]
	switch {
	case i > 0 && o.less(m, o.ms[i-1]):
		j := o.search(m, 0, i)
		copy(o.ms[j+1:i+1], o.ms[j:i])
		o.ms[j] = m
	case i+1 < len(o.ms) && o.less(o.ms[i+1], m):
		j := o.search(m, i+1, len(o.ms)) - 1
		copy(o.ms[i:j], o.ms[i+1:j+1])
		o.ms[j] = m
	}
}

// spreadLess orders machines by spread rank: fewest units, then most free
// resources, then machine ID.
func spreadLess(a, b *machine) bool {
	if na, nb := len(a.units), len(b.units); na != nb {
		return na < nb
	}
	if a.free != b.free {
		return a.free > b.free
	}
	return a.ID < b.ID
}

// binpackLess orders machines by free resources, least first, then machine
// ID.
func binpackLess(a, b *machine) bool {
	if a.free != b.free {
		return a.free < b.free
	}
	return a.ID < b.ID
}

// pattern is a Conflicts= glob and where the placed units it concerns run:
// those that declare it, and those whose names it matches. With both
// counts, checking a unit's conflicts with a machine, in either direction,
// is a map lookup per pattern instead of a scan of the machine's units.
type pattern struct {
	glob     string
	literal  string // glob up to its first metacharacter: every match starts with it
	exact    bool   // glob has no metacharacter: it matches only itself
	declared map[*machine]int
	matched  map[*machine]int
	refs     int // placed units declaring it
}

func (p *pattern) match(name string) bool {
	if !strings.HasPrefix(name, p.literal) {
		return false
	}
	if p.exact {
		return len(name) == len(p.glob)
	}
	ok, err := path.Match(p.glob, name)
	return err == nil && ok
}

// maxUnusedPatterns bounds the patterns registered by decisions for units
// that were then not placed; beyond it, they are dropped.
const maxUnusedPatterns = 1024

// patternKeyLen is how much of a pattern's literal prefix indexes it.
const patternKeyLen = 12

// patterns is the registry of Conflicts= patterns: those of placed units
// (kept while one is placed) and those of units recently decided. Patterns
// are indexed by the first patternKeyLen bytes of their literal prefix, so
// that the patterns that may match a name are found with a map lookup per
// prefix length of the name, however many patterns there are.
type patterns struct {
	byGlob  map[string]*pattern
	byKey   map[string][]*pattern // by literal[:patternKeyLen]
	unused  int                   // registered patterns with refs == 0
	scratch []*pattern
}

func newPatterns() patterns {
	return patterns{byGlob: map[string]*pattern{}, byKey: map[string][]*pattern{}}
}

func patternKey(literal string) string { return literal[:min(len(literal), patternKeyLen)] }

// candidates returns the patterns that may match name: those whose key is
// a prefix of it. The slice is valid until the next call.
func (ps *patterns) candidates(name string) []*pattern {
	ps.scratch = ps.scratch[:0]
	for l := range min(len(name), patternKeyLen) + 1 {
		ps.scratch = append(ps.scratch, ps.byKey[name[:l]]...)
	}
	return ps.scratch
}

// register returns the pattern for glob, registering it, and counting the
// placed units it matches, if it is new.
func (ps *patterns) register(c *Cluster, glob string) *pattern {
	if p := ps.byGlob[glob]; p != nil {
		return p
	}
	p := &pattern{glob: glob, literal: glob, exact: true, declared: map[*machine]int{}, matched: map[*machine]int{}}
	if i := strings.IndexAny(glob, `*?[\`); i >= 0 {
		p.literal, p.exact = glob[:i], false
	}
	ps.byGlob[glob] = p
	key := patternKey(p.literal)
	ps.byKey[key] = append(ps.byKey[key], p)
	ps.unused++
	count := func(pl *placement) {
		if p.match(pl.u.Name) {
			p.matched[pl.m]++
			pl.addMatch(p)
		}
	}
	for _, pl := range c.where {
		count(pl)
	}
	for _, inst := range c.global {
		for _, pl := range inst {
			count(pl)
		}
	}
	return p
}

// maybeEvict drops the unused patterns once there are too many.
func (ps *patterns) maybeEvict(c *Cluster) {
	if ps.unused <= maxUnusedPatterns {
		return
	}
	used := func(p *pattern) bool { return p.refs > 0 }
	for glob, p := range ps.byGlob {
		if !used(p) {
			delete(ps.byGlob, glob)
		}
	}
	for key, list := range ps.byKey {
		if list = keep(list, used); len(list) == 0 {
			delete(ps.byKey, key)
		} else {
			ps.byKey[key] = list
		}
	}
	for _, pl := range c.where {
		pl.keepMatches(used)
	}
	for _, inst := range c.global {
		for _, pl := range inst {
			pl.keepMatches(used)
		}
	}
	ps.unused = 0
}

// keep filters list in place.
func keep(list []*pattern, f func(*pattern) bool) []*pattern {
	out := list[:0]
	for _, p := range list {
		if f(p) {
			out = append(out, p)
		}
	}
	clear(list[len(out):])
	return out
}
