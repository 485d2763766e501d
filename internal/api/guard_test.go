package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/api"
	"github.com/flotilla/flotilla/internal/auth"
)

// TestDriveBy: what a web page can make a browser send is refused and
// starts nothing, while the API's own clients keep working.
func TestDriveBy(t *testing.T) {
	c := start(t)
	body := batch(apiv1.UnitChange{Name: "pwn.service", File: "[Service]\nExecStart=/usr/bin/id\n", DesiredState: "launched"})
	for _, tc := range []struct {
		name string
		hdr  []string
		code int
	}{
		// A "simple" request: browsers send it cross-site without asking first.
		{"cross-site text/plain", []string{"Content-Type", "text/plain", "Origin", "http://evil.example"}, 403},
		{"text/plain without Origin", []string{"Content-Type", "text/plain"}, 415},
		{"form post", []string{"Content-Type", "application/x-www-form-urlencoded"}, 415},
		{"no content type", []string{"Content-Type", ""}, 415},
		{"cross-site JSON", []string{"Origin", "http://evil.example"}, 403},
		{"opaque origin", []string{"Origin", "null"}, 403},
		{"same host, other scheme", []string{"Origin", "https://" + c.url[len("http://"):]}, 403},
		// DNS rebinding: the page's own name, resolved to the daemon's address.
		{"rebound host", []string{"Host", "evil.example:7480"}, 403},
		{"rebound host and origin", []string{"Host", "evil.example:7480", "Origin", "http://evil.example:7480"}, 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := c.do(t, "POST", "/v1/batch", body, tc.hdr...)
			if resp.StatusCode != tc.code {
				t.Errorf("POST /v1/batch = %d %s, want %d", resp.StatusCode, b, tc.code)
			}
		})
	}
	if us, _ := c.eng.Units(nil); len(us) != 0 {
		t.Fatalf("refused requests made units: %v", us)
	}
	// A read from a rebound name gets nothing either.
	if resp, b := c.do(t, "GET", "/v1/units", "", "Host", "evil.example"); resp.StatusCode != 403 {
		t.Errorf("GET /v1/units with Host evil.example = %d %s, want 403", resp.StatusCode, b)
	}
	// The dashboard (same origin) and the CLI (no Origin) still work.
	if resp, b := c.do(t, "POST", "/v1/batch", body, "Origin", c.url); resp.StatusCode != 200 {
		t.Errorf("same-origin POST /v1/batch = %d %s, want 200", resp.StatusCode, b)
	}
	if resp, b := c.do(t, "GET", "/v1/units", "", "Host", "localhost"); resp.StatusCode != 200 {
		t.Errorf("GET /v1/units with Host localhost = %d %s, want 200", resp.StatusCode, b)
	}
}

// TestTokens: with tokens on, no token or an unknown one gets 401, a role
// too small 403, each with a message saying which; each role can do its
// own part.
func TestTokens(t *testing.T) {
	var tokens *auth.Tokens
	c := start(t, func(cfg *api.Config, cli *clientv3.Client) {
		tokens = auth.NewTokens(cli, "/flotilla/", nil)
		cfg.Tokens = tokens
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go tokens.Run(ctx)

	// The dashboard's files need no token; everything else does.
	if resp, b := c.do(t, "GET", "/ui/", ""); resp.StatusCode != 200 {
		t.Errorf("GET /ui/ = %d %s", resp.StatusCode, b)
	}
	resp, b := c.do(t, "POST", "/v1/acl/bootstrap", "{}")
	if resp.StatusCode != 200 {
		t.Fatalf("bootstrap = %d %s", resp.StatusCode, b)
	}
	var admin apiv1.NewToken
	json.Unmarshal([]byte(b), &admin)
	if admin.Role != "admin" || admin.Secret == "" {
		t.Fatalf("bootstrap answered %s", b)
	}
	if resp, b := c.do(t, "POST", "/v1/acl/bootstrap", "{}"); resp.StatusCode != 409 {
		t.Errorf("second bootstrap = %d %s, want 409", resp.StatusCode, b)
	}
	secrets := map[string]string{"admin": admin.Secret}
	for _, role := range []string{"read", "write"} {
		req := `{"role":"` + role + `","name":"` + role + `er"}`
		if role == "write" {
			req = `{"role":"write","name":"writer","runAs":["nobody"]}`
		}
		resp, b := c.do(t, "POST", "/v1/acl/tokens", req, "Authorization", "Bearer "+admin.Secret)
		var nt apiv1.NewToken
		json.Unmarshal([]byte(b), &nt)
		if resp.StatusCode != 200 || nt.Role != role {
			t.Fatalf("create %s token = %d %s", role, resp.StatusCode, b)
		}
		secrets[role] = nt.Secret
	}
	unit := batch(apiv1.UnitChange{Name: "a.service", File: okUnit + "User=nobody\n", DesiredState: "loaded"})
	for _, tc := range []struct {
		token, method, path, body string
		code                      int
		msg                       string
	}{
		{"", "GET", "/v1/units", "", 401, "needs an API token"},
		{"flt_wrong", "GET", "/v1/units", "", 401, "unknown"},
		{"", "GET", "/metrics", "", 401, "needs an API token"},
		{"read", "GET", "/v1/units", "", 200, ""},
		{"read", "GET", "/v1/state", "", 200, ""},
		{"read", "GET", "/metrics", "", 200, ""},
		{"read", "POST", "/v1/batch", unit, 403, "role read, but POST /v1/batch needs role write"},
		{"write", "POST", "/v1/batch", unit, 200, ""},
		{"write", "PUT", "/v1/scheduler", `{"placement":"binpack"}`, 403, "needs role admin"},
		{"write", "GET", "/v1/acl/tokens", "", 403, "needs role admin"},
		{"admin", "PUT", "/v1/scheduler", `{"placement":"binpack"}`, 200, ""},
		{"admin", "GET", "/v1/acl/tokens", "", 200, ""},
	} {
		hdr := []string{}
		if s, ok := secrets[tc.token]; ok {
			hdr = []string{"Authorization", "Bearer " + s}
		} else if tc.token != "" {
			hdr = []string{"Authorization", "Bearer " + tc.token}
		}
		resp, b := c.do(t, tc.method, tc.path, tc.body, hdr...)
		var e apiv1.Error
		json.Unmarshal([]byte(b), &e)
		if resp.StatusCode != tc.code || tc.msg != "" && !contains(e.Error, tc.msg) {
			t.Errorf("%s %s with token %q = %d %q, want %d naming %q", tc.method, tc.path, tc.token, resp.StatusCode, e.Error, tc.code, tc.msg)
		}
		if tc.code == 401 && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s %s: 401 without WWW-Authenticate", tc.method, tc.path)
		}
	}

	// A revoked token is refused at once.
	var l apiv1.TokenList
	_, b = c.do(t, "GET", "/v1/acl/tokens", "", "Authorization", "Bearer "+admin.Secret)
	json.Unmarshal([]byte(b), &l)
	if len(l.Tokens) != 3 {
		t.Fatalf("token list = %s, want 3 tokens", b)
	}
	for _, tk := range l.Tokens {
		if tk.Role == "write" {
			if resp, b := c.do(t, "DELETE", "/v1/acl/tokens/"+tk.ID, "", "Authorization", "Bearer "+admin.Secret); resp.StatusCode != 200 {
				t.Fatalf("revoke = %d %s", resp.StatusCode, b)
			}
		}
	}
	if resp, b := c.do(t, "GET", "/v1/units", "", "Authorization", "Bearer "+secrets["write"]); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("revoked token: GET /v1/units = %d %s, want 401", resp.StatusCode, b)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
