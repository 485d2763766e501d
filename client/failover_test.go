package client_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
)

// daemonAnswering is a daemon's API that answers every request with code
// and, for an error, the API code apiCode; it counts the requests.
func daemonAnswering(t *testing.T, code int, apiCode string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		if code != http.StatusOK {
			json.NewEncoder(w).Encode(api.Error{Error: "cannot reach the engine leader m1", Code: apiCode})
			return
		}
		w.Write([]byte(`{"name":"web.service","units":[]}`))
	}))
	t.Cleanup(ts.Close)
	return ts, &n
}

// TestFailover: a client of several endpoints sends a request to the next
// one when the one in use cannot be connected to, or answers that it
// cannot reach the leader (issue 24), and keeps using the one that
// answered; a write that may have reached the leader is not sent again,
// a read is.
func TestFailover(t *testing.T) {
	// The daemons listen first: the closed port, free once closed, is
	// then none of theirs (made first, the kernel gave it to one of them).
	good, goodN := daemonAnswering(t, http.StatusOK, "")
	cutOff, cutOffN := daemonAnswering(t, http.StatusServiceUnavailable, "leader_unreachable")
	midway, midwayN := daemonAnswering(t, http.StatusServiceUnavailable, "unavailable")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	ctx := context.Background()

	c := newClient(t, closed+", "+cutOff.URL+","+good.URL)
	if _, err := c.PutUnit(ctx, api.UnitChange{Name: "web.service", DesiredState: "launched"}); err != nil {
		t.Fatalf("PutUnit through a closed port, a daemon cut off from the leader, then a good one: %v", err)
	}
	if c.Endpoint() != good.URL || cutOffN.Load() != 1 || goodN.Load() != 1 {
		t.Errorf("after failing over: endpoint %s (want %s), %d requests to the cut-off daemon (want 1), %d to the good one (want 1)",
			c.Endpoint(), good.URL, cutOffN.Load(), goodN.Load())
	}
	if _, err := c.Units(ctx); err != nil || goodN.Load() != 2 || cutOffN.Load() != 1 {
		t.Errorf("the next request: %v; %d to the good daemon (want 2), %d to the cut-off one (want 1)", err, goodN.Load(), cutOffN.Load())
	}

	// A daemon whose request to the leader was cut off mid-way: the
	// write may have landed, so it is not sent again; a read is.
	c = newClient(t, midway.URL+","+good.URL)
	_, err = c.PutUnit(ctx, api.UnitChange{Name: "web.service", DesiredState: "launched"})
	if ae, ok := err.(*client.APIError); !ok || ae.Code != "unavailable" || midwayN.Load() != 1 {
		t.Errorf("PutUnit through a daemon answering 503 unavailable = %v, want that error, sent once", err)
	}
	if _, err := c.Units(ctx); err != nil || c.Endpoint() != good.URL {
		t.Errorf("Units through a daemon answering 503 unavailable, then a good one: %v at %s, want an answer from %s", err, c.Endpoint(), good.URL)
	}

	// Every endpoint fails: the error names each.
	c = newClient(t, closed+","+cutOff.URL)
	_, err = c.Units(ctx)
	if err == nil || !strings.Contains(err.Error(), closed) || !strings.Contains(err.Error(), "cannot reach the engine leader") || !client.IsUnavailable(err) {
		t.Errorf("Units when no endpoint answers = %v, want an unavailable error naming both failures", err)
	}
}
