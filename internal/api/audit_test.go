package api_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/api"
	"github.com/flotilla/flotilla/internal/audit"
)

// TestAuditLog: every write and every refused request is recorded with
// the token's name and ID (never its secret), the remote address, the
// route, the units and the outcome; reads that are served are not.
func TestAuditLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	al, err := audit.Open(audit.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer al.Close()
	c, _, mk := aclCluster(t, func(cfg *api.Config) { cfg.Audit = al })
	w, r := mk(`{"role":"write","name":"deployer","runAs":["*"]}`), mk(`{"role":"read","name":"viewer"}`)
	auth := func(s string) []string { return []string{"Authorization", "Bearer " + s} }
	tmpl := batch(apiv1.UnitChange{Name: "web@.service", File: okUnit}, apiv1.UnitChange{Name: "web@{1..3}.service", DesiredState: "loaded"},
		apiv1.UnitChange{Name: "db.service", File: okUnit})
	for _, req := range []struct {
		method, path, body string
		hdr                []string
		code               int
	}{
		{"POST", "/v1/batch", tmpl, auth(w.Secret), 200},
		{"GET", "/v1/units", "", auth(r.Secret), 200},
		{"DELETE", "/v1/units/db.service", "", auth(r.Secret), 403},
		{"GET", "/v1/units", "", nil, 401},
		{"PUT", "/v1/units/ghost.service", `{"desiredState":"launched"}`, auth(w.Secret), 404},
	} {
		if resp, body := c.do(t, req.method, req.path, req.body, req.hdr...); resp.StatusCode != req.code {
			t.Fatalf("%s %s = %d %s, want %d", req.method, req.path, resp.StatusCode, body, req.code)
		}
	}
	var got []audit.Record
	if err := audit.Read(path, audit.Filter{}, func(r audit.Record) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	creates := got[:0:0]
	var rest []audit.Record
	for _, rec := range got {
		if strings.HasPrefix(rec.Route, "/v1/acl/") {
			creates = append(creates, rec)
		} else {
			rest = append(rest, rec)
		}
	}
	if len(creates) != 3 || creates[0].Route != "/v1/acl/bootstrap" || creates[1].TokenName != "bootstrap" || creates[2].Outcome != "ok" {
		t.Errorf("the bootstrap and token creations recorded: %+v", creates)
	}
	want := []struct {
		token, method, route, units string
		status                      int
		outcome, err                string
	}{
		{w.ID, "POST", "/v1/batch", "web@.service,web@{1..3}.service,db.service", 200, "ok", ""},
		{r.ID, "DELETE", "/v1/units/db.service", "db.service", 403, "refused", "needs role write"},
		{"", "GET", "/v1/units", "", 401, "refused", "needs an API token"},
		{w.ID, "PUT", "/v1/units/ghost.service", "ghost.service", 404, "failed", "ghost.service"},
	}
	if len(rest) != len(want) {
		t.Fatalf("recorded %d requests besides token creations, want %d: %+v", len(rest), len(want), rest)
	}
	for i, wr := range want {
		g := rest[i]
		if g.TokenID != wr.token || g.Method != wr.method || g.Route != wr.route || strings.Join(g.Units, ",") != wr.units ||
			g.Status != wr.status || g.Outcome != wr.outcome || !strings.Contains(g.Error, wr.err) || !strings.HasPrefix(g.Remote, "127.0.0.1:") {
			t.Errorf("record %d = %+v, want %+v", i, g, wr)
		}
	}
	if rest[0].TokenName != "deployer" {
		t.Errorf("the batch's record names token %q, want deployer", rest[0].TokenName)
	}
	b, _ := os.ReadFile(path)
	for _, secret := range []string{w.Secret, r.Secret} {
		if strings.Contains(string(b), secret) || strings.Contains(string(b), strings.TrimPrefix(secret, "flt_")) {
			t.Errorf("the audit log holds a token's secret")
		}
	}
}
