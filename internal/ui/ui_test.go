package ui

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, target string, hdr ...string) *http.Response {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

func body(t *testing.T, res *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestIndex(t *testing.T) {
	h := Handler()
	for _, path := range []string{"/ui/", "/ui/index.html"} {
		res := get(t, h, path)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, res.Status)
		}
		if ct := res.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
			t.Errorf("GET %s: Content-Type %q", path, ct)
		}
		if cc := res.Header.Get("Cache-Control"); cc != "no-cache" {
			t.Errorf("GET %s: Cache-Control %q, want no-cache (the page links versioned assets)", path, cc)
		}
		csp := res.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
		b := body(t, res)
		if !strings.Contains(b, "<title>Flotilla</title>") {
			t.Errorf("GET %s: not the dashboard page:\n%s", path, b)
		}
		// Every asset is linked with its version, so it can be cached for good.
		for _, name := range []string{"app.js", "style.css", "logo.svg"} {
			if !regexp.MustCompile(`"` + regexp.QuoteMeta(name) + `\?v=[0-9a-f]{16}"`).MatchString(b) {
				t.Errorf("GET %s: %s is not linked with ?v=HASH:\n%s", path, name, b)
			}
		}
	}
}

func TestAssets(t *testing.T) {
	h := Handler().(*handler)
	for name, want := range map[string]string{
		"app.js":    "text/javascript; charset=utf-8",
		"style.css": "text/css; charset=utf-8",
		"logo.svg":  "image/svg+xml",
	} {
		res := get(t, h, "/ui/"+name)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", name, res.Status)
		}
		if ct := res.Header.Get("Content-Type"); ct != want {
			t.Errorf("GET %s: Content-Type %q, want %q", name, ct, want)
		}
		if res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no X-Content-Type-Options: nosniff", name)
		}
		if cc := res.Header.Get("Cache-Control"); cc != "no-cache" {
			t.Errorf("GET %s without ?v: Cache-Control %q, want no-cache", name, cc)
		}
		if b := body(t, res); len(b) == 0 {
			t.Errorf("GET %s: empty", name)
		}

		f := h.files[name]
		res = get(t, h, "/ui/"+name+"?v="+f.version)
		if cc := res.Header.Get("Cache-Control"); !strings.Contains(cc, "immutable") {
			t.Errorf("GET %s?v=%s: Cache-Control %q, want immutable", name, f.version, cc)
		}
		res = get(t, h, "/ui/"+name+"?v=0000000000000000")
		if cc := res.Header.Get("Cache-Control"); cc != "no-cache" {
			t.Errorf("GET %s with another version: Cache-Control %q, want no-cache", name, cc)
		}

		etag := res.Header.Get("ETag")
		if etag == "" {
			t.Fatalf("GET %s: no ETag", name)
		}
		if res := get(t, h, "/ui/"+name, "If-None-Match", etag); res.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with If-None-Match: %s, want 304", name, res.Status)
		}
	}
}

func TestNotFound(t *testing.T) {
	h := Handler()
	for _, path := range []string{"/ui/nope.js", "/ui/static/app.js", "/ui/../ui.go", "/ui/app.js/", "/other"} {
		if res := get(t, h, path); res.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %s, want 404", path, res.Status)
		}
	}
	r := httptest.NewRequest(http.MethodPost, "/ui/", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /ui/: %d, want 405", w.Code)
	}
}

func TestHead(t *testing.T) {
	r := httptest.NewRequest(http.MethodHead, "/ui/app.js", nil)
	w := httptest.NewRecorder()
	Handler().ServeHTTP(w, r)
	if w.Code != http.StatusOK || w.Body.Len() != 0 || w.Header().Get("Content-Length") == "" {
		t.Errorf("HEAD /ui/app.js: %d, %d body bytes, Content-Length %q", w.Code, w.Body.Len(), w.Header().Get("Content-Length"))
	}
}

// TestNoInlineMarkup keeps the page within its Content-Security-Policy:
// no inline scripts, handlers or styles, and nothing from other origins.
func TestNoInlineMarkup(t *testing.T) {
	h := Handler().(*handler)
	idx := string(h.files["index.html"].body)
	for _, bad := range []string{"<script>", " onclick=", " onload=", " style=", "http://", "https://"} {
		if strings.Contains(idx, bad) {
			t.Errorf("index.html contains %q", bad)
		}
	}
	js := string(h.files["app.js"].body)
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
		if strings.Contains(js, bad) {
			t.Errorf("app.js uses %s: build elements with h() and textContent", bad)
		}
	}
}

// TestHealthShown: the dashboard shows each unit's health beside its
// state wherever it shows the state (the units list, kept current by the
// state events; the unit page; its machines), from the API's health
// fields, and styles it.
func TestHealthShown(t *testing.T) {
	h := Handler().(*handler)
	js := string(h.files["app.js"].body)
	for _, want := range []string{
		"healthBadge(u.health)",     // the units list, from /v1/state
		"health: ev.health || ''",   // patched by state events
		"u.sub, u.health, u.reason", // a change of health redraws the row
		"health: s.health",          // the unit page's badge, from its state
		"healthBadge(st.health)",
		"healthBadge(s.health)", // its machines, from /v1/unit-states
		"['Health', s.health",
		"healthy: 'ok', unhealthy: 'bad', unknown: 'busy'",
	} {
		if !strings.Contains(js, want) {
			t.Errorf("app.js lacks %q", want)
		}
	}
	if css := string(h.files["style.css"].body); !strings.Contains(css, ".badge.health") {
		t.Error("style.css does not style the health badge")
	}
}
