package bench

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apiv1 "github.com/flotilla/flotilla/api"
)

// TestLeadingFollowsAMovedLeader: the engine to kill is the one leading at
// the kill; when that is not the one the run began with, the bench says
// so, shows the engines' logs and notes it in the report.
func TestLeadingFollowsAMovedLeader(t *testing.T) {
	leads := map[string]bool{}
	var addrs []string
	for range 2 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/status" {
				http.NotFound(w, r)
				return
			}
			json.NewEncoder(w).Encode(apiv1.Status{IsLeader: leads[r.Host]})
		}))
		defer srv.Close()
		addrs = append(addrs, strings.TrimPrefix(srv.URL, "http://"))
	}
	dir := t.TempDir()
	c := &cluster{engineAPI: addrs, leaderAPI: addrs[0]}
	for _, name := range []string{"engine1", "engine2"} {
		log := filepath.Join(dir, name+".log")
		os.WriteFile(log, []byte("lost leadership, says "+name+"\n"), 0o600)
		c.engines = append(c.engines, &process{name: name, log: log})
	}

	leads[addrs[0]] = true
	var out bytes.Buffer
	r := &FailoverReport{}
	if p, err := leading(t.Context(), c, r, newProgress(&out)); err != nil || p != c.engines[0] || r.LeaderMovedBeforeKill {
		t.Fatalf("with the first leader still leading: %v, %v, moved %v; want engine1, not moved", p, err, r.LeaderMovedBeforeKill)
	}

	leads[addrs[0]], leads[addrs[1]] = false, true
	p, err := leading(t.Context(), c, r, newProgress(&out))
	if err != nil || p != c.engines[1] || !r.LeaderMovedBeforeKill || c.leaderAPI != addrs[1] {
		t.Fatalf("after the term moved: %v, %v, moved %v, leader %s; want engine2, moved, at %s", p, err, r.LeaderMovedBeforeKill, c.leaderAPI, addrs[1])
	}
	if s := out.String(); !strings.Contains(s, "a term ended on its own") || !strings.Contains(s, "lost leadership, says engine1") {
		t.Errorf("the bench said:\n%s\nwant the move named and the engines' logs", s)
	}
}
