// Package fleetapi serves fleet's HTTP API v1 under /fleet/v1, as fleet
// documented and implemented it, so that fleetctl, fleet's Go client and
// scripts written against fleet work with a Flotilla cluster unchanged
// (see docs/fleet.md). It answers from the engine leader's memory: the
// caller (internal/api) forwards requests to the leader as for /v1.
package fleetapi

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/auth"
	"github.com/flotilla/flotilla/internal/engine"
	"github.com/flotilla/flotilla/internal/limits"
	"github.com/flotilla/flotilla/internal/machine"
	"github.com/flotilla/flotilla/internal/unit"
)

// Prefix is where the API is served.
const Prefix = "/fleet/v1"

// Owns reports whether a request's path is fleet's API's.
func Owns(path string) bool {
	return path == Prefix || strings.HasPrefix(path, Prefix+"/")
}

//go:embed discovery.json
var discovery []byte

// Discovery serves the API's discovery document (GET /fleet/v1/discovery);
// it needs no engine.
func Discovery(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		WriteError(w, http.StatusBadRequest, "only HTTP GET supported against this resource")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(discovery)
}

// Config configures the handler.
type Config struct {
	// Engine answers; it must be the leader's.
	Engine *engine.Engine
	// PageSize is the number of entities in a page (default PageSize).
	PageSize uint16
	// MaxBodyBytes bounds request bodies (default and at most
	// limits.RequestBytes, as /v1 bounds every body but a batch's).
	MaxBodyBytes int64
	Logger       *slog.Logger
}

type server struct {
	cfg   Config
	log   *slog.Logger
	trail trail
}

// New returns the handler of every path under /fleet/v1 but the discovery
// document. Bodies of PUT and PATCH are expected to be JSON: the caller
// checks their Content-Type (415 otherwise, with WriteError; fleet's
// clients may send none at all).
func New(cfg Config) http.Handler {
	if cfg.PageSize == 0 {
		cfg.PageSize = PageSize
	}
	if cfg.MaxBodyBytes <= 0 || cfg.MaxBodyBytes > limits.RequestBytes {
		cfg.MaxBodyBytes = limits.RequestBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &server{cfg: cfg, log: cfg.Logger.With("component", "fleetapi"), trail: trail{since: map[string]time.Time{}}}
	mux := http.NewServeMux()
	only := func(methods string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			WriteError(w, http.StatusMethodNotAllowed, "only "+methods+" supported against this resource")
		}
	}
	mux.HandleFunc("GET "+Prefix+"/units", s.listUnits)
	mux.HandleFunc(Prefix+"/units", only("GET"))
	mux.HandleFunc("GET "+Prefix+"/units/{name}", s.getUnit)
	mux.HandleFunc("PUT "+Prefix+"/units/{name}", s.putUnit)
	mux.HandleFunc("DELETE "+Prefix+"/units/{name}", s.deleteUnit)
	mux.HandleFunc(Prefix+"/units/{name}", only("GET, PUT and DELETE"))
	mux.HandleFunc("GET "+Prefix+"/state", s.listStates)
	mux.HandleFunc(Prefix+"/state", only("GET"))
	mux.HandleFunc("GET "+Prefix+"/state/{name}", s.getState)
	mux.HandleFunc(Prefix+"/state/{name}", only("GET"))
	mux.HandleFunc("GET "+Prefix+"/machines", s.listMachines)
	mux.HandleFunc("PATCH "+Prefix+"/machines", s.patchMachines)
	mux.HandleFunc(Prefix+"/machines", only("GET and PATCH"))
	mux.HandleFunc(Prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusNotFound, fmt.Sprintf("no such resource: %s", r.URL.Path))
	})
	return mux
}

