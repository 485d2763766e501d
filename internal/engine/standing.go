package engine

import (
	"iter"
	"math/bits"
	"strings"

	"github.com/flotilla/flotilla/internal/unit"
)

// pendingRange is a range record written but not yet materialized: it
// stands for the instances of its range whose bit is set, by index in the
// range. A bit an instance, not a map entry: a million instances started
// at once were a million-entry map until each was placed, 50 MB of the
// leader's peak.
type pendingRange struct {
	key            string
	prefix, suffix string // of its instances' names: "web@", ".service"
	r              unit.Range
	bits           []uint64
	left           int // the bits set: its units whose records are not yet written
}

func newPendingRange(key, template string, r unit.Range) *pendingRange {
	return &pendingRange{key: key, prefix: unit.Prefix(template) + "@", suffix: template[strings.LastIndexByte(template, '.'):],
		r: r, bits: make([]uint64, (max(r.Len(), 0)+63)/64)}
}

// index returns the index in the range of instance name, as
// unit.RangeName formats it, or false when name is not one of its
// instances.
func (pr *pendingRange) index(name string) (int, bool) {
	if len(name) <= len(pr.prefix)+len(pr.suffix) || !strings.HasPrefix(name, pr.prefix) || !strings.HasSuffix(name, pr.suffix) {
		return 0, false
	}
	inst := name[len(pr.prefix) : len(name)-len(pr.suffix)]
	n := 0
	for i := 0; i < len(inst); i++ {
		c := inst[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
		if n > pr.r.To {
			return 0, false
		}
	}
	digits := 1
	for v := n; v >= 10; v /= 10 {
		digits++
	}
	if n < pr.r.From || len(inst) != max(pr.r.Width, digits) {
		return 0, false
	}
	return n - pr.r.From, true
}

func (pr *pendingRange) has(i int) bool { return pr.bits[i/64]&(1<<(i%64)) != 0 }

func (pr *pendingRange) set(i int) {
	if !pr.has(i) {
		pr.bits[i/64] |= 1 << (i % 64)
		pr.left++
	}
}

func (pr *pendingRange) clear(i int) {
	if pr.has(i) {
		pr.bits[i/64] &^= 1 << (i % 64)
		pr.left--
	}
}

// names yields the names of the instances the range stands for, in index
// order.
func (pr *pendingRange) names(template string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for w, word := range pr.bits {
			for word != 0 {
				b := bits.TrailingZeros64(word)
				word &^= 1 << b
				if !yield(unit.RangeName(template, pr.r, w*64+b)) {
					return
				}
			}
		}
	}
}

// template is the name of the range's template.
func (pr *pendingRange) template() string { return pr.prefix + pr.suffix }

// standing indexes the ranges that stand for units by their instances'
// prefix, so that the range standing for a unit is found from its name.
type standing map[string][]*pendingRange

// add registers pr.
func (s standing) add(pr *pendingRange) { s[pr.prefix] = append(s[pr.prefix], pr) }

// remove forgets pr.
func (s standing) remove(pr *pendingRange) {
	l := s[pr.prefix]
	for i, p := range l {
		if p == pr {
			l = append(l[:i:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(s, pr.prefix)
	} else {
		s[pr.prefix] = l
	}
}

// of returns the range standing for unit name and its index there, or nil.
func (s standing) of(name string) (*pendingRange, int) {
	at := strings.IndexByte(name, '@')
	if at < 0 {
		return nil, 0
	}
	for _, pr := range s[name[:at+1]] {
		if i, ok := pr.index(name); ok && pr.has(i) {
			return pr, i
		}
	}
	return nil, 0
}

// stand makes pr stand for unit name, an instance of its range, in place
// of the range that did.
func (s standing) stand(pr *pendingRange, name string) {
	if old, i := s.of(name); old != nil {
		old.clear(i)
	}
	if i, ok := pr.index(name); ok {
		pr.set(i)
	}
}

// written notes that unit name has its record: no range stands for it.
func (s standing) written(name string) {
	if pr, i := s.of(name); pr != nil {
		pr.clear(i)
	}
}

// count is how many units the ranges stand for.
func (s standing) count() int {
	n := 0
	for _, l := range s {
		for _, pr := range l {
			n += pr.left
		}
	}
	return n
}
