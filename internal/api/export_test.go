package api

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"time"
)

// For TestRequestSeeds (package api_test): the fuzz seeds and the reading
// of requests, to compare with the real handler's answers.

type RequestSeed = requestSeed

func RequestSeeds() []RequestSeed { return requestSeeds() }

func (s RequestSeed) Request() (method, path, body string) {
	switch s.kind % kinds {
	case kindPutUnit:
		return "PUT", "/v1/units/" + s.name, s.body
	case kindBatch:
		return "POST", "/v1/batch", s.body
	case kindPatchMachine:
		return "PATCH", "/v1/machines/" + s.name, s.body
	default:
		return "PUT", "/v1/scheduler", s.body
	}
}

func (s RequestSeed) Read() (code int, answer []byte) {
	code, answer, _ = readRequest(s.kind, s.name, []byte(s.body))
	return code, answer
}

// FakePacing makes cfg's budget of whole-state answers run on a fake
// clock, on which every answer costs cost and a wait passes at once;
// pauses returns the waits so far.
func FakePacing(cfg *Config, cost time.Duration) (pauses func() []time.Duration) {
	p := newPacer(WholeStateShare)
	var mu sync.Mutex
	var now time.Time
	var waits []time.Duration
	p.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	p.sleep = func(_ context.Context, d time.Duration) error {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(d)
		waits = append(waits, d)
		return nil
	}
	p.cost = func(_ *http.Request, write func()) time.Duration { write(); return cost }
	cfg.pace = p
	return func() []time.Duration { mu.Lock(); defer mu.Unlock(); return slices.Clone(waits) }
}
