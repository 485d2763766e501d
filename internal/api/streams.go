package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/flotilla/flotilla/internal/auth"
)

// streamSet bounds one kind of long-lived stream (event streams, journal
// follows) this daemon serves at once: in all, and per API token, so one
// token cannot take them all. Beyond either, the answer is 429 naming the
// limit.
type streamSet struct {
	what     string // "event streams", "journal follows"
	max      int    // per daemon
	perToken int    // per token (requests without a token count only in all)

	mu      sync.Mutex
	total   int
	byToken map[string]int
}

func newStreamSet(what string, max, perToken int) *streamSet {
	return &streamSet{what: what, max: max, perToken: perToken, byToken: map[string]int{}}
}

// take counts a stream of token id ("" for none); release uncounts it.
func (s *streamSet) take(id string) (release func(), msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.total >= s.max:
		return nil, fmt.Sprintf("this daemon already serves %d %s, its limit; retry later", s.total, s.what)
	case id != "" && s.byToken[id] >= s.perToken:
		return nil, fmt.Sprintf("token %s already has %d %s open on this daemon, the limit per token; close one or retry later", id, s.byToken[id], s.what)
	}
	s.total++
	if id != "" {
		s.byToken[id]++
	}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.total--
		if id != "" {
			if s.byToken[id]--; s.byToken[id] == 0 {
				delete(s.byToken, id)
			}
		}
	}, ""
}

// limit serves h as a stream of set, if isStream(r) (otherwise as is),
// counted against the set's limits, and ended as soon as its token is
// revoked or expires (see auth.Tokens.Gone).
func (s *server) limit(set *streamSet, isStream func(*http.Request) bool, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !isStream(r) {
			h(w, r)
			return
		}
		tok, hasToken := auth.FromContext(r.Context())
		release, msg := set.take(tok.ID)
		if release == nil {
			w.Header().Set("Retry-After", "10")
			refuse(w, r, http.StatusTooManyRequests, "too_many_requests", msg)
			return
		}
		defer release()
		if !hasToken || s.cfg.Tokens == nil {
			h(w, r)
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		gone := s.cfg.Tokens.Gone(tok)
		var expired <-chan time.Time
		if !tok.Expires.IsZero() {
			timer := time.NewTimer(time.Until(tok.Expires))
			defer timer.Stop()
			expired = timer.C
		}
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			select {
			case <-gone:
			case <-expired:
			case <-stop:
				return
			}
			s.log.Info("ending a stream of a revoked or expired token", "token", tok.ID, "path", r.URL.Path)
			cancel()
		}()
		h(w, r.WithContext(ctx))
	}
}

func isEvents(*http.Request) bool { return true }

func isFollow(r *http.Request) bool {
	follow, _ := strconv.ParseBool(r.URL.Query().Get("follow"))
	return follow
}

// streamWriteTimeout is how long one write of a stream may wait for its
// client: a client that reads nothing for that long is dropped, rather
// than making the daemon hold what it has not read.
const streamWriteTimeout = 10 * time.Second
