package api

import (
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/auth"
	"github.com/flotilla/flotilla/internal/fleetapi"
)

// guard refuses what a web page could forge and, with tokens on, what the
// caller's token does not allow, before h sees the request. In order:
//
//  1. a Host that is not this API's own (an IP address, localhost, or one
//     of Config.ServerNames): 403, so a page on a name that an attacker
//     rebinds to this address (DNS rebinding) gets nothing. A connection
//     over a unix socket (--api-socket) is local, out of a browser's reach,
//     and may name any Host (fleetctl sends the socket's file name);
//  2. an Origin that is not this API's own (scheme://Host): 403, so no
//     other site's page can make the daemon act, even with a request a
//     browser sends without asking (a form or text/plain POST);
//  3. a write (POST, PUT, PATCH) whose body is not application/json: 415.
//     PATCH /fleet/v1/machines may come with no Content-Type header at
//     all, as fleet took it and its own tests send it (fleetBareWrite): a
//     page cannot send one cross-site, as a PATCH is always preflighted
//     and CORS is never granted;
//  4. with tokens on (--acl): no token or an unknown one, 401; a token whose
//     role is below what the request needs (auth.Required), 403. A read of
//     this machine's own units (/v1/local/...) needs no token from a peer
//     holding a server certificate: the leader forwards people's reads
//     with its own identity, never their tokens. A machine that only runs
//     units has no tokens to check: it lets through what it forwards to the
//     leader, which checks them, and serves its own reads to servers only.
//     A machine enrols itself (POST /v1/machines/{id}/enroll, else an
//     admin's) with its own certificate alone: the certificate names it.
func (s *server) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !overUnixSocket(r) && !s.ownHost(r.Host) {
			refuse(w, r, http.StatusForbidden, "forbidden", fmt.Sprintf("Host %q is not an address of this API: call it by IP address, localhost or a name its certificate covers", r.Host))
			return
		}
		if o := r.Header.Get("Origin"); o != "" && !sameOrigin(r, o) {
			refuse(w, r, http.StatusForbidden, "forbidden", fmt.Sprintf("Origin %q is not this API's own: cross-site requests are refused", o))
			return
		}
		switch r.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch:
			if fleetBareWrite(r) {
				break
			}
			if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
				refuse(w, r, http.StatusUnsupportedMediaType, "unsupported_media_type", fmt.Sprintf("%s %s needs a JSON body with Content-Type: application/json, got %q", r.Method, r.URL.Path, r.Header.Get("Content-Type")))
				return
			}
		}
		if s.cfg.ACL {
			var ok bool
			if r, ok = s.allowed(w, r); !ok {
				return
			}
			if tok, ok := auth.FromContext(r.Context()); ok && s.rateLimited(w, r, tok.ID, tok.Label()) {
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// fleetBareWrite reports whether r is PATCH /fleet/v1/machines with no
// Content-Type header at all, which fleet accepted (it checked the type of
// PUT /fleet/v1/units alone) and its functional tests send. A web page
// cannot send a PATCH to another origin without a preflight, which is
// never granted.
func fleetBareWrite(r *http.Request) bool {
	_, typed := r.Header["Content-Type"]
	return !typed && r.Method == http.MethodPatch && r.URL.Path == fleetapi.Prefix+"/machines"
}

// allowed checks the request's token against the role it needs and
// returns the request carrying the token (auth.FromContext); on refusal it
// has written the answer.
func (s *server) allowed(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	need := auth.Required(r.Method, r.URL.Path)
	if need == auth.RoleNone || r.URL.Path == "/metrics" && s.cfg.MetricsPublic {
		return r, true
	}
	if ownEnrolment(r) {
		return r, true
	}
	local := strings.HasPrefix(r.URL.Path, "/v1/local/") || r.URL.Path == "/metrics"
	if local && need == auth.RoleRead && auth.PeerKind(r.TLS) == auth.KindServer {
		return r, true
	}
	if s.cfg.Tokens == nil {
		if !local {
			return r, true // forwarded to the leader, which checks the token
		}
		refuse(w, r, http.StatusForbidden, "forbidden", fmt.Sprintf("machine %s only runs units and cannot check API tokens: %s %s is for the cluster's servers; ask a server's API (or run this daemon with --metrics-public for /metrics)", s.cfg.Machine, r.Method, r.URL.Path))
		return r, false
	}
	secret := bearer(r)
	tok, err := s.cfg.Tokens.Lookup(r.Context(), secret)
	switch {
	case errors.Is(err, auth.ErrNoToken):
		w.Header().Set("WWW-Authenticate", `Bearer realm="flotilla"`)
		refuse(w, r, http.StatusUnauthorized, "unauthorized", fmt.Sprintf("%s %s needs an API token with role %s or more: give --token or $FLOTILLA_TOKEN (header Authorization: Bearer TOKEN)", r.Method, r.URL.Path, need))
		return r, false
	case errors.Is(err, auth.ErrUnknownToken):
		w.Header().Set("WWW-Authenticate", `Bearer realm="flotilla", error="invalid_token"`)
		refuse(w, r, http.StatusUnauthorized, "unauthorized", "the API token is unknown to this cluster (mistyped or revoked)")
		return r, false
	case errors.Is(err, auth.ErrExpiredToken):
		noteToken(r, tok)
		w.Header().Set("WWW-Authenticate", `Bearer realm="flotilla", error="invalid_token"`)
		refuse(w, r, http.StatusUnauthorized, "unauthorized", "the API token "+strings.TrimPrefix(err.Error(), auth.ErrExpiredToken.Error()+": token ")+": ask an admin for a new one")
		return r, false
	case err != nil:
		refuse(w, r, http.StatusServiceUnavailable, "unavailable", "checking the API token: "+err.Error())
		return r, false
	}
	noteToken(r, tok)
	role, err := auth.ParseRole(tok.Role)
	if err != nil || role < need {
		refuse(w, r, http.StatusForbidden, "forbidden", fmt.Sprintf("token %s has role %s, but %s %s needs role %s", tok.Label(), tok.Role, r.Method, r.URL.Path, need))
		return r, false
	}
	return r.WithContext(auth.NewContext(r.Context(), tok)), true
}

// ownEnrolment reports whether r is POST /v1/machines/{id}/enroll made
// with machine id's own certificate (an agent's or a server's): a machine
// may enrol itself, as its certificate already names it.
func ownEnrolment(r *http.Request) bool {
	id, ok := strings.CutPrefix(r.URL.Path, "/v1/machines/")
	if id, ok = strings.CutSuffix(id, "/enroll"); !ok || r.Method != http.MethodPost || strings.Contains(id, "/") {
		return false
	}
	if auth.PeerKind(r.TLS) < auth.KindAgent {
		return false
	}
	return r.TLS.VerifiedChains[0][0].Subject.CommonName == id
}

// bearer returns the request's token: "Authorization: Bearer TOKEN", or for
// GET /v1/events alone (a browser's EventSource cannot set headers) ?token=.
func bearer(r *http.Request) string {
	if a := r.Header.Get("Authorization"); a != "" {
		if scheme, tok, ok := strings.Cut(a, " "); ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
		return ""
	}
	if r.Method == http.MethodGet && r.URL.Path == "/v1/events" {
		return r.URL.Query().Get("token")
	}
	return ""
}

// overUnixSocket reports whether r came over a unix socket.
func overUnixSocket(r *http.Request) bool {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return ok && a.Network() == "unix"
}

// ownHost reports whether a request's Host names this API: an IP address
// (a page cannot rebind those), localhost, or a configured name.
func (s *server) ownHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" {
		return false
	}
	if net.ParseIP(strings.Trim(host, "[]")) != nil || host == "localhost" {
		return true
	}
	for _, n := range s.cfg.ServerNames {
		if strings.EqualFold(n, host) {
			return true
		}
	}
	return false
}

