package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/audit"
	"github.com/flotilla/flotilla/internal/auth"
	"github.com/flotilla/flotilla/internal/engine"
	"github.com/flotilla/flotilla/internal/fleetapi"
)

// auditNote collects, while a request is served, what its audit record
// names: the token (guard) and the units (apply).
type auditNote struct {
	token *auth.Token
	units []string
	more  int
}

type auditKey struct{}

func noteOf(r *http.Request) *auditNote {
	n, _ := r.Context().Value(auditKey{}).(*auditNote)
	return n
}

// noteToken records the request's token for its audit record.
func noteToken(r *http.Request, t auth.Token) {
	if n := noteOf(r); n != nil {
		n.token = &t
	}
}

// noteUnits records the units a write changes for its audit record.
func noteUnits(r *http.Request, changes []engine.Change) {
	n := noteOf(r)
	if n == nil {
		return
	}
	for _, c := range changes {
		if len(n.units) == audit.MaxUnits {
			n.more++
			continue
		}
		name := c.Name
		if c.Range != nil {
			name = rangeName(c)
		}
		n.units = append(n.units, name)
	}
}

// audited records every write (every request but GET and HEAD) and every
// refused request (401, 403, 415, 429) h serves in the audit log.
func (s *server) audited(h http.Handler) http.Handler {
	if s.cfg.Audit == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		note := &auditNote{}
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), auditKey{}, note)))
		write := r.Method != http.MethodGet && r.Method != http.MethodHead
		refused := false
		switch sw.status {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusUnsupportedMediaType, http.StatusTooManyRequests:
			refused = true
		}
		if !write && !refused {
			return
		}
		rec := audit.Record{Remote: r.RemoteAddr, Forwarded: r.Header.Get(forwardedHeader), Method: r.Method, Route: r.URL.Path,
			Units: note.units, More: note.more, Status: sw.status}
		if sw.status == 0 {
			rec.Status = http.StatusOK
		}
		if t := note.token; t != nil {
			rec.TokenID, rec.TokenName = t.ID, t.Name
		}
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			rec.Cert = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		if len(rec.Units) == 0 {
			// A write the handler did not reach, or fleet's API: the unit
			// of the path, if it names one.
			for _, p := range []string{"/v1/units/", fleetapi.Prefix + "/units/"} {
				if name, ok := strings.CutPrefix(r.URL.Path, p); ok && name != "" && !strings.Contains(name, "/") {
					rec.Units = []string{name}
				}
			}
		}
		switch {
		case refused:
			rec.Outcome = "refused"
		case rec.Status >= 400:
			rec.Outcome = "failed"
		default:
			rec.Outcome = "ok"
		}
		if rec.Status >= 400 {
			var e apiv1.Error
			if json.Unmarshal(sw.body, &e) == nil {
				rec.Error = e.Error
			}
		}
		if err := s.cfg.Audit.Record(rec); err != nil {
			s.log.Error("writing the audit log", "err", err)
		}
	})
}

// statusWriter keeps the status of an answer and, for an error, the start
// of its body.
type statusWriter struct {
	http.ResponseWriter
	status int
	body   []byte
}

func (sw *statusWriter) WriteHeader(code int) {
	if sw.status == 0 {
		sw.status = code
	}
	sw.ResponseWriter.WriteHeader(code)
}

func (sw *statusWriter) Write(b []byte) (int, error) {
	if sw.status == 0 {
		sw.status = http.StatusOK
	}
	if sw.status >= 400 && len(sw.body) < 2048 {
		sw.body = append(sw.body, b[:min(len(b), 2048-len(sw.body))]...)
	}
	return sw.ResponseWriter.Write(b)
}

func (sw *statusWriter) Flush() {
	if f, ok := sw.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (sw *statusWriter) Unwrap() http.ResponseWriter { return sw.ResponseWriter }
