package api

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"

	"golang.org/x/time/rate"
)

// writeRates holds a token bucket per API token for its writes (every
// request but GET and HEAD): Config.WriteRate writes a second, in bursts of
// up to Config.WriteBurst. A write beyond is answered 429 with Retry-After.
// Each daemon keeps its own buckets; the leader, which every write reaches
// (forwarded or not), so sees all of a token's writes.
type writeRates struct {
	every rate.Limit
	burst int

	mu      sync.Mutex
	byToken map[string]*rate.Limiter
}

func newWriteRates(perSecond float64, burst int) *writeRates {
	return &writeRates{every: rate.Limit(perSecond), burst: burst, byToken: map[string]*rate.Limiter{}}
}

// allow takes a write of token id from its bucket; when the bucket is
// empty it returns how many seconds until it holds one.
func (w *writeRates) allow(id string) (ok bool, retryAfter int) {
	w.mu.Lock()
	l := w.byToken[id]
	if l == nil {
		l = rate.NewLimiter(w.every, w.burst)
		w.byToken[id] = l
	}
	w.mu.Unlock()
	r := l.Reserve()
	if d := r.Delay(); d > 0 {
		r.Cancel()
		return false, max(1, int(math.Ceil(d.Seconds())))
	}
	return true, 0
}

// forget drops the bucket of a revoked token.
func (w *writeRates) forget(id string) {
	w.mu.Lock()
	delete(w.byToken, id)
	w.mu.Unlock()
}

// rateLimited reports whether r, a request of token id, is a write over the
// token's rate; if so it has written the 429.
func (s *server) rateLimited(w http.ResponseWriter, r *http.Request, id, name string) bool {
	if s.writes == nil || r.Method == http.MethodGet || r.Method == http.MethodHead {
		return false
	}
	ok, after := s.writes.allow(id)
	if ok {
		return false
	}
	w.Header().Set("Retry-After", strconv.Itoa(after))
	refuse(w, r, http.StatusTooManyRequests, "too_many_requests",
		fmt.Sprintf("token %s writes faster than its limit of %g writes a second (bursts of %d; --token-write-rate, --token-write-burst): retry in %d s, or send several changes as one batch",
			name, float64(s.writes.every), s.writes.burst, after))
	return true
}
