// Package api serves Flotilla's HTTP+JSON API under /v1 (see docs/api.md).
//
// Every daemon serves it. The engine leader answers from memory; any other
// daemon forwards the request to the leader's API address, found through
// the election. Journals are read on the machine that runs the unit: the
// leader forwards /v1/units/{name}/journal to that machine's
// /v1/local/journal/{name}, with its own identity (its TLS certificate), not
// the person's token: a machine is not trusted with people's tokens.
//
// A machine that only runs units (Config.AgentOnly) has no etcd, no engine
// and no tokens to check: it serves its own machine's reads
// (/v1/local/...) and /metrics, and forwards every other request to the
// leader, which checks its token.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/audit"
	"github.com/flotilla/flotilla/internal/auth"
	"github.com/flotilla/flotilla/internal/driver"
	"github.com/flotilla/flotilla/internal/election"
	"github.com/flotilla/flotilla/internal/engine"
	"github.com/flotilla/flotilla/internal/fleetapi"
	"github.com/flotilla/flotilla/internal/limits"
	"github.com/flotilla/flotilla/internal/metrics"
	"github.com/flotilla/flotilla/internal/state"
	"github.com/flotilla/flotilla/internal/ui"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/version"
)

// forwardedHeader marks a request one daemon forwarded to another, so a
// request is forwarded at most once.
const forwardedHeader = "X-Flotilla-Forwarded"

// ForwardedHeader is forwardedHeader, for the daemon's handlers around the
// API's.
const ForwardedHeader = forwardedHeader

// DefaultMaxBodyBytes bounds a request body (a batch of units); other
// requests are bounded by limits.RequestBytes.
const DefaultMaxBodyBytes = limits.BatchBytes

// Config configures the API handler.
type Config struct {
	// Machine is this daemon's machine ID.
	Machine string
	// Engine is this daemon's engine, nil when it runs none.
	Engine *engine.Engine
	// Leader returns the current leader, ok=false while there is none.
	Leader func() (election.Info, bool)
	// Driver is this machine's driver (for local journals), nil without agent.
	Driver driver.Driver
	// Durable reads the cluster's durable record from etcd, for /v1/state
	// when no leader answers; nil disables that fallback.
	Durable func(context.Context) (*state.Snapshot, error)
	// Metrics are served at /metrics; nil serves none.
	Metrics *metrics.Set
	// Version and Registry are reported by /v1/status.
	Version  string
	Registry string
	// MaxBodyBytes bounds request bodies (default DefaultMaxBodyBytes).
	MaxBodyBytes int64
	Logger       *slog.Logger

	// Tokens, when set (--acl), are the API tokens every request but the
	// dashboard's files and the ACL bootstrap must carry (see guard).
	Tokens *auth.Tokens
	// ACL says the cluster requires tokens (--acl) even where Tokens is
	// nil: on a machine that only runs units (AgentOnly), which has none to
	// check them against.
	ACL bool
	// EnrolMachine gives a machine of the etcd registry mode its etcd user
	// and role (POST /v1/machines/{id}/enroll), etcd's root role for a
	// server enrolling itself; nil where this daemon manages no etcd users
	// (no embedded etcd member, no TLS, or the grpc registry).
	EnrolMachine func(ctx context.Context, id string, server bool) error
	// AgentOnly is a machine that only runs units (daemon --servers): no
	// Engine, no Durable, no Tokens; see the package comment.
	AgentOnly bool
	// MetricsPublic serves /metrics without a token (--metrics-public).
	MetricsPublic bool
	// ServerNames are the host names, besides IP addresses and localhost,
	// that requests may name in Host (the names of the daemon's certificate).
	ServerNames []string
	// Forward is the transport of requests forwarded to the leader and to
	// the machine that holds a journal (default http.DefaultTransport), and
	// ForwardScheme their scheme: "https" when daemons speak TLS (default "http").
	Forward       http.RoundTripper
	ForwardScheme string
	// ForwardMachine, if set, is the transport of a read forwarded to the
	// machine named (a journal): one that checks the machine's certificate
	// names it and presents this daemon's own. With it, the person's token
	// is not sent along. Nil (no TLS) uses Forward, and sends the token,
	// as there is no other identity to present.
	ForwardMachine func(machine string) http.RoundTripper

	// EventStreams and EventStreamsPerToken bound the GET /v1/events
	// streams this daemon serves at once, in all and per API token
	// (defaults limits.EventStreams, limits.EventStreamsPerToken);
	// JournalFollows and JournalFollowsPerToken the journal follows
	// (limits.JournalFollows, limits.JournalFollowsPerToken). Beyond, 429.
	EventStreams, EventStreamsPerToken     int
	JournalFollows, JournalFollowsPerToken int

	// WriteRate is how many writes a second one API token may make on
	// this daemon, in bursts of up to WriteBurst (defaults
	// limits.TokenWriteRate, limits.TokenWriteBurst; a negative WriteRate
	// sets no limit). Beyond, 429 with Retry-After.
	WriteRate  float64
	WriteBurst int

	// Audit, when set (--audit-log), records every write and every
	// refused request.
	Audit *audit.Log

	// pace, when set (by tests), paces whole-state answers instead of a
	// pacer of WholeStateShare on the real clock.
	pace *pacer
}

