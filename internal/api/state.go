package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/limits"
	"github.com/flotilla/flotilla/internal/state"
)

// sourceHeader says where a /v1/state answer comes from when it is not the
// leader's memory: "etcd" means the durable record only (no current states,
// no machines), because the leader could not be reached.
const sourceHeader = "X-Flotilla-State-Source"

// stateHandler serves GET /v1/state: on the leader from its published
// snapshot; elsewhere forwarded to the leader, or read from etcd when the
// leader cannot be reached.
func (s *server) stateHandler(w http.ResponseWriter, r *http.Request) {
	var waited time.Duration // for the budget (serveLeader): not the answer's time
	if m := s.cfg.Metrics; m != nil {
		start := time.Now()
		cw := &countingWriter{ResponseWriter: w}
		w = cw
		defer func() {
			m.StateRequestDuration.Observe((time.Since(start) - waited).Seconds())
			m.StateResponseBytes.Observe(float64(cw.n))
		}()
	}
	f, err := stateFilter(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if s.readLocally(r) {
		snap := s.cfg.Engine.State()
		if snap == nil {
			writeError(w, http.StatusServiceUnavailable, "unavailable", "the leader has not published its state yet; retry")
			return
		}
		waited = s.serveLeader(w, r, snap, f)
		return
	}
	in, ok := s.cfg.Leader()
	if ok && in.APIAddr != "" && r.Header.Get(forwardedHeader) == "" {
		// Forward, but fall back to etcd if the leader does not answer.
		rec := httptest.NewRecorder()
		s.forwardToLeader(rec, r, in)
		if rec.Code != http.StatusBadGateway && rec.Code != http.StatusServiceUnavailable {
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
			return
		}
	}
	s.stateFromEtcd(w, r, f)
}

func stateFilter(r *http.Request) (state.Filter, error) {
	q := r.URL.Query()
	f := state.Filter{Machine: q.Get("machine"), Unit: q.Get("unit"), State: q.Get("state"), After: q.Get("after")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return f, fmt.Errorf("limit=%q is not a non-negative number", v)
		}
		f.Limit = n
	}
	return f, nil
}

// serveLeader answers from the leader's snapshot: at once for a page
// (limit=), a 304 or a HEAD; an answer of any size (no limit=) waits for
// the budget of such answers (WholeStateShare), then is the latest
// snapshot, and its cost is counted. The metrics of /v1/state time the
// answer without the wait, so that they (and the FlotillaStateSlow alert)
// still say how fast the leader answers, not how hard it is polled.
// It returns how long the answer waited.
func (s *server) serveLeader(w http.ResponseWriter, r *http.Request, snap *state.Snapshot, f state.Filter) time.Duration {
	// Whether the answer will be a 304 is known for sure only once it is
	// vouched for (serveSnapshot); a term that degrades between the two
	// makes it a 200 that skipped the wait, once a term.
	since, degraded := s.cfg.Engine.EtcdUnreachableSince()
	if f.Limit > 0 || r.Method == http.MethodHead || etagMatch(r, stateETag(snap, since, degraded)) {
		serveSnapshot(w, r, snap, f)
		return 0
	}
	start := time.Now()
	done, err := s.pace.wait(r.Context())
	waited := time.Since(start)
	if err != nil {
		return waited // the client gave up waiting: nobody to answer
	}
	// The time waited is not the answer's: it gets the server's whole
	// write timeout (limits.HTTPWriteTimeout) from now on, and the state
	// as it is now. (Neither fails on the connections http.Server makes.)
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(limits.HTTPWriteTimeout))
	if s.cfg.Engine != nil {
		if now := s.cfg.Engine.State(); now != nil {
			snap = now
		}
	}
	if f.IsZero() {
		// The whole state is encoded (and compressed) once a snapshot,
		// by the first answer that wants it, the others waiting for it:
		// that is the snapshot's cost, which paces its rebuilds
		// (engine.SnapshotInterval), not this answer's, which is the
		// copy. A filtered view's encoding is its answer's.
		wholeState(snap, acceptsGzip(r))
	}
	done(s.pace.cost(r, func() { serveSnapshot(w, r, snap, f) }))
	return waited
}

