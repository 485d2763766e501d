package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
)

// sseHeartbeat is how often an idle event stream carries a comment, so
// proxies and clients see it is alive.
const sseHeartbeat = 15 * time.Second

// events serves GET /v1/events as Server-Sent Events, from the position in
// Last-Event-ID (or ?since=) on; without one, from now on. An unknown
// position gets a "reset" event first: read /v1/state again.
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
	done := s.cfg.Engine.TermDone()
	hb := time.NewTicker(sseHeartbeat)
	defer hb.Stop()
	for first := true; ; first = false {
		evs, next, reset, more, err := s.cfg.Engine.Events(pos, 1000)
		if err != nil && first {
			s.engineError(w, err)
			return
		}
		if err != nil {
			return // leadership ended: the client reconnects and is forwarded
		}
		if first {
			// The status line goes after the first batch is read, so
			// that what it says about etcd holds for that batch (answer.go).
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-cache")
			w.Header().Set("X-Accel-Buffering", "no")
			w.WriteHeader(http.StatusOK)
			if answerRefused(r) {
				return
			}
		}
		if reset {
			// The position is unknown (another leader's) or the client fell
			// so far behind that events were dropped: it must read
			// /v1/state again.
			writeEvent(w, apiv1.Event{ID: next, Type: "reset", Time: time.Now().UTC().Format(time.RFC3339Nano)})
		}
		for _, ev := range evs {
			writeEvent(w, ev)
		}
		pos = next
		fl.Flush()
		if len(evs) == 1000 {
			continue // more are waiting
		}
		select {
		case <-more:
		case <-hb.C:
			fmt.Fprint(w, ": keep-alive\n\n")
			fl.Flush()
		case <-done:
			return
		case <-r.Context().Done():
			return
		}
	}
}

func writeEvent(w http.ResponseWriter, ev apiv1.Event) {
	b, _ := json.Marshal(ev)
	fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", ev.ID, ev.Type, b)
}
