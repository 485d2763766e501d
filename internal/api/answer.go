package api

import (
	"net/http"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/engine"
)

// A read is either current or tagged (issue 24). A daemon that leads
// answers from its memory; whether that answer is current is decided when
// it is given, not when the request arrived: between the two the term may
// degrade, or end while another daemon is elected and acknowledges writes.
// answerWriter decides as the answer's status line is written:
//
//   - an answer from this daemon's memory (readLocally) is sent without
//     the X-Flotilla-Etcd-Unreachable-Since header only if the term that
//     led when the request arrived still leads and its lease is known
//     valid now (engine.Vouch); it carries the header when that term is
//     degraded; a read (GET, HEAD) whose term ended meanwhile, or whose
//     lease stays unconfirmed, is refused (503) instead;
//   - any other answer (forwarded, /v1/status, /metrics...) carries the
//     header when this daemon leads a degraded term as it answers, besides
//     what the leader it was forwarded to said.

type answerKey struct{}

// answerWriter decides what an answer says about etcd as it is written.
type answerWriter struct {
	http.ResponseWriter
	eng *engine.Engine
	r   *http.Request
	// read is set when the request is answered from this daemon's memory.
	read    engine.Read
	local   bool
	wrote   bool
	refused bool // the handler's answer is replaced by a 503
	// What Vouch said of read, once asked (decide).
	decided  bool
	since    time.Time
	stale    bool
	vouchErr error
}

// decide vouches for a read answered from memory, once: what its answer
// says about etcd is fixed from then on.
func (a *answerWriter) decide() {
	if !a.decided {
		a.decided = true
		a.since, a.stale, a.vouchErr = a.eng.Vouch(a.read)
	}
}

// readUnreachableSince decides now what r's answer from this daemon's
// memory says about etcd, for a handler whose answer depends on it (the
// ETag of /v1/state): since and true if it carries the header. Call it
// once the memory answered from was read, just before writing: it is the
// decision the answer's status line then carries (a term that ended
// meanwhile still has the answer refused). False for other answers.
func readUnreachableSince(r *http.Request) (time.Time, bool) {
	aw, _ := r.Context().Value(answerKey{}).(*answerWriter)
	if aw == nil || !aw.local {
		return time.Time{}, false
	}
	aw.decide()
	return aw.since, aw.stale
}

// readLocally reports whether this daemon leads and answers r from its
// memory; if so the answer is vouched for when it is written.
func (s *server) readLocally(r *http.Request) bool {
	if s.cfg.Engine == nil {
		return false
	}
	rd, ok := s.cfg.Engine.StartRead()
	if !ok {
		return false
	}
	if aw, _ := r.Context().Value(answerKey{}).(*answerWriter); aw != nil {
		aw.read, aw.local = rd, true
	}
	return true
}

// answerRefused reports whether r's answer was replaced by a 503 as its
// status line was written: a stream has nothing more to send.
func answerRefused(r *http.Request) bool {
	aw, _ := r.Context().Value(answerKey{}).(*answerWriter)
	return aw != nil && aw.refused
}

func (a *answerWriter) WriteHeader(code int) {
	if a.wrote {
		a.ResponseWriter.WriteHeader(code) // net/http says it is superfluous
		return
	}
	a.wrote = true
	if !a.local {
		if since, ok := a.eng.EtcdUnreachableSince(); ok {
			a.Header().Set(apiv1.EtcdUnreachableHeader, since.UTC().Format(time.RFC3339))
		}
		a.ResponseWriter.WriteHeader(code)
		return
	}
	a.decide()
	switch {
	case a.stale:
		a.Header().Set(apiv1.EtcdUnreachableHeader, a.since.UTC().Format(time.RFC3339))
	case a.vouchErr != nil && (a.r.Method == http.MethodGet || a.r.Method == http.MethodHead):
		a.refused = true
		h := a.Header()
		for k := range h {
			delete(h, k)
		}
		refuse(a.ResponseWriter, a.r, http.StatusServiceUnavailable, "unavailable",
			"this daemon lost leadership while answering: its answer may be stale, so it is not given; retry")
		return
	}
	// A write's answer says what etcd confirmed, whatever happened since.
	a.ResponseWriter.WriteHeader(code)
}

func (a *answerWriter) Write(p []byte) (int, error) {
	if !a.wrote {
		a.WriteHeader(http.StatusOK)
	}
	if a.refused {
		return len(p), nil
	}
	return a.ResponseWriter.Write(p)
}

func (a *answerWriter) Flush() {
	if !a.wrote {
		a.WriteHeader(http.StatusOK)
	}
	if f, ok := a.ResponseWriter.(http.Flusher); ok && !a.refused {
		f.Flush()
	}
}

func (a *answerWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }
