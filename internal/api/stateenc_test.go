package api_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/state"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// generationOf reads the generation a /v1/state answer says it is.
func generationOf(t *testing.T, body []byte) uint64 {
	t.Helper()
	var st struct {
		Generation uint64 `json:"generation"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("answer is not a state: %v: %.200s", err, body)
	}
	return st.Generation
}

// freshlyEncoded is what encoding/json writes of the view f of snap, the
// way /v1/state has always answered.
func freshlyEncoded(t *testing.T, snap *state.Snapshot, f state.Filter) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(snap.Select(f)); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("gzip answer: %v", err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("gzip answer: %v", err)
	}
	return plain
}

// TestStateCachedBytes: /v1/state, served from bytes encoded once a
// generation, is byte for byte what encoding the snapshot afresh gives,
// plain and gzipped, whole and paged, in every generation, and a second
// answer of the same generation is the same bytes.
func TestStateCachedBytes(t *testing.T) {
	c := start(t)
	for gen := range 3 {
		var units []apiv1.UnitChange
		for i := range 3 {
			units = append(units, apiv1.UnitChange{Name: fmt.Sprintf("g%d-%d.service", gen, i), File: okUnit, DesiredState: "launched"})
		}
		if resp, body := c.do(t, "POST", "/v1/batch", batch(units...)); resp.StatusCode != 200 {
			t.Fatalf("batch: %s %s", resp.Status, body)
		}
		for _, v := range []struct {
			query string
			f     state.Filter
		}{
			{"", state.Filter{}},
			{"?limit=2", state.Filter{Limit: 2}},
			{"?unit=g*&state=launched", state.Filter{Unit: "g*", State: "launched"}},
		} {
			for _, gz := range []bool{false, true} {
				// (Without Accept-Encoding, http.Transport asks for gzip
				// and decompresses.)
				hdr := []string{"Accept-Encoding", "identity"}
				if gz {
					hdr = []string{"Accept-Encoding", "gzip"}
				}
				// The engine's latest snapshot is the one answered once
				// no rebuild comes between the answer and the look.
				waitfor.True(t, 10*time.Second, "an answer of the engine's latest snapshot", func() bool {
					resp, body := c.do(t, "GET", "/v1/state"+v.query, "", hdr...)
					if resp.StatusCode != 200 || (resp.Header.Get("Content-Encoding") == "gzip") != gz {
						t.Fatalf("GET /v1/state%s (gzip %v): %s, Content-Encoding %q", v.query, gz, resp.Status, resp.Header.Get("Content-Encoding"))
					}
					got := []byte(body)
					if gz {
						got = gunzip(t, got)
					}
					snap := c.eng.State()
					if snap == nil || snap.Generation != generationOf(t, got) {
						return false
					}
					if want := freshlyEncoded(t, snap, v.f); !bytes.Equal(got, want) {
						t.Fatalf("generation %d, GET /v1/state%s (gzip %v) differs from a fresh encoding:\n%s\nwant\n%s", snap.Generation, v.query, gz, got, want)
					}
					if resp.Header.Get("Content-Length") != strconv.Itoa(len(body)) || resp.Header.Get("Content-Type") != "application/json" ||
						resp.Header.Get("ETag") != snap.ETag() || resp.Header.Get("Vary") != "Accept-Encoding" {
						t.Fatalf("GET /v1/state%s: headers %v ; want Content-Length %d, JSON, ETag %s, Vary", v.query, resp.Header, len(body), snap.ETag())
					}
					// The same generation again: the same bytes.
					resp2, body2 := c.do(t, "GET", "/v1/state"+v.query, "", hdr...)
					if resp2.Header.Get("ETag") == resp.Header.Get("ETag") && body2 != body {
						t.Fatalf("GET /v1/state%s twice with ETag %s: different bytes", v.query, resp.Header.Get("ETag"))
					}
					return true
				})
			}
		}
	}
}

// TestStateETag: an If-None-Match naming the current state (alone, in a
// list, weak, or *) is answered 304 with the ETag; once the state changed,
// 200 with a new ETag and the change.
func TestStateETag(t *testing.T) {
	c := start(t)
	if resp, body := c.do(t, "POST", "/v1/batch", batch(apiv1.UnitChange{Name: "a.service", File: okUnit, DesiredState: "launched"})); resp.StatusCode != 200 {
		t.Fatalf("batch: %s %s", resp.Status, body)
	}
	// A read may get the state as it was and start a fresh one: wait for
	// the state to settle (a 304 on the last ETag).
	var etag string
	waitfor.True(t, 10*time.Second, "a 304 for the current ETag", func() bool {
		resp, _ := c.do(t, "GET", "/v1/state", "", "If-None-Match", etag)
		if resp.StatusCode == http.StatusNotModified {
			return true
		}
		etag = resp.Header.Get("ETag")
		return false
	})
	if len(etag) < 3 || etag[0] != '"' || etag[len(etag)-1] != '"' {
		t.Fatalf("ETag %s: want a strong, quoted tag", etag)
	}
	for _, inm := range []string{etag, `"nope", ` + etag, "W/" + etag, "*"} {
		resp, body := c.do(t, "GET", "/v1/state", "", "If-None-Match", inm)
		if resp.StatusCode != http.StatusNotModified || resp.Header.Get("ETag") != etag || body != "" {
			t.Errorf("If-None-Match %s: %s, ETag %s, %d bytes; want 304 with ETag %s and no body", inm, resp.Status, resp.Header.Get("ETag"), len(body), etag)
		}
	}
	if resp, _ := c.do(t, "GET", "/v1/state", "", "If-None-Match", `"other"`); resp.StatusCode != 200 {
		t.Errorf("If-None-Match naming another state: %s, want 200", resp.Status)
	}
	// A write shows in the state read after it: a new ETag.
	if resp, body := c.do(t, "POST", "/v1/batch", batch(apiv1.UnitChange{Name: "b.service", File: okUnit, DesiredState: "launched"})); resp.StatusCode != 200 {
		t.Fatalf("batch: %s %s", resp.Status, body)
	}
	resp, body := c.do(t, "GET", "/v1/state", "", "If-None-Match", etag)
	var st apiv1.State
	json.Unmarshal([]byte(body), &st)
	if resp.StatusCode != 200 || resp.Header.Get("ETag") == etag || resp.Header.Get("ETag") == "" || st.Total != 2 {
		t.Fatalf("If-None-Match %s after a write: %s, ETag %s, %d units; want 200 with a new ETag and both units", etag, resp.Status, resp.Header.Get("ETag"), st.Total)
	}
}

// TestStateEncodedOnce: concurrent requests for the whole state encode
// (and compress) each snapshot once, however many ask at once.
func TestStateEncodedOnce(t *testing.T) {
	c := start(t)
	var units []apiv1.UnitChange
	for i := range 50 {
		units = append(units, apiv1.UnitChange{Name: fmt.Sprintf("w%d.service", i), File: okUnit, DesiredState: "launched"})
	}
	if resp, body := c.do(t, "POST", "/v1/batch", batch(units...)); resp.StatusCode != 200 {
		t.Fatalf("batch: %s %s", resp.Status, body)
	}
	type enc struct {
		snap *state.Snapshot
		gz   bool
	}
	var mu sync.Mutex
	counts := map[enc]int{}
	hook := func(s *state.Snapshot, gz bool) { mu.Lock(); counts[enc{s, gz}]++; mu.Unlock() }
	state.EncodeHook.Store(&hook)
	t.Cleanup(func() { state.EncodeHook.Store(nil) })

	const n = 16
	var wg sync.WaitGroup
	begin := make(chan struct{})
	tags := make([]string, n)
	for i := range n {
		wg.Go(func() {
			<-begin
			hdr := []string{"Accept-Encoding", "identity"}
			if i%2 == 1 {
				hdr = []string{"Accept-Encoding", "gzip"}
			}
			resp, _ := c.do(t, "GET", "/v1/state", "", hdr...)
			if resp.StatusCode != 200 {
				t.Errorf("GET /v1/state: %s", resp.Status)
			}
			tags[i] = resp.Header.Get("ETag")
		})
	}
	close(begin)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(counts) == 0 {
		t.Fatal("no encoding counted")
	}
	gens := map[string]bool{}
	for _, tag := range tags {
		gens[tag] = true
	}
	ours := 0
	for e, k := range counts {
		if k != 1 {
			t.Errorf("snapshot %s (gzip %v) encoded %d times, want once", e.snap.ETag(), e.gz, k)
		}
		if gens[e.snap.ETag()] {
			ours++
		}
	}
	// At most one plain and one gzipped encoding of each state answered.
	if ours == 0 || ours > 2*len(gens) {
		t.Errorf("%d encodings of the %d states answered to %d requests, want 1 to %d", ours, len(gens), n, 2*len(gens))
	}
}