type server struct {
	cfg   Config
	log   *slog.Logger
	proxy *httputil.ReverseProxy
	pace  *pacer // answers of /v1/state without limit= on the leader
	// writes are the tokens' write buckets (nil: no limit).
	writes *writeRates
	reach  *reach // which leaders could not be reached lately
}

// New returns the API handler.
func New(cfg Config) http.Handler {
	h, _ := build(cfg)
	return h
}

// Routes returns the patterns the handler New(cfg) serves, as registered
// with its http.ServeMux ("GET /v1/units/{name}", "/fleet/v1/"): the rows
// the authorization matrix test must have.
func Routes(cfg Config) []string {
	_, r := build(cfg)
	return r.patterns
}

// routes is a ServeMux that remembers its patterns.
type routes struct {
	*http.ServeMux
	patterns []string
}

func (r *routes) Handle(pattern string, h http.Handler) {
	r.ServeMux.Handle(pattern, h)
	r.patterns = append(r.patterns, pattern)
}

func (r *routes) HandleFunc(pattern string, h http.HandlerFunc) { r.Handle(pattern, h) }

func build(cfg Config) (http.Handler, *routes) {
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.ForwardScheme == "" {
		cfg.ForwardScheme = "http"
	}
	if cfg.Tokens != nil {
		cfg.ACL = true
	}
	if cfg.Leader == nil {
		cfg.Leader = func() (election.Info, bool) { return election.Info{}, false }
	}
	for _, d := range []struct {
		v   *int
		def int
	}{{&cfg.EventStreams, limits.EventStreams}, {&cfg.EventStreamsPerToken, limits.EventStreamsPerToken},
		{&cfg.JournalFollows, limits.JournalFollows}, {&cfg.JournalFollowsPerToken, limits.JournalFollowsPerToken}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	if cfg.pace == nil {
		cfg.pace = newPacer(WholeStateShare)
	}
	if cfg.WriteRate == 0 {
		cfg.WriteRate = limits.TokenWriteRate
	}
	if cfg.WriteBurst <= 0 {
		cfg.WriteBurst = limits.TokenWriteBurst
	}
	s := &server{cfg: cfg, log: cfg.Logger.With("component", "api"), pace: cfg.pace, reach: newReach()}
	if cfg.WriteRate > 0 {
		s.writes = newWriteRates(cfg.WriteRate, cfg.WriteBurst)
	}
	s.proxy = &httputil.ReverseProxy{
		Rewrite:       func(*httputil.ProxyRequest) {}, // set per request in forward
		FlushInterval: -1,
		Transport:     cfg.Forward,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if lu, ok := context.Cause(r.Context()).(*leaderUnreachableError); ok {
				refuse(w, r, http.StatusServiceUnavailable, lu.code(), lu.Error())
				return
			}
			refuse(w, r, http.StatusBadGateway, "unavailable", fmt.Sprintf("forwarding to %s: %v", r.URL.Host, err))
		},
	}
	if cfg.AgentOnly {
		return s.agentOnly()
	}
	mux := &routes{ServeMux: http.NewServeMux()}
	mux.HandleFunc("GET /v1/status", s.status)
	mux.HandleFunc("GET /v1/units", s.leaderOnly(s.listUnits))
	mux.HandleFunc("GET /v1/units/{name}", s.leaderOnly(s.getUnit))
	mux.HandleFunc("PUT /v1/units/{name}", s.leaderOnly(s.putUnit))
	mux.HandleFunc("DELETE /v1/units/{name}", s.leaderOnly(s.deleteUnit))
	mux.HandleFunc("POST /v1/batch", s.leaderOnly(s.batch))
	mux.HandleFunc("GET /v1/unit-states", s.leaderOnly(s.unitStates))
	mux.HandleFunc("GET /v1/units/{name}/versions", s.leaderOnly(s.versions))
	mux.HandleFunc("GET /v1/units/{name}/versions/{version}", s.leaderOnly(s.version))
	mux.HandleFunc("PUT /v1/units/{name}/versions/{version}/tag", s.leaderOnly(s.tagVersion))
	mux.HandleFunc("DELETE /v1/units/{name}/versions/{version}/tag", s.leaderOnly(s.tagVersion))
	mux.HandleFunc("POST /v1/units/{name}/revert", s.leaderOnly(s.revert))
	mux.HandleFunc("GET /v1/config/versions", s.leaderOnly(s.getVersionsConfig))
	mux.HandleFunc("PUT /v1/config/versions", s.leaderOnly(s.putVersionsConfig))
	mux.HandleFunc("POST /v1/plan", s.leaderOnly(s.plan))
	mux.HandleFunc("GET /v1/deployments", s.leaderOnly(s.deployments))
	mux.HandleFunc("GET /v1/deployments/{unit}", s.leaderOnly(s.deployment))
	mux.HandleFunc("POST /v1/deployments/{unit}/{action}", s.leaderOnly(s.controlDeployment))
	mux.HandleFunc("GET /v1/state", s.stateHandler)
	if cfg.Metrics != nil {
		mux.Handle("GET /metrics", cfg.Metrics.Handler())
	}
	events := newStreamSet("event streams", cfg.EventStreams, cfg.EventStreamsPerToken)
	mux.HandleFunc("GET /v1/events", longLived(s.limit(events, isEvents, s.leaderOnly(s.events))))
	mux.HandleFunc("GET /v1/machines", s.leaderOnly(s.machines))
	mux.HandleFunc("GET /v1/scheduler", s.leaderOnly(s.getScheduler))
	mux.HandleFunc("PUT /v1/scheduler", s.leaderOnly(s.putScheduler))
	mux.HandleFunc("PATCH /v1/machines/{id}", s.leaderOnly(s.patchMachine))
	mux.HandleFunc("POST /v1/machines/{id}/enroll", s.enrolMachine)
	follows := newStreamSet("journal follows", cfg.JournalFollows, cfg.JournalFollowsPerToken)
	mux.HandleFunc("GET /v1/units/{name}/journal", longLived(s.limit(follows, isFollow, s.leaderOnly(s.journal))))
	mux.HandleFunc("GET /v1/local/journal/{name}", longLived(s.limit(follows, isFollow, s.localJournal)))
	mux.HandleFunc("POST /v1/acl/bootstrap", s.aclBootstrap)
	mux.HandleFunc("GET /v1/acl/tokens", s.listTokens)
	mux.HandleFunc("POST /v1/acl/tokens", s.createToken)
	mux.HandleFunc("DELETE /v1/acl/tokens/{id}", s.revokeToken)
	mux.Handle("GET /ui/", ui.Handler()) // the dashboard; GET /ui redirects here
	mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))
	fleet := fleetapi.New(fleetapi.Config{Engine: cfg.Engine, MaxBodyBytes: cfg.MaxBodyBytes, Logger: cfg.Logger})
	mux.HandleFunc("GET "+fleetapi.Prefix+"/discovery", fleetapi.Discovery)
	mux.Handle(fleetapi.Prefix+"/", s.leaderOnly(fleet.ServeHTTP))
	mux.HandleFunc(fleetapi.Prefix, func(w http.ResponseWriter, r *http.Request) {
		fleetapi.WriteError(w, http.StatusMethodNotAllowed, "no method is supported against "+fleetapi.Prefix)
	})
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return s.wrap(mux.ServeMux), mux
}

