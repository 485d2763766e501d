package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// StatePath is the API path the state pollers fetch: the full cluster
// state, as Mesos users poll /state.
const StatePath = "/v1/state"

// statePollers are clients that each fetch url again as soon as they have
// read the previous answer, and time every fetch.
type statePollers struct {
	n           int
	url         string
	conditional bool // send If-None-Match with the last ETag
	cancel      context.CancelFunc
	wg          sync.WaitGroup

	stopOnce sync.Once
	report   *StateReport

	mu          sync.Mutex
	lat         []time.Duration // every answer's
	duringLat   []time.Duration // answers to fetches begun before every unit was active
	afterLat    []time.Duration // answers to fetches begun once every unit was active
	after       time.Time       // when every unit was seen active; zero before
	errors      int
	firstErr    string
	bytes       int64
	notModified int
}

// startStatePollers starts n pollers of url; stop ends them.
// They speak to the run's daemons with t (its pool sized for n here).
func startStatePollers(ctx context.Context, n int, url string, conditional bool, t *runTLS) *statePollers {
	ctx, cancel := context.WithCancel(ctx)
	s := &statePollers{n: n, url: url, cancel: cancel, conditional: conditional}
	tr := t.pool()
	tr.MaxIdleConnsPerHost, tr.DisableCompression = n, true
	hc := &http.Client{Transport: t.withToken(tr), Timeout: 5 * time.Minute}
	for range n {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.poll(ctx, hc) }()
	}
	go func() { <-ctx.Done(); s.wg.Wait(); tr.CloseIdleConnections() }()
	return s
}

func (s *statePollers) poll(ctx context.Context, hc *http.Client) {
	etag := ""
	for ctx.Err() == nil {
		start := time.Now()
		if !s.conditional {
			etag = ""
		}
		n, newTag, err := fetch(ctx, hc, s.url, etag)
		notModified := err == nil && newTag == etag && etag != ""
		etag = newTag
		d := time.Since(start)
		if ctx.Err() != nil {
			return // cut short by the end of the run: not a measurement
		}
		s.mu.Lock()
		if err != nil {
			s.errors++
			if s.firstErr == "" {
				s.firstErr = err.Error()
			}
		} else {
			s.lat = append(s.lat, d)
			if !s.after.IsZero() && !start.Before(s.after) {
				s.afterLat = append(s.afterLat, d)
			} else {
				s.duringLat = append(s.duringLat, d)
			}
			if notModified {
				s.notModified++
			} else {
				s.bytes = n
			}
		}
		s.mu.Unlock()
		if err != nil {
			select { // do not spin on an endpoint that fails at once
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// fetch GETs url (conditionally, when etag is set) and reads the whole
// answer, returning its size and ETag; a 304 returns etag itself.
func fetch(ctx context.Context, hc *http.Client, url, etag string) (int64, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		n, err := io.Copy(io.Discard, resp.Body)
		return n, resp.Header.Get("ETag"), err
	case http.StatusNotModified:
		return 0, etag, nil
	case http.StatusNotFound:
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return 0, "", fmt.Errorf("GET %s: 404 Not Found: the engine does not serve %s", url, req.URL.Path)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return 0, "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
}

// allActive marks the moment every unit was seen active: the answers to
// fetches begun from then on are also reported apart (StateReport.After).
func (s *statePollers) allActive() {
	s.mu.Lock()
	s.after = time.Now()
	s.mu.Unlock()
}

// stop ends the pollers and returns what they measured; later calls return
// the same report.
func (s *statePollers) stop() *StateReport {
	s.stopOnce.Do(func() {
		s.cancel()
		s.wg.Wait()
		s.report = s.measured()
	})
	return s.report
}

func (s *statePollers) measured() *StateReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := summarizeMS(s.lat)
	r := &StateReport{Pollers: s.n, Requests: all.Requests, Errors: s.errors, Bytes: s.bytes, Error: s.firstErr,
		P50MS: all.P50MS, P99MS: all.P99MS, MaxMS: all.MaxMS, Conditional: s.conditional, NotModified: s.notModified}
	if len(s.duringLat) > 0 {
		during := summarizeMS(s.duringLat)
		r.During = &during
	}
	if !s.after.IsZero() {
		after := summarizeMS(s.afterLat)
		r.After = &after
	}
	return r
}

// summarizeMS summarizes latencies in milliseconds.
func summarizeMS(lat []time.Duration) StateLatency {
	ms := make([]float64, len(lat))
	for i, d := range lat {
		ms[i] = float64(d.Microseconds()) / 1000
	}
	slices.Sort(ms)
	l := StateLatency{Requests: len(ms)}
	if len(ms) > 0 {
		l.P50MS = round3(percentile(ms, 50))
		l.P99MS = round3(percentile(ms, 99))
		l.MaxMS = round3(ms[len(ms)-1])
	}
	return l
}
