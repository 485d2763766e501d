package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/api"
	"github.com/flotilla/flotilla/internal/election"
)

// TestForwardLeaderUnreachable: a daemon that cannot reach the leader
// answers the requests it forwards with 503 naming the leader within about
// a second, instead of letting each wait for the client's timeout (issue
// 24): a request already sent when the leader became unreachable answers
// "unavailable" (it may have reached the leader), the next ones
// "leader_unreachable" at once (nothing was forwarded).
func TestForwardLeaderUnreachable(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-release // a leader whose answers never come back
	}))
	t.Cleanup(func() { close(release); leader.Close() })
	addr := strings.TrimPrefix(leader.URL, "http://")
	follower := httptest.NewServer(api.New(api.Config{Machine: "m2",
		Leader: func() (election.Info, bool) { return election.Info{Machine: "m1", APIAddr: addr}, true }}))
	t.Cleanup(follower.Close)
	hc := &http.Client{Timeout: 10 * time.Second}
	get := func(path string) (int, apiv1.Error, time.Duration) {
		t.Helper()
		start := time.Now()
		resp, err := hc.Get(follower.URL + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var e apiv1.Error
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = string(b) // fleet's error shape
		}
		return resp.StatusCode, e, time.Since(start)
	}
	// The request reaches the leader; then nothing reaches the leader's
	// address any more (its listener is gone, the connection stays,
	// silent).
	go func() { <-arrived; leader.Listener.Close() }()
	code, e, took := get("/v1/units")
	if code != 503 || e.Code != "unavailable" || !strings.Contains(e.Error, "cannot reach the engine leader m1 at "+addr) ||
		!strings.Contains(e.Error, "may or may not have reached it") || took > 2*time.Second {
		t.Errorf("a request sent to a leader that became unreachable: %d %+v after %v, want 503 unavailable naming m1 within 2s", code, e, took)
	}
	for _, path := range []string{"/v1/units", "/v1/machines", "/fleet/v1/units"} {
		code, e, took := get(path)
		if code != 503 || !strings.Contains(e.Error, "cannot reach the engine leader m1 at "+addr) || took > time.Second {
			t.Errorf("GET %s through a daemon that cannot reach the leader: %d %+v after %v, want 503 naming m1 within 1s", path, code, e, took)
		}
		if path != "/fleet/v1/units" && (e.Code != "leader_unreachable" || !strings.Contains(e.Error, "nothing was forwarded")) {
			t.Errorf("GET %s: code %q, %q, want leader_unreachable: nothing was forwarded", path, e.Code, e.Error)
		}
	}
}