// agentOnly is the handler of a machine that only runs units: its own
// machine's reads and metrics here, everything else at the leader.
func (s *server) agentOnly() (http.Handler, *routes) {
	mux := &routes{ServeMux: http.NewServeMux()}
	follows := newStreamSet("journal follows", s.cfg.JournalFollows, s.cfg.JournalFollowsPerToken)
	mux.HandleFunc("GET /v1/local/journal/{name}", longLived(s.limit(follows, isFollow, s.localJournal)))
	if s.cfg.Metrics != nil {
		mux.Handle("GET /metrics", s.cfg.Metrics.Handler())
	}
	mux.HandleFunc("/v1/local/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	mux.Handle("/", s.leaderOnly(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "machine "+s.cfg.Machine+" runs no engine")
	}))
	return s.wrap(mux.ServeMux), mux
}

// wrap puts the guard and the per-request headers around a mux.
func (s *server) wrap(mux http.Handler) http.Handler {
	cfg := s.cfg
	guarded := s.audited(s.guard(mux))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pretty := r.URL.Query()["pretty"]
		if cfg.Engine != nil {
			aw := &answerWriter{ResponseWriter: w, eng: cfg.Engine, r: r}
			w, r = aw, r.WithContext(context.WithValue(r.Context(), answerKey{}, aw))
		}
		guarded.ServeHTTP(&prettyWriter{ResponseWriter: w, pretty: pretty}, r)
	})
}

