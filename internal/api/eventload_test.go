package api_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// TestManyEventStreamsDoNotStallTheLeader (issue 23, finding 6): with
// 3,000 event streams open, a third of them never reading, a batch of
// 2,000 units starts, and no reconcile pass waits on the streams: the
// engine appends to a log of its own and the streams read it without its
// lock, so every pass stays under a bound far above the 500 ms aimed at
// (generous for a loaded test machine), and GET /v1/machines keeps
// answering: with the streams formatting events under a lock the engine
// took, it once waited 2 min 20 s here. TestEventAppendNeverWaitsForReaders
// (internal/engine) checks the structure itself.
func TestManyEventStreamsDoNotStallTheLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 3,000 streams")
	}
	const streams, stalled, units = 3000, 1000, 2000
	c := start(t)
	var (
		wg       sync.WaitGroup
		received atomic.Int64
		conns    []net.Conn
	)
	defer func() {
		for _, cn := range conns {
			cn.Close()
		}
		wg.Wait()
	}()
	host := strings.TrimPrefix(c.url, "http://")
	for i := range streams {
		cn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		conns = append(conns, cn)
		fmt.Fprintf(cn, "GET /v1/events HTTP/1.1\r\nHost: %s\r\n\r\n", host)
		br := bufio.NewReader(cn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("stream %d: %v %v", i, resp, err)
		}
		if i < stalled {
			continue // never read again: its socket fills
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			io.Copy(counter{&received}, resp.Body)
		}()
	}
	before := reconcileBuckets(t, c)
	var us []apiv1.UnitChange
	us = append(us, apiv1.UnitChange{Name: "load@.service", File: "[Service]\nExecStart=/bin/sleep infinity\n"})
	for i := range units {
		us = append(us, apiv1.UnitChange{Name: fmt.Sprintf("load@%d.service", i), DesiredState: "launched"})
	}
	if resp, body := c.do(t, "POST", "/v1/batch", batch(us...)); resp.StatusCode != 200 {
		t.Fatalf("batch = %d %s", resp.StatusCode, body)
	}
	var slowest time.Duration
	waitfor.Until(t, 3*time.Minute, fmt.Sprintf("the %d units active", units), func() error {
		began := time.Now()
		resp, body := c.do(t, "GET", "/v1/machines", "")
		slowest = max(slowest, time.Since(began))
		switch resp.StatusCode {
		case 200:
		case 503:
			// The test cluster's 1 s election lease can lapse on a
			// loaded machine: a new term answers after it.
			t.Logf("GET /v1/machines = 503 %s", body)
		default:
			t.Fatalf("GET /v1/machines = %d %s", resp.StatusCode, body)
		}
		_, body = c.do(t, "GET", "/v1/state?state=active&limit=1", "")
		if !strings.Contains(body, fmt.Sprintf(`"total":%d`, units)) {
			return fmt.Errorf("%.300s", body)
		}
		return nil
	})
	after := reconcileBuckets(t, c)
	passes, over := after["+Inf"]-before["+Inf"], (after["+Inf"]-after[bound])-(before["+Inf"]-before[bound])
	overHalf := (after["+Inf"] - after[halfSecond]) - (before["+Inf"] - before[halfSecond])
	t.Logf("%d reconcile passes, %d over %ss, %d over %ss (the bucket above the 500 ms aimed at); slowest GET /v1/machines %v; %d MB streamed to %d readers",
		int(passes), int(over), bound, int(overHalf), halfSecond, slowest, received.Load()>>20, streams-stalled)
	if passes == 0 || over > 0 {
		t.Errorf("%d of %d reconcile passes took over %ss with %d event streams open", int(over), int(passes), bound, streams)
	}
	if slowest > 10*time.Second {
		t.Errorf("GET /v1/machines took %v with %d event streams open", slowest, streams)
	}
}

// bound is the reconcile histogram's bucket the passes must stay under
// (its buckets are 0.0001 s × 3^k; this is 5.9 s: generous, as the test
// shares its two cores with the 2,000 readers and whatever else runs).
const bound = "5.9"

// halfSecond is the bucket just above the 500 ms the issue aims at; the
// test logs how many passes exceeded it (a figure, not a check).
const halfSecond = "0.656"

// reconcileBuckets reads the cumulative buckets of
// flotilla_reconcile_duration_seconds from /metrics.
func reconcileBuckets(t *testing.T, c *cluster) map[string]float64 {
	t.Helper()
	_, body := c.do(t, "GET", "/metrics", "")
	out := map[string]float64{}
	for line := range strings.SplitSeq(body, "\n") {
		rest, ok := strings.CutPrefix(line, `flotilla_reconcile_duration_seconds_bucket{le="`)
		if !ok {
			continue
		}
		le, v, _ := strings.Cut(rest, `"} `)
		switch {
		case strings.HasPrefix(le, "5.90"):
			le = bound
		case strings.HasPrefix(le, halfSecond):
			le = halfSecond
		}
		out[le], _ = strconv.ParseFloat(v, 64)
	}
	if _, ok := out[bound]; !ok {
		t.Fatalf("no bucket le=%s in /metrics: %v", bound, out)
	}
	return out
}

// counter counts the bytes written to it as they come.
type counter struct{ n *atomic.Int64 }

func (c counter) Write(p []byte) (int, error) { c.n.Add(int64(len(p))); return len(p), nil }
