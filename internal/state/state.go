// Package state is the cluster state the leader publishes for readers
// (GET /v1/state): an immutable Snapshot, encoded to JSON once, however many
// clients poll it, and filtered or paged per request without touching the
// scheduler's data.
package state

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"encoding/binary"
	"hash/crc32"
	"io"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/cputime"
	"github.com/flotilla/flotilla/internal/unit"
)

// Snapshot is the cluster at one moment. Never modify one after publishing.
type Snapshot struct {
	// Term is the leader's election revision: with Generation it names the
	// snapshot uniquely across leader changes.
	Term       int64
	Generation uint64
	Revision   int64
	Leader     string
	// Writes is how many writes the leader had acknowledged when the
	// snapshot's copy began: one with fewer than the leader's count now
	// predates a write whose request has returned.
	Writes uint64
	// EtcdUnreachableSince is set (RFC 3339) on a degraded leader's state.
	EtcdUnreachableSince string
	Machines             []apiv1.Machine // sorted by ID
	Units                []Unit          // sorted by name

	once sync.Once
	json []byte
	// unitAt is where each unit's encoding begins in json, and its last
	// entry where the last unit's ends: what a later snapshot copies of
	// the units unchanged since (Follow). Nil when json is too long for
	// 32-bit offsets.
	unitAt []uint32
	// encoded is set once json and unitAt are (Follow reads them).
	encoded atomic.Bool
	// base is the snapshot before this one, already encoded, while this
	// one is not (Follow).
	base atomic.Pointer[Snapshot]
	gzo  sync.Once
	gz   []byte
	// head is what every view (Page) shares, encoded once: the document up
	// to its first unit, machines included; headGz is it compressed after
	// a gzip header and flushed, so that any compressed rest can follow it.
	heado   sync.Once
	head    []byte
	headGz  []byte
	headCRC uint32
	cost    atomic.Int64 // nanoseconds spent encoding and compressing
	// pages are small filtered views already encoded (Page), by filter:
	// a client polling a count ("unit=web@*&state=active&limit=1", as
	// flotilla start and the bench do) asks the same of a snapshot again
	// and again, and each answer scanned every unit (a tenth of a second
	// at a million units, a fifth of a new leader's CPU in a failover).
	pagesMu sync.Mutex
	pages   map[pageKey][]byte
}

// pageKey names a Page answer.
type pageKey struct {
	f  Filter
	gz bool
}

// Pages are remembered while small, and so many a snapshot.
const (
	maxPageMemo   = 64 << 10
	maxPagesMemod = 32
)

// EncodeCost is the CPU time spent so far encoding (and compressing) this
// snapshot for readers (cputime.Of): with the build time, what one
// snapshot costs.
func (s *Snapshot) EncodeCost() time.Duration { return time.Duration(s.cost.Load()) }

// ETag is the snapshot's entity tag, strong: "term.generation" for a
// leader's state, whose generations the engine never repeats, and
// "etcd.revision" for the durable record read from etcd (DurableState),
// which has neither and changes with etcd's revision.
func (s *Snapshot) ETag() string {
	if s.Term == 0 && s.Generation == 0 {
		return `"etcd.` + strconv.FormatInt(s.Revision, 10) + `"`
	}
	return `"` + strconv.FormatInt(s.Term, 10) + "." + strconv.FormatUint(s.Generation, 10) + `"`
}

// EncodeHook, when set, is called each time a snapshot is encoded whole
// (JSON, gzipped false) or compressed whole (Gzip, gzipped true): tests
// count encodings with it. Each happens once a snapshot, however many
// readers ask for it at once (the first encodes, the others wait for it).
var EncodeHook atomic.Pointer[func(s *Snapshot, gzipped bool)]

func encoded(s *Snapshot, gzipped bool) {
	if h := EncodeHook.Load(); h != nil {
		(*h)(s, gzipped)
	}
}