// leaderOnly serves h on the leader and forwards the request elsewhere.
func (s *server) leaderOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.readLocally(r) {
			h(w, r)
			return
		}
		if r.Header.Get(forwardedHeader) != "" {
			refuse(w, r, http.StatusServiceUnavailable, "unavailable", "leadership is changing; retry")
			return
		}
		in, ok := s.cfg.Leader()
		if !ok || in.APIAddr == "" {
			refuse(w, r, http.StatusServiceUnavailable, "unavailable", "no engine leader is elected yet; retry shortly")
			return
		}
		s.forwardToLeader(w, r, in)
	}
}

func (s *server) forward(w http.ResponseWriter, r *http.Request, addr, path string) {
	p := *s.proxy
	s.forwardWith(&p, w, r, addr, path)
}

// forwardWith forwards r to addr's path through p, a copy of s.proxy.
func (s *server) forwardWith(p *httputil.ReverseProxy, w http.ResponseWriter, r *http.Request, addr, path string) {
	target := &url.URL{Scheme: s.cfg.ForwardScheme, Host: addr}
	p.Rewrite = func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		pr.Out.URL.Path = path
		pr.Out.URL.RawPath = ""
		pr.Out.Header.Set(forwardedHeader, s.cfg.Machine)
		// guard checked the Origin against this daemon's address, which
		// the next one does not answer to.
		pr.Out.Header.Del("Origin")
	}
	p.ServeHTTP(w, r)
}