// stateETag is the ETag of an answer from snap: the snapshot's, or, when
// the answer carries the X-Flotilla-Etcd-Unreachable-Since header, another
// naming the time it gives. A client that kept the state of a term while
// it was current thus never has it confirmed (304) once the term is
// degraded: it gets the state again, with the header, and one that kept a
// degraded answer gets a new one once etcd is back (a new term).
func stateETag(snap *state.Snapshot, since time.Time, degraded bool) string {
	tag := snap.ETag()
	if !degraded {
		return tag
	}
	return tag[:len(tag)-1] + "-etcd-unreachable-since-" + strconv.FormatInt(since.Unix(), 10) + `"`
}

// etagMatch reports whether r's If-None-Match names etag: one of its list,
// compared weakly as RFC 9110 says for If-None-Match, or "*".
func etagMatch(r *http.Request, etag string) bool {
	for _, v := range r.Header.Values("If-None-Match") {
		for m := range strings.SplitSeq(v, ",") {
			m = strings.TrimPrefix(strings.TrimSpace(m), "W/")
			if m == etag || m == "*" {
				return true
			}
		}
	}
	return false
}

func acceptsGzip(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept-Encoding"), "gzip")
}

// wholeState returns the whole state, encoded once a snapshot.
func wholeState(snap *state.Snapshot, gz bool) []byte {
	if gz {
		return snap.Gzip()
	}
	return snap.JSON()
}

// serveSnapshot answers r from snap. An answer from the leader's memory is
// vouched for here (readUnreachableSince), after snap was taken: its ETag
// and its X-Flotilla-Etcd-Unreachable-Since header say the same.
func serveSnapshot(w http.ResponseWriter, r *http.Request, snap *state.Snapshot, f state.Filter) {
	since, degraded := readUnreachableSince(r)
	etag := stateETag(snap, since, degraded)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("ETag", etag)
	w.Header().Set("Vary", "Accept-Encoding")
	if etagMatch(r, etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	gz := acceptsGzip(r)
	// The whole state is encoded once; a page or a filtered view is its
	// units after the head every view shares, encoded once too.
	var head, rest []byte
	if f.IsZero() {
		rest = wholeState(snap, gz)
	} else {
		head, rest = snap.Page(f, gz)
	}
	if gz {
		w.Header().Set("Content-Encoding", "gzip")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(head)+len(rest)))
	if len(head) > 0 {
		w.Write(head)
	}
	w.Write(rest)
}

// stateFromEtcd answers from the durable record when no leader answers:
// unit files' desired states and the schedule, without current states.
func (s *server) stateFromEtcd(w http.ResponseWriter, r *http.Request, f state.Filter) {
	if s.cfg.Durable == nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "no engine leader answers and this daemon cannot read etcd")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	snap, err := s.cfg.Durable(ctx)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			writeError(w, http.StatusServiceUnavailable, "unavailable", "no engine leader answers and etcd did not either: "+err.Error())
			return
		}
		writeError(w, http.StatusServiceUnavailable, "unavailable", "no engine leader answers, and reading etcd failed: "+err.Error())
		return
	}
	slices.SortFunc(snap.Units, func(a, b state.Unit) int { return strings.Compare(a.Name, b.Name) })
	if snap.Machines == nil {
		snap.Machines = []apiv1.Machine{}
	}
	w.Header().Set(sourceHeader, "etcd")
	serveSnapshot(w, r, snap, f)
}

// countingWriter counts the bytes of an answer.
type countingWriter struct {
	http.ResponseWriter
	n int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n += n
	return n, err
}

func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }
