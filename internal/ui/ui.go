// Package ui is Flotilla's web dashboard: a few static files (plain HTML,
// CSS and JavaScript, no build step) embedded in the binary and served by
// every daemon under /ui/. The page reads the same-origin API: /v1/state
// (paged and filtered on the server, with ETags), /v1/events (Server-Sent
// Events) for live updates, /v1/machines, /v1/units/{name} and its journal.
// See docs/dashboard.md.
package ui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

// Prefix is the path the dashboard is served under.
const Prefix = "/ui/"

//go:embed static
var static embed.FS

// contentSecurityPolicy allows the page only its own files and its own
// origin's API: no inline script, no third-party anything.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

type file struct {
	body        []byte
	contentType string
	etag        string // strong, of the body
	version     string // short hash, the ?v= of the index's links
}

type handler struct {
	files map[string]*file // by name under static/
}

var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

// Handler serves the dashboard under Prefix: GET /ui/ is the page; its
// scripts and styles are linked with a version hash and cached for good;
// the page itself is revalidated (ETag) on every load, so an upgraded
// daemon serves its new files at once.
func Handler() http.Handler {
	h := &handler{files: map[string]*file{}}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		ct, ok := contentTypes[path.Ext(p)]
		if !ok {
			ct = "application/octet-stream"
		}
		h.files[strings.TrimPrefix(p, "static/")] = newFile(b, ct)
		return nil
	})
	if err != nil {
		panic("ui: reading embedded files: " + err.Error()) // cannot happen: they are compiled in
	}
	// The index links every asset as NAME?v=HASH, so a browser never runs a
	// stale script against a newer daemon.
	idx := h.files["index.html"]
	body := idx.body
	for name, f := range h.files {
		body = bytes.ReplaceAll(body, []byte(`"`+name+`"`), []byte(`"`+name+"?v="+f.version+`"`))
	}
	h.files["index.html"] = newFile(body, idx.contentType)
	return h
}

func newFile(b []byte, contentType string) *file {
	sum := sha256.Sum256(b)
	v := hex.EncodeToString(sum[:8])
	return &file{body: b, contentType: contentType, etag: `"` + v + `"`, version: v}
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, Prefix)
	if !ok {
		http.NotFound(w, r)
		return
	}
	if name == "" {
		name = "index.html"
	}
	f := h.files[name]
	if f == nil {
		http.NotFound(w, r)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", f.contentType)
	hd.Set("ETag", f.etag)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	switch {
	case name == "index.html":
		hd.Set("Content-Security-Policy", contentSecurityPolicy)
		hd.Set("Cache-Control", "no-cache")
	case r.URL.Query().Get("v") == f.version:
		hd.Set("Cache-Control", "public, max-age=31536000, immutable")
	default:
		hd.Set("Cache-Control", "no-cache")
	}
	// ServeContent answers If-None-Match (304), Range and HEAD.
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(f.body))
}
