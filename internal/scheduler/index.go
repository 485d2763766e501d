package scheduler

import (
	"math/bits"
	"path"
	"slices"
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
// ties), so a machine's position is found by binary search on its key.
//
// The machines are held in chunks of at most maxChunk, in order (an
// unrolled list): when a machine's key changes, fix takes it out of its
// chunk and puts it into the one its new key belongs in, shifting at most
// a chunk's machines each time. In one sorted slice it shifted every
// machine in between: placing a unit by spread moves the emptiest machine
// past every machine as empty, so at 10,000 machines each placement moved
// 80 KB (with the collector's write barriers), a second of a million-unit
// start, and a cost per unit that grew with the cluster. A B-tree
// (github.com/google/btree) shifts as little but is slower to walk, which
// Decide does on every decision.
type order struct {
	chunks [][]*machine // none empty; each sorted, and each before the next
	less   func(a, b *machine) bool
}

// maxChunk is the most machines a chunk holds: a chunk that grows past it
// is split in two.
const maxChunk = 128

// pos is a machine's position in an order.
type pos struct{ chunk, i int }

// len returns how many machines the order holds.
func (o *order) len() int {
	n := 0
	for _, ch := range o.chunks {
		n += len(ch)
	}
	return n
}

// all returns the machines in order.
func (o *order) all() []*machine {
	out := make([]*machine, 0, o.len())
	for _, ch := range o.chunks {
		out = append(out, ch...)
	}
	return out
}

// search returns where m's key goes: the first chunk whose last machine
// does not come before m (the last chunk if every one does), and the
// position in it. m itself is not compared with: its key may have changed.
func (o *order) search(m *machine) pos {
	lo, hi := 0, len(o.chunks)
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if ch := o.chunks[h]; o.less(ch[len(ch)-1], m) {
			lo = h + 1
		} else {
			hi = h
		}
	}
	if lo == len(o.chunks) {
		if lo == 0 {
			return pos{}
		}
		lo--
	}
	ch := o.chunks[lo]
	i, j := 0, len(ch)
	for i < j {
		h := int(uint(i+j) >> 1)
		if o.less(ch[h], m) {
			i = h + 1
		} else {
			j = h
		}
	}
	return pos{lo, i}
}

// index returns m's position; its key must not have changed since it was
// placed.
func (o *order) index(m *machine) pos {
	p := o.search(m)
	if p.chunk == len(o.chunks) || p.i == len(o.chunks[p.chunk]) || o.chunks[p.chunk][p.i] != m {
		panic("scheduler: machine " + m.ID + " missing from its order (rank key changed outside unrank and rerank)")
	}
	return p
}

func (o *order) insert(m *machine) {
	if len(o.chunks) == 0 {
		o.chunks = append(o.chunks, append(make([]*machine, 0, maxChunk+1), m))
		return
	}
	p := o.search(m)
	ch := slices.Insert(o.chunks[p.chunk], p.i, m)
	if len(ch) <= maxChunk {
		o.chunks[p.chunk] = ch
		return
	}
	// Split: the first half stays, the second is a new chunk after it.
	half := len(ch) / 2
	next := make([]*machine, len(ch)-half, maxChunk+1)
	copy(next, ch[half:])
	clear(ch[half:])
	o.chunks[p.chunk] = ch[:half]
	o.chunks = slices.Insert(o.chunks, p.chunk+1, next)
}

// removeAt takes out the machine at p. A chunk left empty goes; one left
// under a quarter full joins its next if both fit in one, so that chunks
// do not dwindle to a machine each as machines come and go.
func (o *order) removeAt(p pos) {
	ch := slices.Delete(o.chunks[p.chunk], p.i, p.i+1)
	o.chunks[p.chunk] = ch
	switch {
	case len(ch) == 0:
		o.chunks = slices.Delete(o.chunks, p.chunk, p.chunk+1)
	case len(ch) < maxChunk/4 && p.chunk+1 < len(o.chunks) && len(ch)+len(o.chunks[p.chunk+1]) <= maxChunk/2:
		o.chunks[p.chunk] = append(ch, o.chunks[p.chunk+1]...)
		o.chunks = slices.Delete(o.chunks, p.chunk+1, p.chunk+2)
	}
}

func (o *order) remove(m *machine) { o.removeAt(o.index(m)) }

// at returns the machine at p.
func (o *order) at(p pos) *machine { return o.chunks[p.chunk][p.i] }

// neighbours returns the machines before and after p (nil at either end).
func (o *order) neighbours(p pos) (prev, next *machine) {
	ch := o.chunks[p.chunk]
	switch {
	case p.i > 0:
		prev = ch[p.i-1]
	case p.chunk > 0:
		pc := o.chunks[p.chunk-1]
		prev = pc[len(pc)-1]
	}
	switch {
	case p.i+1 < len(ch):
		next = ch[p.i+1]
	case p.chunk+1 < len(o.chunks):
		next = o.chunks[p.chunk+1][0]
	}
	return prev, next
}

// fix moves the machine at p, whose key changed, to its place.
func (o *order) fix(p pos) {
	m := o.at(p)
	prev, next := o.neighbours(p)
	if (prev == nil || o.less(prev, m)) && (next == nil || o.less(m, next)) {
		return
	}
	o.removeAt(p)
	o.insert(m)
}

// spreadLess orders machines by spread rank: fewest units, then most free
// resources, then machine ID.
func spreadLess(a, b *machine) bool {
	if na, nb := len(a.placed), len(b.placed); na != nb {
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
			c.match(pl, p)
		}
	}
	for _, pl := range c.where {
		if pl != nil {
			count(pl)
		}
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
	for pl, list := range c.matches {
		if list = keep(list, used); len(list) == 0 {
			delete(c.matches, pl)
		} else {
			c.matches[pl] = list
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