// sameOrigin reports whether origin is the request's own: scheme://Host.
func sameOrigin(r *http.Request, origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false // "null" and other opaque origins are foreign
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return u.Scheme == scheme && strings.EqualFold(u.Host, r.Host)
}

// ACL endpoints: served by any daemon straight from etcd.

func (s *server) aclOn(w http.ResponseWriter) bool {
	if s.cfg.Tokens == nil {
		writeError(w, http.StatusBadRequest, "acl_disabled", "API tokens are off: start every daemon with --acl to use them")
		return false
	}
	return true
}

func (s *server) aclBootstrap(w http.ResponseWriter, r *http.Request) {
	if !s.aclOn(w) {
		return
	}
	var empty struct{}
	if !s.decode(w, r, &empty) {
		return
	}
	tok, secret, err := s.cfg.Tokens.Bootstrap(r.Context())
	if err != nil {
		s.aclError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, newToken(tok, secret))
}

func (s *server) createToken(w http.ResponseWriter, r *http.Request) {
	if !s.aclOn(w) {
		return
	}
	var req apiv1.TokenRequest
	if !s.decode(w, r, &req) {
		return
	}
	role, err := auth.ParseRole(req.Role)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	var ttl time.Duration
	if req.TTL != "" {
		if ttl, err = time.ParseDuration(req.TTL); err != nil || ttl <= 0 {
			writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("ttl %q is not a positive duration such as 720h", req.TTL))
			return
		}
	}
	tok, secret, err := s.cfg.Tokens.Create(r.Context(), req.Name, role, req.RunAs, auth.WithTTL(ttl))
	if err != nil {
		s.aclError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, newToken(tok, secret))
}

func (s *server) listTokens(w http.ResponseWriter, r *http.Request) {
	if !s.aclOn(w) {
		return
	}
	ts, err := s.cfg.Tokens.List(r.Context())
	if err != nil {
		s.aclError(w, err)
		return
	}
	out := apiv1.TokenList{Tokens: []apiv1.Token{}}
	for _, t := range ts {
		out.Tokens = append(out.Tokens, tokenJSON(t))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *server) revokeToken(w http.ResponseWriter, r *http.Request) {
	if !s.aclOn(w) {
		return
	}
	tok, err := s.cfg.Tokens.Revoke(r.Context(), r.PathValue("id"))
	if err != nil {
		s.aclError(w, err)
		return
	}
	if s.writes != nil {
		s.writes.forget(tok.ID)
	}
	writeJSON(w, http.StatusOK, tokenJSON(tok))
}

func (s *server) aclError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, auth.ErrBootstrapped):
		writeError(w, http.StatusConflict, "conflict", "the ACL is already bootstrapped: ask an admin for a token (flotilla token create)")
	case errors.Is(err, auth.ErrTokenNotFound):
		writeError(w, http.StatusNotFound, "not_found", err.Error())
	case errors.Is(err, auth.ErrInvalidTokenArg):
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
	default:
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error())
	}
}

func tokenJSON(t auth.Token) apiv1.Token {
	out := apiv1.Token{ID: t.ID, Name: t.Name, Role: t.Role, Created: t.Created.UTC().Format(time.RFC3339), RunAs: t.RunAs}
	if !t.Expires.IsZero() {
		out.Expires = t.Expires.UTC().Format(time.RFC3339)
	}
	return out
}

func newToken(t auth.Token, secret string) apiv1.NewToken {
	return apiv1.NewToken{Token: tokenJSON(t), Secret: secret}
}
