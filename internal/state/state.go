// Package state is the cluster state the leader publishes for readers
// (GET /v1/state): an immutable Snapshot, encoded to JSON once, however many
// clients poll it, and filtered or paged per request without touching the
// scheduler's data.
package state

import (
	"bytes"
	"compress/gzip"
	"path"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
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
	// EtcdUnreachableSince is set (RFC 3339) on a degraded leader's state.
	EtcdUnreachableSince string
	Machines             []apiv1.Machine   // sorted by ID
	Units                []apiv1.StateUnit // sorted by name

	once sync.Once
	json []byte
	gzo  sync.Once
	gz   []byte
	cost atomic.Int64 // nanoseconds spent encoding and compressing
}

// EncodeCost is the time spent so far encoding (and compressing) this
// snapshot for readers: with the build time, what one snapshot costs.
func (s *Snapshot) EncodeCost() time.Duration { return time.Duration(s.cost.Load()) }

// ETag is the snapshot's entity tag.
func (s *Snapshot) ETag() string {
	return `"` + strconv.FormatInt(s.Term, 10) + "." + strconv.FormatUint(s.Generation, 10) + `"`
}

// JSON is the whole snapshot encoded, computed once.
func (s *Snapshot) JSON() []byte {
	s.once.Do(func() {
		start := time.Now()
		st := s.view(s.Units, len(s.Units), "")
		s.json = AppendState(make([]byte, 0, 256*len(s.Units)+1024), &st)
		s.cost.Add(int64(time.Since(start)))
	})
	return s.json
}

// Gzip is JSON compressed, computed once.
func (s *Snapshot) Gzip() []byte {
	s.gzo.Do(func() {
		start := time.Now()
		defer func() { s.cost.Add(int64(time.Since(start))) }()
		var b bytes.Buffer
		w, _ := gzip.NewWriterLevel(&b, gzip.BestSpeed)
		w.Write(s.JSON())
		w.Close()
		s.gz = b.Bytes()
	})
	return s.gz
}

func (s *Snapshot) view(units []apiv1.StateUnit, total int, next string) apiv1.State {
	return apiv1.State{Revision: s.Revision, Generation: s.Generation, Leader: s.Leader, EtcdUnreachableSince: s.EtcdUnreachableSince,
		Machines: s.Machines, Units: units, Total: total, Next: next}
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
	units := s.Units
	if f.After != "" {
		i := sort.Search(len(units), func(i int) bool { return units[i].Name > f.After })
		units = units[i:]
	}
	if f.Machine == "" && f.Unit == "" && f.State == "" && f.Limit > 0 {
		// A plain page: its cost is the page's, not the cluster's (the
		// units are in name order, and every one after f.After counts).
		out := append([]apiv1.StateUnit{}, units[:min(f.Limit, len(units))]...)
		next := ""
		if len(units) > f.Limit {
			next = out[len(out)-1].Name
		}
		return s.view(out, len(units), next)
	}
	var out []apiv1.StateUnit
	total := 0
	next := ""
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
		out = []apiv1.StateUnit{}
	}
	return s.view(out, total, next)
}

// names returns what matches unit names against f.Unit.
func (f Filter) names() func(string) bool {
	if tmpl, r, ok, err := unit.ParseRange(f.Unit); ok && err == nil {
		return func(name string) bool { return r.Contains(tmpl, name) }
	}
	return func(name string) bool {
		ok, _ := path.Match(f.Unit, name)
		return ok
	}
}

func (f Filter) match(u *apiv1.StateUnit, name func(string) bool) bool {
	if f.Machine != "" && u.Machine != f.Machine {
		return false
	}
	if f.Unit != "" && !name(u.Name) {
		return false
	}
	if f.State != "" {
		unplaced := u.DesiredState != "inactive" && u.Machine == "" && !u.Global
		if f.State != u.Active && f.State != u.DesiredState && !(f.State == "unplaced" && unplaced) {
			return false
		}
	}
	return true
}
