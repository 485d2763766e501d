package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/api"
	"github.com/flotilla/flotilla/internal/auth"
)

// aclCluster is a cluster with tokens on, bootstrapped: it returns the
// admin's secret and a function making tokens.
func aclCluster(t *testing.T, opts ...func(*api.Config)) (c *cluster, admin string, mk func(body string) apiv1.NewToken) {
	t.Helper()
	var tokens *auth.Tokens
	c = start(t, func(cfg *api.Config, cli *clientv3.Client) {
		tokens = auth.NewTokens(cli, "/flotilla/", nil)
		cfg.Tokens = tokens
		for _, o := range opts {
			o(cfg)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go tokens.Run(ctx)
	_, b := c.do(t, "POST", "/v1/acl/bootstrap", "{}")
	var nt apiv1.NewToken
	json.Unmarshal([]byte(b), &nt)
	admin = nt.Secret
	mk = func(body string) apiv1.NewToken {
		t.Helper()
		resp, b := c.do(t, "POST", "/v1/acl/tokens", body, "Authorization", "Bearer "+admin)
		var nt apiv1.NewToken
		json.Unmarshal([]byte(b), &nt)
		if resp.StatusCode != 200 || nt.Secret == "" {
			t.Fatalf("create token %s = %d %s", body, resp.StatusCode, b)
		}
		return nt
	}
	return c, admin, mk
}

// openEvents opens GET /v1/events with secret; on 200 it returns a channel
// closed when the stream ends, otherwise the answer's status and body.
func openEvents(t *testing.T, c *cluster, secret string) (ended <-chan struct{}, code int, msg string) {
	t.Helper()
	req, _ := http.NewRequest("GET", c.url+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, resp.StatusCode, string(b)
	}
	done := make(chan struct{})
	go func() { defer close(done); io.Copy(io.Discard, resp.Body); resp.Body.Close() }()
	t.Cleanup(func() { resp.Body.Close() })
	return done, 200, ""
}

func waitEnded(t *testing.T, what string, ch <-chan struct{}, within time.Duration) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(within):
		t.Errorf("%s: the stream did not end within %v", what, within)
	}
}

// TestStreamsPerToken (issue 23, findings 6 and 9): event streams are
// bounded per token and per daemon with 429 naming the limit; revoking a
// token ends its open streams at once; a token made with a ttl is refused
// once it expires, and its streams end then.
func TestStreamsPerToken(t *testing.T) {
	c, admin, mk := aclCluster(t, func(cfg *api.Config) { cfg.EventStreams, cfg.EventStreamsPerToken = 4, 2 })
	a, b := mk(`{"role":"read","name":"a"}`), mk(`{"role":"read","name":"b"}`)
	var aStreams []<-chan struct{}
	for range 2 {
		ended, code, msg := openEvents(t, c, a.Secret)
		if code != 200 {
			t.Fatalf("stream of a = %d %s", code, msg)
		}
		aStreams = append(aStreams, ended)
	}
	if _, code, msg := openEvents(t, c, a.Secret); code != 429 || !strings.Contains(msg, "2 event streams open on this daemon, the limit per token") {
		t.Errorf("a's third stream = %d %s, want 429 naming the limit per token", code, msg)
	}
	bEnded, code, msg := openEvents(t, c, b.Secret)
	if code != 200 {
		t.Fatalf("b's stream beside a's = %d %s, want 200: the limit is per token", code, msg)
	}
	if _, code, _ := openEvents(t, c, b.Secret); code != 200 {
		t.Fatalf("b's second stream = %d", code)
	}
	if _, code, msg := openEvents(t, c, admin); code != 429 || !strings.Contains(msg, "already serves 4 event streams, its limit") {
		t.Errorf("a fifth stream = %d %s, want 429 naming the daemon's limit", code, msg)
	}

	// Revoking a ends both its streams at once; b's goes on.
	if resp, body := c.do(t, "DELETE", "/v1/acl/tokens/"+a.ID, "", "Authorization", "Bearer "+admin); resp.StatusCode != 200 {
		t.Fatalf("revoke a = %d %s", resp.StatusCode, body)
	}
	for _, ended := range aStreams {
		waitEnded(t, "a revoked", ended, 5*time.Second)
	}
	select {
	case <-bEnded:
		t.Error("b's stream ended when a was revoked")
	default:
	}

	// A token with a ttl: refused once expired, and its stream ends then.
	if resp, body := c.do(t, "POST", "/v1/acl/tokens", `{"role":"read","ttl":"-1h"}`, "Authorization", "Bearer "+admin); resp.StatusCode != 400 || !strings.Contains(body, "ttl") {
		t.Errorf("a token with ttl -1h = %d %s, want 400 naming the ttl", resp.StatusCode, body)
	}
	short := mk(`{"role":"read","name":"short","ttl":"2s"}`)
	if short.Expires == "" {
		t.Errorf("a token made with a ttl shows no expiry: %+v", short)
	}
	if resp, body := c.do(t, "GET", "/v1/acl/tokens", "", "Authorization", "Bearer "+admin); !strings.Contains(body, `"expires":"`+short.Expires+`"`) {
		t.Errorf("token list = %d %s, want %s's expiry", resp.StatusCode, body, short.ID)
	}
	sEnded, code, msg := openEvents(t, c, short.Secret) // a's two slots are free again
	if code != 200 {
		t.Fatalf("the short token's stream = %d %s", code, msg)
	}
	waitEnded(t, "the token expired", sEnded, 10*time.Second)
	if resp, body := c.do(t, "GET", "/v1/units", "", "Authorization", "Bearer "+short.Secret); resp.StatusCode != 401 || !strings.Contains(body, "expired") {
		t.Errorf("an expired token: GET /v1/units = %d %s, want 401 saying it expired", resp.StatusCode, body)
	}
}

// TestWriteRate: a token's writes beyond its bucket are answered 429 with
// Retry-After naming the limit; another token's writes and the token's
// reads go on.
func TestWriteRate(t *testing.T) {
	c, _, mk := aclCluster(t, func(cfg *api.Config) { cfg.WriteRate, cfg.WriteBurst = 0.5, 3 })
	a, b := mk(`{"role":"write","name":"a","runAs":["*"]}`), mk(`{"role":"write","name":"b","runAs":["*"]}`)
	stop := `{"desiredState":"inactive"}`
	unitBody := batch(apiv1.UnitChange{Name: "r.service", File: okUnit})
	if resp, body := c.do(t, "POST", "/v1/batch", unitBody, "Authorization", "Bearer "+b.Secret); resp.StatusCode != 200 {
		t.Fatalf("b's batch = %d %s", resp.StatusCode, body)
	}
	for i := range 3 {
		if resp, body := c.do(t, "PUT", "/v1/units/r.service", stop, "Authorization", "Bearer "+a.Secret); resp.StatusCode != 200 {
			t.Fatalf("a's write %d of a burst of 3 = %d %s", i+1, resp.StatusCode, body)
		}
	}
	resp, body := c.do(t, "PUT", "/v1/units/r.service", stop, "Authorization", "Bearer "+a.Secret)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "2" || !strings.Contains(body, "limit of 0.5 writes a second (bursts of 3") {
		t.Errorf("a's fourth write = %d Retry-After %q %s, want 429 after 2 s naming the limit", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if resp, body := c.do(t, "GET", "/v1/units", "", "Authorization", "Bearer "+a.Secret); resp.StatusCode != 200 {
		t.Errorf("a's read over its write rate = %d %s, want 200", resp.StatusCode, body)
	}
	if resp, body := c.do(t, "PUT", "/v1/units/r.service", stop, "Authorization", "Bearer "+b.Secret); resp.StatusCode != 200 {
		t.Errorf("b's write while a is over its rate = %d %s, want 200", resp.StatusCode, body)
	}
}
