package engine

import "math/bits"

// The leader numbers its units (unitIDs): a unit's number indexes the
// scheduler's placements (scheduler.Cluster.SetIDs), the records by number
// (decisionState.recs) and the sets of units kept as bits (idSet), where
// maps by name of a million entries were tens of megabytes each and a
// hashed lookup, a cache miss or two, at every use.

// unitID returns the scheduler's number of the unit of that name
// (scheduler.Cluster.SetIDs).
func (ds *decisionState) unitID(name string) (int32, bool) {
	if r := ds.units[name]; r != nil {
		return r.su.ID, true
	}
	return 0, false
}

// unitIDs numbers the units of t.units for the scheduler, which keeps
// where each unit is placed in a slice indexed by its number rather than
// in a map by name (scheduler.Unit.ID). A unit is numbered as it enters
// t.units (number), keeps its number through every record it has there
// (a new file's scheduler unit takes it over: keep), and gives it back
// as it leaves, for another unit to take.
type unitIDs struct {
	last int32
	free []int32
}

// number gives rec's scheduler unit, about to enter t.units, a number.
func (n *unitIDs) number(rec *unitRec) {
	if k := len(n.free); k > 0 {
		rec.su.ID, n.free = n.free[k-1], n.free[:k-1]
		return
	}
	n.last++
	rec.su.ID = n.last
}

// release takes back the number of a unit leaving t.units.
func (n *unitIDs) release(rec *unitRec) { n.free = append(n.free, rec.su.ID) }

// keep publishes rec as unit name's record in place of old (nil: the unit
// is new, and is numbered), in t.units and by its number.
func (ds *decisionState) keep(name string, old, rec *unitRec) {
	switch {
	case old == nil:
		ds.ids.number(rec)
	case rec.su.ID == 0: // a scheduler unit made anew takes over the number
		rec.su.ID = old.su.ID
	}
	ds.units[name] = rec
	id := int(rec.su.ID)
	if id >= len(ds.recs) {
		ds.recs = append(ds.recs, make([]*unitRec, id+1-len(ds.recs))...)
	}
	ds.recs[id] = rec
}

// forget takes unit name, whose record is old, out of t.units and gives
// its number back.
func (ds *decisionState) forget(name string, old *unitRec) {
	delete(ds.units, name)
	ds.recs[old.su.ID] = nil
	ds.unplaced.remove(old.su.ID)
	ds.ids.release(old)
}

// idSet is a set of unit numbers, a bit each: the unplaced of a
// million-unit start, a map by name of 60 MB at its largest, is 128 KB.
type idSet struct {
	words []uint64
	n     int
}

func (s *idSet) add(id int32) {
	w := int(id) >> 6
	if w >= len(s.words) {
		s.words = append(s.words, make([]uint64, w+1-len(s.words))...)
	}
	if bit := uint64(1) << (id & 63); s.words[w]&bit == 0 {
		s.words[w] |= bit
		s.n++
	}
}

func (s *idSet) remove(id int32) {
	w := int(id) >> 6
	if w >= len(s.words) {
		return
	}
	if bit := uint64(1) << (id & 63); s.words[w]&bit != 0 {
		s.words[w] &^= bit
		s.n--
	}
}

func (s *idSet) has(id int32) bool {
	w := int(id) >> 6
	return w < len(s.words) && s.words[w]&(uint64(1)<<(id&63)) != 0
}

// len returns how many numbers the set holds.
func (s *idSet) len() int { return s.n }

// each calls f with each number in the set, in increasing order; f must
// not change the set.
func (s *idSet) each(f func(id int32)) {
	for w, word := range s.words {
		for word != 0 {
			f(int32(w<<6 + bits.TrailingZeros64(word)))
			word &= word - 1
		}
	}
}
