package api_test

import (
	"net/http"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flotilla/flotilla/internal/api"
)

// TestWholeStatePaced: on the leader, back-to-back whole-state answers
// are paced to WholeStateShare (on a fake clock where each costs 1 ms,
// the second starts 1 ms / share after the first), while pages, answers
// 304 and other endpoints are not held back; a filtered view without
// limit= is paced too, and the state answers still come whole.
func TestWholeStatePaced(t *testing.T) {
	var pauses func() []time.Duration
	c := start(t, func(cfg *api.Config, _ *clientv3.Client) { pauses = api.FakePacing(cfg, time.Millisecond) })
	get := func(path string, hdr ...string) *http.Response {
		t.Helper()
		resp, body := c.do(t, "GET", path, "", hdr...)
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotModified {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		return resp
	}
	slot := time.Duration(float64(time.Millisecond) / api.WholeStateShare)

	get("/v1/state")
	if got := pauses(); len(got) != 0 {
		t.Fatalf("the first whole-state answer waited %v, want at once", got)
	}
	get("/v1/state")
	if got := pauses(); len(got) != 1 || got[0] != slot {
		t.Fatalf("the second whole-state answer, back to back, waited %v; want one wait of %v (1 ms at %v)", got, slot, api.WholeStateShare)
	}
	// Neither a page, nor a 304, nor another endpoint waits, though a
	// whole-state answer would now.
	get("/v1/state?limit=1")
	get("/v1/state?unit=*&limit=1000")
	get("/v1/machines")
	get("/v1/status")
	if got := pauses(); len(got) != 1 {
		t.Fatalf("pages and other endpoints waited: %v (want only the second whole answer's wait)", got[1:])
	}
	for try := 0; ; try++ {
		etag := get("/v1/state?limit=1").Header.Get("ETag")
		n := len(pauses())
		resp := get("/v1/state", "If-None-Match", etag)
		if resp.StatusCode == http.StatusNotModified {
			if got := pauses(); len(got) != n {
				t.Fatalf("an answer 304 waited %v", got[n:])
			}
			break
		}
		if try == 10 { // a new state each time: the cluster never settled
			t.Fatal("no 304 in 10 tries")
		}
	}
	n := len(pauses())
	get("/v1/state?state=active")
	if got := pauses(); len(got) != n+1 || got[n] != slot {
		t.Fatalf("a filtered view without limit=, after a whole answer: waits %v, want one more of %v", got, slot)
	}
}