func (s *server) status(w http.ResponseWriter, r *http.Request) {
	st := apiv1.Status{Machine: s.cfg.Machine, Version: s.cfg.Version, Registry: s.cfg.Registry,
		Protocol: version.ProtocolVersion, ProtocolWindow: version.ProtocolWindow().String(), Schema: version.SchemaVersion}
	if in, ok := s.cfg.Leader(); ok {
		st.Leader, st.LeaderAPI, st.ElectionRev = in.Machine, in.APIAddr, in.Rev
	}
	if s.cfg.Engine != nil {
		if ok, rev := s.cfg.Engine.IsLeader(); ok {
			st.IsLeader, st.Leader, st.ElectionRev = true, s.cfg.Machine, rev
		}
		if err := s.cfg.Engine.Refused(); err != nil {
			st.LeadRefused = err.Error()
		}
		if prepared, units, ok := s.cfg.Engine.Standby(); ok && !st.IsLeader {
			st.Standby = &apiv1.Standby{Prepared: prepared, Units: units}
		}
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *server) listUnits(w http.ResponseWriter, r *http.Request) {
	names := r.URL.Query()["name"]
	us, err := s.cfg.Engine.Units(names)
	if err != nil {
		s.engineError(w, err)
		return
	}
	if us == nil {
		us = []apiv1.Unit{}
	}
	writeJSON(w, http.StatusOK, apiv1.UnitList{Units: us})
}

func (s *server) getUnit(w http.ResponseWriter, r *http.Request) {
	u, err := s.cfg.Engine.Unit(r.PathValue("name"))
	if err != nil {
		s.engineError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, u)
}

func (s *server) putUnit(w http.ResponseWriter, r *http.Request) {
	changes, warnings, ok := s.readPutUnit(w, r)
	if !ok || !mayRun(w, r, changes) || !replaceQuery(w, r, changes) {
		return
	}
	name := changes[0].Name
	res, ok := s.apply(w, r, changes, warnings, nil)
	if !ok {
		return
	}
	if len(res.Units) == 0 {
		writeError(w, http.StatusInternalServerError, "internal", "unit "+name+" vanished after it was written")
		return
	}
	writeJSON(w, http.StatusOK, res.Units[0])
}

func (s *server) deleteUnit(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if _, err := s.cfg.Engine.Unit(name); errors.Is(err, engine.ErrNotFound) {
		s.engineError(w, err)
		return
	}
	changes, _, ok := prepare(w, apiv1.Batch{Destroy: []string{name}})
	if !ok {
		return
	}
	if _, ok := s.apply(w, r, changes, nil, nil); ok {
		writeJSON(w, http.StatusOK, struct{}{})
	}
}

func (s *server) batch(w http.ResponseWriter, r *http.Request) {
	changes, warnings, update, ok := s.readBatchUpdate(w, r)
	if !ok || !mayRun(w, r, changes) || !replaceQuery(w, r, changes) {
		return
	}
	if res, ok := s.apply(w, r, changes, warnings, update); ok {
		writeJSON(w, http.StatusOK, res)
	}
}

// replaceQuery reads ?replace=true of PUT /v1/units/{name} and POST
// /v1/batch: the files of the changes then replace those of existing units
// that differ (instead of a 409), and the units restart with them.
func replaceQuery(w http.ResponseWriter, r *http.Request, changes []engine.Change) bool {
	replace, err := boolQuery(r, "replace")
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return false
	}
	for i := range changes {
		changes[i].Replace = replace
	}
	return true
}

// apply commits changes (read by prepare) through the engine and returns
// the units they touched. On failure it has written the error answer.
func (s *server) apply(w http.ResponseWriter, r *http.Request, changes []engine.Change, warnings []string, update map[string]string) (apiv1.BatchResult, bool) {
	noteUnits(r, changes)
	opts, ok := applyOptionsWith(w, r, update)
	if !ok {
		return apiv1.BatchResult{}, false
	}
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	if err := s.cfg.Engine.ApplyWith(ctx, changes, opts); err != nil {
		s.engineError(w, err)
		return apiv1.BatchResult{}, false
	}
	var names []string
	res := apiv1.BatchResult{Units: []apiv1.Unit{}, Warnings: warnings}
	for _, c := range changes {
		switch {
		case c.Range != nil:
			res.Ranges = append(res.Ranges, apiv1.RangeResult{Name: rangeName(c),
				Instances: c.Range.Len(), DesiredState: string(c.DesiredState), Destroyed: c.Destroy})
		case !c.Destroy:
			names = append(names, c.Name)
		}
	}
	if len(names) > 0 {
		us, err := s.cfg.Engine.Units(names)
		if err != nil {
			// The change is committed; only reading it back failed (the
			// leader stepped down just now): answer with the names alone.
			for _, n := range names {
				res.Units = append(res.Units, apiv1.Unit{Name: n})
			}
			return res, true
		}
		res.Units = us
	}
	return res, true
}