func (s *server) listUnits(w http.ResponseWriter, r *http.Request) {
	tok, err := readPageToken(r.URL.Query(), s.cfg.PageSize)
	if err != nil {
		WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	all, err := s.cfg.Engine.Units(nil) // sorted by name
	if err != nil {
		s.engineError(w, err)
		return
	}
	from, to, next := pageOf(len(all), tok)
	page := UnitPage{NextPageToken: next}
	for _, u := range all[from:to] {
		fu, err := s.unit(u.Name)
		if errors.Is(err, engine.ErrNotFound) {
			continue // destroyed since the list was read
		}
		if err != nil {
			s.engineError(w, err)
			return
		}
		page.Units = append(page.Units, fu)
	}
	writeJSON(w, http.StatusOK, page)
}

// unit reads one unit, with its file, as fleet showed it.
func (s *server) unit(name string) (*Unit, error) {
	u, err := s.cfg.Engine.Unit(name)
	if err != nil {
		return nil, err
	}
	return toFleet(u)
}

func toFleet(u apiv1.Unit) (*Unit, error) {
	opts, err := Options(u.File)
	if err != nil {
		return nil, fmt.Errorf("unit %s: %w", u.Name, err)
	}
	fu := &Unit{Name: u.Name, Options: opts, DesiredState: u.DesiredState, CurrentState: u.CurrentState,
		MachineID: u.Machine, Reason: u.Reason}
	if fu.CurrentState == "" {
		fu.CurrentState = string(unit.Inactive)
	}
	return fu, nil
}

func (s *server) getUnit(w http.ResponseWriter, r *http.Request) {
	fu, err := s.unit(r.PathValue("name"))
	if errors.Is(err, engine.ErrNotFound) {
		WriteError(w, http.StatusNotFound, "unit does not exist")
		return
	}
	if err != nil {
		s.engineError(w, err)
		return
	}
	if s.trail.take(fu.Name, fu.DesiredState, fu.CurrentState) {
		fu.CurrentState = string(unit.Launched)
	}
	writeJSON(w, http.StatusOK, fu)
}

// putUnit creates a unit (201), replaces it when its options differ from
// the stored ones (201, as fleet), or sets its desired state (204).
func (s *server) putUnit(w http.ResponseWriter, r *http.Request) {
	item := r.PathValue("name")
	var in Unit
	if !s.decode(w, r, &in) {
		return
	}
	if in.Name == "" {
		in.Name = item
	}
	if in.Name != item {
		WriteError(w, http.StatusBadRequest, fmt.Sprintf("name in URL %q differs from unit name in request body %q", item, in.Name))
		return
	}
	if err := unit.ValidateName(in.Name); err != nil {
		WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	var desired unit.DesiredState
	if in.DesiredState != "" {
		ds, err := unit.ParseDesiredState(in.DesiredState)
		if err != nil {
			WriteError(w, http.StatusBadRequest, fmt.Sprintf("unit %s: %v", in.Name, err))
			return
		}
		desired = ds
	}
	cur, err := s.cfg.Engine.Unit(in.Name)
	exists := err == nil
	if err != nil && !errors.Is(err, engine.ErrNotFound) {
		s.engineError(w, err)
		return
	}
	create := false
	switch {
	case !exists && len(in.Options) == 0:
		WriteError(w, http.StatusConflict, "unit does not exist and options field empty")
		return
	case !exists:
		create = true
	case len(in.Options) > 0:
		h, err := HashFile(cur.File)
		if err != nil {
			s.engineError(w, err)
			return
		}
		create = h != Hash(in.Options)
	}
	if create {
		for i, o := range in.Options {
			if o == nil || o.Section == "" || o.Name == "" {
				WriteError(w, http.StatusBadRequest, fmt.Sprintf("options[%d]: an option needs a section and a name", i))
				return
			}
		}
		f, err := unit.Parse(in.Name, []byte(File(in.Options)))
		if err != nil {
			WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		if err := auth.CheckUnits(r.Context(), f); err != nil {
			WriteError(w, http.StatusForbidden, err.Error())
			return
		}
		if desired == "" {
			desired = unit.Inactive
		}
		if unit.IsTemplate(in.Name) && desired != unit.Inactive {
			WriteError(w, http.StatusBadRequest, fmt.Sprintf("cannot activate template %q", in.Name))
			return
		}
		if !s.apply(w, r, engine.Change{Name: in.Name, File: f, DesiredState: desired, Replace: exists}) {
			return
		}
		writeEmpty(w, http.StatusCreated)
		return
	}
	if desired == "" {
		WriteError(w, http.StatusConflict, "must provide DesiredState to update existing unit")
		return
	}
	if unit.IsTemplate(in.Name) && desired != unit.Inactive {
		WriteError(w, http.StatusBadRequest, fmt.Sprintf("cannot activate template %q", in.Name))
		return
	}
	if !s.apply(w, r, engine.Change{Name: in.Name, DesiredState: desired}) {
		return
	}
	if desired == unit.Loaded && cur.CurrentState == string(unit.Launched) {
		s.trail.stopped(in.Name)
	}
	writeEmpty(w, http.StatusNoContent)
}

func (s *server) deleteUnit(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if _, err := s.cfg.Engine.Unit(name); err != nil {
		if errors.Is(err, engine.ErrNotFound) {
			WriteError(w, http.StatusNotFound, "unit does not exist")
			return
		}
		s.engineError(w, err)
		return
	}
	if !s.apply(w, r, engine.Change{Name: name, Destroy: true}) {
		return
	}
	writeEmpty(w, http.StatusNoContent)
}

// apply commits one change; on failure it has written the answer.
func (s *server) apply(w http.ResponseWriter, r *http.Request, c engine.Change) bool {
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	if err := s.cfg.Engine.ApplyWith(ctx, []engine.Change{c}, engine.ApplyOptions{By: auth.Author(r)}); err != nil {
		s.engineError(w, err)
		return false
	}
	return true
}

func (s *server) listStates(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	tok, err := readPageToken(q, s.cfg.PageSize)
	if err != nil {
		WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	var names []string
	if n := q.Get("unitName"); n != "" {
		names = []string{n}
	}
	machine := q.Get("machineID")
	states, err := s.cfg.Engine.UnitStates(machine, names)
	if err != nil {
		s.engineError(w, err)
		return
	}
	// UnitStates matches names as globs; fleet's unitName is a name.
	var filtered []apiv1.UnitState
	for _, st := range states {
		if (len(names) == 0 || st.Name == names[0]) && (machine == "" || st.Machine == machine) {
			filtered = append(filtered, st)
		}
	}
	from, to, next := pageOf(len(filtered), tok)
	page := UnitStatePage{NextPageToken: next}
	hashes := map[string]fleetHash{} // by unit name
	for _, st := range filtered[from:to] {
		h, ok := hashes[st.Name]
		if !ok {
			h = s.fleetHash(st.Name)
			hashes[st.Name] = h
		}
		page.States = append(page.States, toFleetState(st, h))
	}
	writeJSON(w, http.StatusOK, page)
}

// toFleetState is st in fleet's terms, its hash fleet's when the machine
// runs the unit's current file (of hashes h).
func toFleetState(st apiv1.UnitState, h fleetHash) *UnitState {
	hash := st.Hash
	if st.Hash == h.flotilla && h.fleet != "" {
		hash = h.fleet
	}
	return &UnitState{Name: st.Name, Hash: hash, MachineID: st.Machine,
		SystemdLoadState: st.Load, SystemdActiveState: st.Active, SystemdSubState: st.Sub}
}

// getState answers GET /fleet/v1/state/{name}, which fleetctl start asks
// after a unit is launched: the state its machine reports (a global unit's,
// or one not yet moved, the first reported), 404 when none is.
func (s *server) getState(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	states, err := s.cfg.Engine.UnitStates("", []string{name})
	if err != nil {
		s.engineError(w, err)
		return
	}
	var mine []apiv1.UnitState
	for _, st := range states {
		if st.Name == name { // UnitStates matches names as globs
			mine = append(mine, st)
		}
	}
	if len(mine) == 0 {
		WriteError(w, http.StatusNotFound, "unit state does not exist")
		return
	}
	st := mine[0]
	if u, err := s.cfg.Engine.Unit(name); err == nil {
		for _, x := range mine {
			if x.Machine == u.Machine {
				st = x
			}
		}
	}
	writeJSON(w, http.StatusOK, toFleetState(st, s.fleetHash(name)))
}

// fleetHash is a unit's hash in Flotilla's terms and in fleet's.
type fleetHash struct{ flotilla, fleet string }

// fleetHash returns the hashes of the unit's current file; a machine that
// reports the Flotilla hash runs that file, whose fleet hash fleetctl
// expects. Both are "" when the unit is gone.
func (s *server) fleetHash(name string) fleetHash {
	u, err := s.cfg.Engine.Unit(name)
	if err != nil {
		return fleetHash{}
	}
	h, err := HashFile(u.File)
	if err != nil {
		return fleetHash{}
	}
	return fleetHash{flotilla: u.Hash, fleet: h}
}

func (s *server) listMachines(w http.ResponseWriter, r *http.Request) {
	tok, err := readPageToken(r.URL.Query(), s.cfg.PageSize)
	if err != nil {
		WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	ms, err := s.cfg.Engine.Machines()
	if err != nil {
		s.engineError(w, err)
		return
	}
	from, to, next := pageOf(len(ms), tok)
	page := MachinePage{NextPageToken: next}
	for _, m := range ms[from:to] {
		fm := &Machine{ID: m.ID, PrimaryIP: m.IP}
		if len(m.Metadata) > 0 {
			fm.Metadata = m.Metadata
		}
		page.Machines = append(page.Machines, fm)
	}
	writeJSON(w, http.StatusOK, page)
}

// metadataPath is the path of a metadata op: /<machine>/metadata/<key>.
var metadataPath = regexp.MustCompile(`^/([^/]+)/metadata/([A-Za-z0-9_.-]+)$`)

// metadataOp is one op of PATCH /fleet/v1/machines. fleet's server read
// the value as {"value": "…"}, its documentation shows a bare string: both
// are accepted.
type metadataOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value"`
}

func (op metadataOp) value() (string, error) {
	if len(op.Value) == 0 || string(op.Value) == "null" {
		return "", nil
	}
	var v string
	if err := json.Unmarshal(op.Value, &v); err == nil {
		return v, nil
	}
	var obj struct {
		Value string `json:"value"`
	}
	if err := json.Unmarshal(op.Value, &obj); err != nil {
		return "", fmt.Errorf("invalid value of %s: want a string or {\"value\": string}", op.Path)
	}
	return obj.Value, nil
}

func (s *server) patchMachines(w http.ResponseWriter, r *http.Request) {
	var ops []metadataOp
	if !s.decode(w, r, &ops) {
		return
	}
	type patch struct {
		id string
		kv map[string]*string
	}
	var patches []patch // in the order machines first appear
	for i, op := range ops {
		if op.Op != "add" && op.Op != "remove" && op.Op != "replace" {
			WriteError(w, http.StatusBadRequest, fmt.Sprintf("ops[%d]: invalid op %q: expect add, remove, or replace", i, op.Op))
			return
		}
		m := metadataPath.FindStringSubmatch(op.Path)
		if m == nil {
			WriteError(w, http.StatusBadRequest, fmt.Sprintf("ops[%d]: machine metadata path %q invalid: want /MACHINE/metadata/KEY", i, op.Path))
			return
		}
		v, err := op.value()
		if err != nil {
			WriteError(w, http.StatusBadRequest, fmt.Sprintf("ops[%d]: %v", i, err))
			return
		}
		var val *string
		if op.Op != "remove" {
			if v == "" {
				WriteError(w, http.StatusBadRequest, fmt.Sprintf("ops[%d]: invalid value: add and replace require a value", i))
				return
			}
			val = &v
		}
		if len(patches) == 0 || patches[len(patches)-1].id != m[1] {
			found := false
			for _, p := range patches {
				found = found || p.id == m[1]
			}
			if !found {
				patches = append(patches, patch{id: m[1], kv: map[string]*string{}})
			}
		}
		for _, p := range patches {
			if p.id == m[1] {
				p.kv[m[2]] = val // later ops win, as applied in order
			}
		}
	}
	// The limits of PATCH /v1/machines/{id}, answered as /v1 answers them:
	// 413 for too many pairs, 400 for a key or value too long.
	for _, p := range patches {
		if err := machine.CheckMetadataCount(len(p.kv)); err != nil {
			WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("machine %s: the patch has %v", p.id, err))
			return
		}
		for k, v := range p.kv {
			val := ""
			if v != nil {
				val = *v
			}
			if err := machine.CheckMetadataPair(k, val); err != nil {
				WriteError(w, http.StatusBadRequest, fmt.Sprintf("machine %s: %v", p.id, err))
				return
			}
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	for _, p := range patches {
		if err := s.cfg.Engine.PatchMachine(ctx, p.id, p.kv); err != nil {
			s.engineError(w, err)
			return
		}
	}
	writeEmpty(w, http.StatusNoContent)
}

// decode reads a JSON body of at most MaxBodyBytes into v; on failure it
// has written the answer: 413 for a body over the limit, 400 otherwise.
func (s *server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	err := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)).Decode(v)
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body exceeds %d bytes, the limit of %s %s", s.cfg.MaxBodyBytes, r.Method, r.URL.Path))
		return false
	}
	if err != nil {
		WriteError(w, http.StatusBadRequest, fmt.Sprintf("unable to decode body: %v", err))
		return false
	}
	return true
}

func (s *server) engineError(w http.ResponseWriter, err error) {
	if eu, ok := errors.AsType[*engine.EtcdUnreachableError](err); ok {
		w.Header().Set(apiv1.EtcdUnreachableHeader, eu.Since.UTC().Format(time.RFC3339))
		WriteError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	switch {
	case errors.Is(err, engine.ErrNotFound):
		WriteError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, engine.ErrConflict):
		WriteError(w, http.StatusConflict, err.Error())
	case errors.Is(err, engine.ErrInvalid):
		WriteError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, engine.ErrNotLeader):
		WriteError(w, http.StatusServiceUnavailable, "this daemon lost leadership while answering; retry")
	case errors.Is(err, engine.ErrUnavailable), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		WriteError(w, http.StatusServiceUnavailable, err.Error())
	default:
		s.log.Error("internal error", "err", err)
		WriteError(w, http.StatusInternalServerError, err.Error())
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		WriteError(w, http.StatusInternalServerError, "encoding the answer: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(b)
}

// writeEmpty answers a write that has no body, typed as fleet's answers
// all were (fleet's functional tests check it).
func writeEmpty(w http.ResponseWriter, code int) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
}

// WriteError writes fleet's error body with HTTP status code.
func WriteError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, ErrorBody{Error: ErrorEntity{Code: code, Message: msg}})
}
