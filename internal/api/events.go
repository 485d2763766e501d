package api

import (
	"errors"
	"net/http"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/engine"
)

// sseHeartbeat is how often an idle event stream carries a comment, so
// proxies and clients see it is alive.
const sseHeartbeat = 15 * time.Second

// events serves GET /v1/events as Server-Sent Events, from the position in
// Last-Event-ID (or ?since=) on; without one, from now on. An unknown
// position gets a "reset" event first: read /v1/state again.
//
// The events are the engine's, encoded once for every stream
// (engine.EventCursor): a stream writes them as they are. A client that
// does not take a write within streamWriteTimeout, or falls so far behind
// that the leader would have to hold what it has not read, is dropped; it
// reconnects with Last-Event-ID and resumes.
func (s *server) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "internal", "streaming is not supported by this connection")
		return
	}
	pos := r.Header.Get("Last-Event-ID")
	if v := r.URL.Query().Get("since"); v != "" {
		pos = v
	}
	cur, reset, err := s.cfg.Engine.Subscribe(pos)
	if err != nil {
		s.engineError(w, err)
		return
	}
	// The status line goes after the first events are read, so that what
	// it says about etcd holds for them (answer.go).
	first, err := cur.Read()
	if err != nil && !errors.Is(err, engine.ErrSlowReader) {
		s.engineError(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if answerRefused(r) {
		return
	}
	rc := http.NewResponseController(w)
	write := func(b []byte) bool {
		rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		if _, err := w.Write(b); err != nil {
			return false
		}
		fl.Flush()
		return true
	}
	if reset {
		// The position is unknown (another leader's) or too old: the
		// client must read /v1/state again.
		if !write(engine.AppendSSE(nil, apiv1.Event{ID: cur.Pos(), Type: "reset", Time: time.Now().UTC().Format(time.RFC3339Nano)})) {
			return
		}
	} else {
		fl.Flush()
	}
	if len(first) > 0 && !write(first) {
		return
	}
	hb := time.NewTicker(sseHeartbeat)
	defer hb.Stop()
	for {
		b, err := cur.Read()
		if errors.Is(err, engine.ErrSlowReader) {
			s.log.Info("dropping a slow event stream", "remote", r.RemoteAddr, "err", err)
			return
		}
		if err != nil {
			return // leadership ended: the client reconnects and is forwarded
		}
		if len(b) > 0 {
			if !write(b) {
				return
			}
			continue
		}
		select {
		case <-cur.More():
		case <-hb.C:
			if !write([]byte(": keep-alive\n\n")) {
				return
			}
		case <-cur.Done():
			return
		case <-r.Context().Done():
			return
		}
	}
}