// JSON is the whole snapshot encoded, computed once. The units unchanged
// since the snapshot it follows (Follow), when that one was encoded, are
// copied from its bytes rather than encoded again.
func (s *Snapshot) JSON() []byte {
	s.once.Do(func() {
		encoded(s, false)
		d, _ := cputime.Of(func() {
			base := s.base.Load()
			// Afresh, room for the first units: appendUnits then grows
			// b to what they took a unit, for the rest.
			size := unitGuess*min(len(s.Units), 1024) + 1024
			if n := len(base.unitsAt()) - 1; n > 0 {
				// base's head (its machines, mostly the same) and as
				// many bytes a unit as base's units took, and a
				// sixteenth more: appendUnits grows b if that is short.
				head, each := int(base.unitAt[0]), int(base.unitAt[n]-base.unitAt[0])/n
				size = head + each*len(s.Units) + each*len(s.Units)/16 + 1024
			}
			st := s.view(nil, len(s.Units), "")
			b := appendHead(make([]byte, 0, size), &st)
			b, s.unitAt = appendUnits(b, s.Units, base)
			s.json = appendTotal(b, len(s.Units), "")
		})
		s.cost.Add(int64(d))
		s.encoded.Store(true)
		s.base.Store(nil)
	})
	return s.json
}

// unitsAt is where each unit of s begins in its encoding, and where the
// last ends; nil for a nil s, or one not encoded yet.
func (s *Snapshot) unitsAt() []uint32 {
	if s == nil {
		return nil
	}
	return s.unitAt
}

// Follow tells s the snapshot published before it, prev: if prev is
// encoded (JSON) by then, s's encoding copies the bytes of the units that
// did not change since from prev's. Only an encoded prev is kept, and only
// until s is encoded: no chain of snapshots is held, and one not read
// whole holds none. Call it before s is published.
func (s *Snapshot) Follow(prev *Snapshot) {
	if prev != nil && prev.encoded.Load() && prev.unitAt != nil {
		s.base.Store(prev)
	}
}

// Gzip is JSON compressed, computed once.
func (s *Snapshot) Gzip() []byte {
	s.gzo.Do(func() {
		j := s.JSON() // its cost counted there
		encoded(s, true)
		d, _ := cputime.Of(func() {
			var b bytes.Buffer
			w, _ := gzip.NewWriterLevel(&b, gzip.BestSpeed)
			w.Write(j)
			w.Close()
			s.gz = b.Bytes()
		})
		s.cost.Add(int64(d))
	})
	return s.gz
}

// Page encodes the view f selects (Select) as two pieces to send one after
// the other: the head every view of s shares (the machines among it),
// encoded and compressed once, and the rest, the view's units. With gz the
// two make one gzip stream. A page of 1,000 units thus costs its units, not
// the cluster's machines as well.
func (s *Snapshot) Page(f Filter, gz bool) (head, rest []byte) {
	s.heado.Do(s.encodeHead)
	head = s.head
	if gz {
		head = s.headGz
	}
	key := pageKey{f, gz}
	s.pagesMu.Lock()
	rest, ok := s.pages[key]
	s.pagesMu.Unlock()
	if ok {
		return head, rest
	}
	units, total, next := s.selectUnits(f)
	rest = appendTail(make([]byte, 0, 256*len(units)+256), units, total, next)
	if gz {
		rest = gzipRest(s.headCRC, len(s.head), rest)
	}
	if len(rest) <= maxPageMemo {
		s.pagesMu.Lock()
		if s.pages == nil {
			s.pages = map[pageKey][]byte{}
		}
		if len(s.pages) < maxPagesMemod {
			s.pages[key] = rest
		}
		s.pagesMu.Unlock()
	}
	return head, rest
}

// gzipHeader is what compress/gzip writes with no name, time or comment.
var gzipHeader = []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}

func (s *Snapshot) encodeHead() {
	d, _ := cputime.Of(func() {
		st := s.view(nil, 0, "")
		s.head = appendHead(nil, &st)
		var b bytes.Buffer
		b.Write(gzipHeader)
		w := getFlate(&b)
		w.Write(s.head)
		w.Flush() // ends on a byte: raw deflate blocks can follow
		putFlate(w)
		s.headGz = b.Bytes()
		s.headCRC = crc32.ChecksumIEEE(s.head)
	})
	s.cost.Add(int64(d))
}

// gzipRest compresses rest as the deflate blocks that end a gzip stream
// begun by a head of headLen bytes whose CRC is headCRC, and its trailer.
func gzipRest(headCRC uint32, headLen int, rest []byte) []byte {
	b := bytes.NewBuffer(make([]byte, 0, len(rest)/4+64))
	w := getFlate(b)
	w.Write(rest)
	w.Close()
	putFlate(w)
	out := binary.LittleEndian.AppendUint32(b.Bytes(), crc32.Update(headCRC, crc32.IEEETable, rest))
	return binary.LittleEndian.AppendUint32(out, uint32(headLen+len(rest)))
}

// flatePool keeps compressors (BestSpeed, about 1 MB each) between pages.
var flatePool sync.Pool

func getFlate(dst io.Writer) *flate.Writer {
	if w, ok := flatePool.Get().(*flate.Writer); ok {
		w.Reset(dst)
		return w
	}
	w, _ := flate.NewWriter(dst, flate.BestSpeed)
	return w
}

func putFlate(w *flate.Writer) {
	w.Reset(io.Discard) // not to keep what it wrote to
	flatePool.Put(w)
}

func (s *Snapshot) view(units []Unit, total int, next string) apiv1.State {
	views := make([]apiv1.StateUnit, len(units))
	for i := range units {
		views[i] = units[i].View()
	}
	return apiv1.State{Revision: s.Revision, Generation: s.Generation, Leader: s.Leader, EtcdUnreachableSince: s.EtcdUnreachableSince,
		Machines: s.Machines, Units: views, Total: total, Next: next}
}

// Filter selects part of a snapshot.
type Filter struct {
	Machine string // units whose target machine is this one
	Unit    string // glob on unit names, or a range of instances (web@{1..1000}.service)
	State   string // active state (active, failed, ...), desired state, or "unplaced"
	After   string // page: units after this name
	Limit   int    // page size; 0 means all
}

// IsZero reports whether f selects everything.
func (f Filter) IsZero() bool { return f == Filter{} }

// Select returns the filtered, paged view.
func (s *Snapshot) Select(f Filter) apiv1.State {
	units, total, next := s.selectUnits(f)
	return s.view(units, total, next)
}

// selectUnits returns the units f selects, how many match in all, and the
// name to page on from ("" on the last page).
func (s *Snapshot) selectUnits(f Filter) (out []Unit, total int, next string) {
	units := s.Units
	if f.After != "" {
		i := sort.Search(len(units), func(i int) bool { return units[i].Name > f.After })
		units = units[i:]
	}
	if f.Machine == "" && f.Unit == "" && f.State == "" && f.Limit > 0 {
		// A plain page: its cost is the page's, not the cluster's (the
		// units are in name order, and every one after f.After counts).
		out = units[:min(f.Limit, len(units)):min(f.Limit, len(units))]
		if len(units) > f.Limit {
			next = out[len(out)-1].Name
		}
		return out, len(units), next
	}
	name := f.names()
	for i := range units {
		u := &units[i]
		if !f.match(u, name) {
			continue
		}
		total++
		if f.Limit > 0 && len(out) == f.Limit {
			if next == "" {
				next = out[len(out)-1].Name
			}
			continue
		}
		out = append(out, *u)
	}
	if out == nil {
		out = []Unit{}
	}
	return out, total, next
}

// names returns what matches unit names against f.Unit.
func (f Filter) names() func(string) bool {
	if tmpl, r, ok, err := unit.ParseRange(f.Unit); ok && err == nil {
		return func(name string) bool { return r.Contains(tmpl, name) }
	}
	// The common globs, a name or a prefix ("web@*"), without path.Match:
	// a count of a million units' active instances of a template, as
	// flotilla start and the bench ask, spent most of its time there.
	switch i := strings.IndexAny(f.Unit, `*?[\`); {
	case i < 0:
		return func(name string) bool { return name == f.Unit }
	case i == len(f.Unit)-1 && f.Unit[i] == '*':
		prefix := f.Unit[:i]
		return func(name string) bool {
			return strings.HasPrefix(name, prefix) && !strings.Contains(name[len(prefix):], "/")
		}
	}
	return func(name string) bool {
		ok, _ := path.Match(f.Unit, name)
		return ok
	}
}

func (f Filter) match(u *Unit, name func(string) bool) bool {
	if f.Machine != "" && u.Machine != f.Machine {
		return false
	}
	if f.Unit != "" && !name(u.Name) {
		return false
	}
	if f.State != "" {
		unplaced := u.Spec.DesiredState != "inactive" && u.Machine == "" && !u.Spec.Global
		if f.State != u.active() && f.State != u.Spec.DesiredState && !(f.State == "unplaced" && unplaced) {
			return false
		}
	}
	return true
}