// rangeName is the name of a range change as a batch writes it.
func rangeName(c engine.Change) string {
	return unit.Prefix(c.Name) + "@" + c.Range.String() + strings.TrimPrefix(c.Name, unit.Prefix(c.Name)+"@")
}

// toChanges validates a batch: names, unit files, desired states. Nothing
// is applied when any part is wrong.
func toChanges(b apiv1.Batch) ([]engine.Change, []string, error) {
	var (
		out      []engine.Change
		warnings []string
		seen     = map[string]bool{}
	)
	files, err := parseFiles(b.Units)
	if err != nil {
		return nil, nil, err
	}
	for i, c := range b.Units {
		if tmpl, r, ok, err := unit.ParseRange(c.Name); ok {
			if err != nil {
				return nil, nil, fmt.Errorf("units[%d]: %w", i, err)
			}
			if seen[c.Name] {
				return nil, nil, fmt.Errorf("units[%d]: %s appears twice in the batch", i, c.Name)
			}
			seen[c.Name] = true
			if c.File != "" {
				return nil, nil, fmt.Errorf("units[%d]: %s names a range of instances: it takes no file (submit the template %s)", i, c.Name, tmpl)
			}
			ds, err := unit.ParseDesiredState(c.DesiredState)
			if err != nil || c.DesiredState == "" {
				return nil, nil, fmt.Errorf("units[%d]: %s: want a desiredState of inactive, loaded or launched for the range", i, c.Name)
			}
			out = append(out, engine.Change{Name: tmpl, Range: &r, DesiredState: ds})
			continue
		}
		if err := unit.ValidateName(c.Name); err != nil {
			return nil, nil, fmt.Errorf("units[%d]: %w", i, err)
		}
		if seen[c.Name] {
			return nil, nil, fmt.Errorf("units[%d]: unit %s appears twice in the batch", i, c.Name)
		}
		seen[c.Name] = true
		ch := engine.Change{Name: c.Name, File: files[i]}
		if ch.File != nil {
			warnings = append(warnings, ch.File.Warnings...)
		}
		if c.DesiredState != "" {
			ds, err := unit.ParseDesiredState(c.DesiredState)
			if err != nil {
				return nil, nil, fmt.Errorf("unit %s: %w", c.Name, err)
			}
			ch.DesiredState = ds
		}
		if ch.File == nil && ch.DesiredState == "" {
			return nil, nil, fmt.Errorf("unit %s: the change sets neither file nor desiredState", c.Name)
		}
		out = append(out, ch)
	}
	for i, name := range b.Destroy {
		if tmpl, r, ok, err := unit.ParseRange(name); ok {
			if err != nil {
				return nil, nil, fmt.Errorf("destroy[%d]: %w", i, err)
			}
			if seen[name] {
				return nil, nil, fmt.Errorf("destroy[%d]: %s appears twice in the batch", i, name)
			}
			seen[name] = true
			out = append(out, engine.Change{Name: tmpl, Range: &r, Destroy: true})
			continue
		}
		if err := unit.ValidateName(name); err != nil {
			return nil, nil, fmt.Errorf("destroy[%d]: %w", i, err)
		}
		if seen[name] {
			return nil, nil, fmt.Errorf("destroy[%d]: unit %s is both changed and destroyed in the batch", i, name)
		}
		seen[name] = true
		out = append(out, engine.Change{Name: name, Destroy: true})
	}
	return out, warnings, nil
}

// parseFiles parses the unit files of a batch on every CPU; files[i] is nil
// where the change carries no file. The error is the first bad file's, in
// batch order, so it does not depend on scheduling.
func parseFiles(cs []apiv1.UnitChange) ([]*unit.File, error) {
	files := make([]*unit.File, len(cs))
	errs := make([]error, len(cs))
	workers := min(runtime.GOMAXPROCS(0), max(1, len(cs)/64))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(cs) {
					return
				}
				if cs[i].File == "" {
					continue
				}
				if err := unit.ValidateName(cs[i].Name); err != nil {
					continue // reported in order by the caller
				}
				files[i], errs[i] = unit.Parse(cs[i].Name, []byte(cs[i].File))
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			if err := unit.ValidateName(cs[i].Name); err != nil {
				return nil, fmt.Errorf("units[%d]: %w", i, err)
			}
			return nil, err
		}
	}
	return files, nil
}

func (s *server) unitStates(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	st, err := s.cfg.Engine.UnitStates(q.Get("machine"), q["name"])
	if err != nil {
		s.engineError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, apiv1.UnitStateList{States: st})
}

func (s *server) machines(w http.ResponseWriter, r *http.Request) {
	ms, err := s.cfg.Engine.Machines()
	if err != nil {
		s.engineError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, apiv1.MachineList{Machines: ms})
}

func (s *server) getScheduler(w http.ResponseWriter, r *http.Request) {
	sc, err := s.cfg.Engine.Scheduler()
	if err != nil {
		s.engineError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, sc)
}

func (s *server) putScheduler(w http.ResponseWriter, r *http.Request) {
	sc, ok := s.readScheduler(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	if err := s.cfg.Engine.SetScheduler(ctx, sc); err != nil {
		s.engineError(w, err)
		return
	}
	s.getScheduler(w, r)
}

func (s *server) patchMachine(w http.ResponseWriter, r *http.Request) {
	id, p, ok := s.readMachinePatch(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	if len(p.Metadata) > 0 {
		if err := s.cfg.Engine.PatchMachine(ctx, id, p.Metadata); err != nil {
			s.engineError(w, err)
			return
		}
	}
	if p.Drain != nil {
		if err := s.cfg.Engine.DrainMachine(ctx, id, *p.Drain, p.MaxParallel); err != nil {
			s.engineError(w, err)
			return
		}
	}
	ms, err := s.cfg.Engine.Machines()
	if err != nil {
		s.engineError(w, err)
		return
	}
	for _, m := range ms {
		if m.ID == id {
			writeJSON(w, http.StatusOK, m)
			return
		}
	}
	writeJSON(w, http.StatusOK, apiv1.Machine{ID: id}) // patched while disconnected
}

func (s *server) journal(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	id, addr, err := s.cfg.Engine.UnitMachine(name)
	if errors.Is(err, engine.ErrNotFound) {
		writeError(w, http.StatusNotFound, "not_found", "unit "+name+" is not running on any machine, so it has no journal to show")
		return
	}
	if err != nil {
		s.engineError(w, err)
		return
	}
	if id == s.cfg.Machine {
		s.localJournal(w, r)
		return
	}
	s.forwardToMachine(w, r, id, addr, "/v1/local/journal/"+url.PathEscape(name))
}

// forwardToMachine forwards a read of machine id's units to its API at
// addr. With ForwardMachine (TLS), the machine must hold id's certificate
// and is shown this daemon's, and the person's token stays here: a
// machine claiming an address of its choosing learns no one's token.
func (s *server) forwardToMachine(w http.ResponseWriter, r *http.Request, id, addr, path string) {
	if s.cfg.ForwardMachine == nil {
		s.forward(w, r, addr, path)
		return
	}
	r2 := r.Clone(r.Context())
	r2.Header.Del("Authorization")
	if q := r2.URL.Query(); q.Has("token") {
		q.Del("token")
		r2.URL.RawQuery = q.Encode()
	}
	p := *s.proxy
	p.Transport = s.cfg.ForwardMachine(id)
	s.forwardWith(&p, w, r2, addr, path)
}

func (s *server) localJournal(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if s.cfg.Driver == nil {
		writeError(w, http.StatusNotFound, "not_found", "machine "+s.cfg.Machine+" runs no agent")
		return
	}
	lines := 10
	if v := r.URL.Query().Get("lines"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("lines=%q is not a number", v))
			return
		}
		lines = n
	}
	follow, _ := strconv.ParseBool(r.URL.Query().Get("follow"))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fw := &flushWriter{w: w}
	if f, ok := w.(http.Flusher); ok {
		fw.f = f
	}
	err := s.cfg.Driver.Journal(r.Context(), name, lines, follow, fw)
	if errors.Is(err, driver.ErrUnknownUnit) && !fw.wrote {
		writeError(w, http.StatusNotFound, "not_found", "unit "+name+" has no journal on machine "+s.cfg.Machine)
		return
	}
	if err != nil && r.Context().Err() == nil {
		s.log.Warn("journal", "unit", name, "err", err)
	}
}

type flushWriter struct {
	w     io.Writer
	f     http.Flusher
	wrote bool
}

func (fw *flushWriter) Write(p []byte) (int, error) {
	fw.wrote = true
	n, err := fw.w.Write(p)
	if fw.f != nil {
		fw.f.Flush()
	}
	return n, err
}

func (s *server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	limit := s.bodyLimit(r)
	body := http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the request body exceeds %d bytes, the limit of %s %s", limit, r.Method, r.URL.Path))
			return false
		}
		writeError(w, http.StatusBadRequest, "bad_request", "malformed JSON body: "+err.Error())
		return false
	}
	return true
}

func (s *server) engineError(w http.ResponseWriter, err error) {
	if eu, ok := errors.AsType[*engine.EtcdUnreachableError](err); ok {
		w.Header().Set(apiv1.EtcdUnreachableHeader, eu.Since.UTC().Format(time.RFC3339))
		writeError(w, http.StatusServiceUnavailable, "etcd_unreachable", err.Error())
		return
	}
	switch {
	case errors.Is(err, engine.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", err.Error())
	case errors.Is(err, engine.ErrConflict):
		writeError(w, http.StatusConflict, "conflict", err.Error())
	case errors.Is(err, engine.ErrInvalid):
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
	case errors.Is(err, engine.ErrNotLeader):
		writeError(w, http.StatusServiceUnavailable, "unavailable", "this daemon lost leadership while answering; retry")
	case errors.Is(err, engine.ErrUnavailable):
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error())
	default:
		s.log.Error("internal error", "err", err)
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
	}
}

// enrolMachine gives machine {id} an etcd user and role of its own, which
// it needs before it reaches etcd in the etcd registry mode; done by any
// server, straight in etcd (guard lets a machine's own certificate
// through, as well as an admin token).
func (s *server) enrolMachine(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if s.cfg.EnrolMachine == nil {
		writeError(w, http.StatusBadRequest, "etcd_auth_off", fmt.Sprintf("machine %s manages no etcd users (that takes an embedded etcd member, --tls-* and --registry etcd): enrol machine %s through such a server's API", s.cfg.Machine, id))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	server := ownEnrolment(r) && auth.PeerKind(r.TLS) == auth.KindServer
	if err := s.cfg.EnrolMachine(ctx, id, server); err != nil {
		writeError(w, http.StatusInternalServerError, "internal", fmt.Sprintf("enrolling machine %s: %v", id, err))
		return
	}
	writeJSON(w, http.StatusOK, apiv1.Enrolment{Machine: id, EtcdUser: id})
}

// writeJSON writes v compactly; add ?pretty to a request for indented JSON.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	if pw, ok := w.(*prettyWriter); ok && pw.pretty {
		enc.SetIndent("", "  ")
	}
	enc.Encode(v)
}

// prettyWriter carries a request's ?pretty to writeJSON.
type prettyWriter struct {
	http.ResponseWriter
	pretty bool
}

func (p *prettyWriter) Flush() {
	if f, ok := p.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (p *prettyWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }

// refuse writes an error in the format of the API the request is for:
// fleet's under /fleet/v1, Flotilla's elsewhere.
func refuse(w http.ResponseWriter, r *http.Request, code int, kind, msg string) {
	if fleetapi.Owns(r.URL.Path) {
		fleetapi.WriteError(w, code, msg)
		return
	}
	writeError(w, code, kind, msg)
}

func writeError(w http.ResponseWriter, code int, kind, msg string) {
	writeJSON(w, code, apiv1.Error{Error: msg, Code: kind})
}
