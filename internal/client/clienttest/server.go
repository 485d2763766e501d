// Package clienttest provides an in-memory stand-in of Flotilla's HTTP API
// for tests of the client and the command-line tool. It keeps units and
// machines in memory, schedules units by [X-Fleet] MachineMetadata= (and
// moves them when a machine's metadata changes), simulates agents that
// reach a unit's desired state after a configurable number of reads, and
// records the requests it serves.
package clienttest

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
)

// Server is a fake Flotilla API server.
type Server struct {
	*httptest.Server

	mu       sync.Mutex
	machines []apiv1.Machine
	units    map[string]*unitRec
	lag      int
	requests map[string]int
	log      []Request
	onBatch  func(apiv1.Batch)
	journals map[string][]string
	follow   map[string][]string
	nextPID  int
	now      time.Time
}

// Request is a request the server received.
type Request struct {
	Method string
	Path   string
	Query  string // raw query
	Body   []byte
}

type unitRec struct {
	apiv1.Unit
	// settled is set when the simulated agent has acted on DesiredState.
	settled bool
	// lagLeft counts the reads left before the agent acts.
	lagLeft int
}

// NewServer starts a fake server with the given machines; it is closed when
// the test ends.
func NewServer(t testing.TB, machines ...apiv1.Machine) *Server {
	t.Helper()
	s := &Server{
		machines: cloneMachines(machines),
		units:    map[string]*unitRec{},
		requests: map[string]int{},
		journals: map[string][]string{},
		follow:   map[string][]string{},
		nextPID:  1000,
		now:      time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", s.status)
	mux.HandleFunc("GET /v1/units", s.listUnits)
	mux.HandleFunc("GET /v1/units/{name}", s.getUnit)
	mux.HandleFunc("PUT /v1/units/{name}", s.putUnit)
	mux.HandleFunc("DELETE /v1/units/{name}", s.deleteUnit)
	mux.HandleFunc("POST /v1/batch", s.batch)
	mux.HandleFunc("GET /v1/unit-states", s.unitStates)
	mux.HandleFunc("GET /v1/machines", s.listMachines)
	mux.HandleFunc("PATCH /v1/machines/{id}", s.patchMachine)
	mux.HandleFunc("GET /v1/units/{name}/journal", s.journal)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "read body: "+err.Error())
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		s.mu.Lock()
		s.requests[r.Method+" "+r.URL.Path]++
		s.log = append(s.log, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Body: body})
		s.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// SetLag makes the simulated agents act on a desired state after n reads of
// the unit (0, the default, means at the first read).
func (s *Server) SetLag(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lag = n
}

// Requests returns how many requests had the method and path, e.g.
// Requests("POST /v1/batch").
func (s *Server) Requests(methodPath string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[methodPath]
}

// Log returns the requests served so far, in order.
func (s *Server) Log() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// Batches returns the bodies of the POST /v1/batch requests served so far,
// in order, including those the server refused.
func (s *Server) Batches() []apiv1.Batch {
	var bs []apiv1.Batch
	for _, r := range s.Log() {
		if r.Method != http.MethodPost || r.Path != "/v1/batch" {
			continue
		}
		var b apiv1.Batch
		_ = json.Unmarshal(r.Body, &b) // a bad body is kept as an empty batch
		bs = append(bs, b)
	}
	return bs
}

// OnBatch makes the server call f with every batch it applied, before it
// answers; f may change the server (e.g. SetMetadata). nil removes it.
func (s *Server) OnBatch(f func(apiv1.Batch)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onBatch = f
}

// Machine returns the machine with the given ID.
func (s *Server) Machine(id string) (apiv1.Machine, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.machineIndex(id)
	if i < 0 {
		return apiv1.Machine{}, false
	}
	return s.machineView(s.machines[i]), true
}

// SetMetadata changes the metadata of machine id as PATCH /v1/machines/{id}
// does: each key is set to its value, or removed when the value is nil.
// Units that no longer fit the machine move to the first machine that fits
// them, and units that could not be placed are placed if they now fit. It
// reports whether the machine exists.
func (s *Server) SetMetadata(id string, patch map[string]*string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.setMetadata(id, patch)
}

func (s *Server) setMetadata(id string, patch map[string]*string) bool {
	i := s.machineIndex(id)
	if i < 0 {
		return false
	}
	md := maps.Clone(s.machines[i].Metadata)
	if md == nil {
		md = map[string]string{}
	}
	for k, v := range patch {
		if v == nil {
			delete(md, k)
		} else {
			md[k] = *v
		}
	}
	s.machines[i].Metadata = md
	for _, name := range s.sortedNames() {
		rec := s.units[name]
		switch {
		case rec.DesiredState == "inactive":
			continue
		case rec.Machine == id && !fits(s.machines[i], options(rec.File, "MachineMetadata")):
			rec.Machine, rec.CurrentState, rec.State = "", "inactive", nil
		case rec.Machine != "":
			continue
		}
		s.schedule(rec)
		rec.settled = false
		rec.lagLeft = s.lag
	}
	return true
}

func (s *Server) machineIndex(id string) int {
	return slices.IndexFunc(s.machines, func(m apiv1.Machine) bool { return m.ID == id })
}

// SetJournal sets the log of a unit; follow lines are sent to followers
// after the last lines, and then the stream stays open.
func (s *Server) SetJournal(name string, lines, follow []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.journals[name] = lines
	s.follow[name] = follow
}

// AddUnit stores u as is: no scheduling or agent simulation is applied
// to it until its desired state changes.
func (s *Server) AddUnit(u apiv1.Unit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u.Hash == "" && u.File != "" {
		u.Hash = hash(u.File)
	}
	s.units[u.Name] = &unitRec{Unit: u, settled: true}
}

// Unit returns the stored unit, with its File.
func (s *Server) Unit(name string) (apiv1.Unit, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.units[name]
	if !ok {
		return apiv1.Unit{}, false
	}
	return r.Unit, true
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := apiv1.Status{Version: "test", Registry: "memory"}
	for _, m := range s.machines {
		if m.Leader {
			st.Leader = m.ID
		}
	}
	if len(s.machines) > 0 {
		st.Machine = s.machines[0].ID
		st.IsLeader = st.Leader == st.Machine
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) listUnits(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := r.URL.Query()["name"]
	l := apiv1.UnitList{Units: []apiv1.Unit{}}
	for _, name := range s.sortedNames() {
		if len(names) > 0 && !slices.Contains(names, name) {
			continue
		}
		rec := s.units[name]
		s.advance(rec)
		u := rec.Unit
		u.File = ""
		l.Units = append(l.Units, u)
	}
	writeJSON(w, http.StatusOK, l)
}

func (s *Server) getUnit(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.units[r.PathValue("name")]
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("unit %s does not exist", r.PathValue("name")))
		return
	}
	s.advance(rec)
	writeJSON(w, http.StatusOK, rec.Unit)
}

func (s *Server) putUnit(w http.ResponseWriter, r *http.Request) {
	var ch apiv1.UnitChange
	if err := json.NewDecoder(r.Body).Decode(&ch); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "bad JSON body: "+err.Error())
		return
	}
	ch.Name = r.PathValue("name")
	res, status, code, msg := s.apply(apiv1.Batch{Units: []apiv1.UnitChange{ch}})
	if status != http.StatusOK {
		writeError(w, status, code, msg)
		return
	}
	writeJSON(w, http.StatusOK, res.Units[0])
}

func (s *Server) deleteUnit(w http.ResponseWriter, r *http.Request) {
	_, status, code, msg := s.apply(apiv1.Batch{Destroy: []string{r.PathValue("name")}})
	if status != http.StatusOK {
		writeError(w, status, code, msg)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

func (s *Server) batch(w http.ResponseWriter, r *http.Request) {
	var b apiv1.Batch
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "bad JSON body: "+err.Error())
		return
	}
	res, status, code, msg := s.apply(b)
	if status != http.StatusOK {
		writeError(w, status, code, msg)
		return
	}
	s.mu.Lock()
	f := s.onBatch
	s.mu.Unlock()
	if f != nil {
		f(b)
	}
	writeJSON(w, http.StatusOK, res)
}

// apply validates all of b and then applies it, like the real server.
func (s *Server) apply(b apiv1.Batch) (res apiv1.BatchResult, status int, code, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range b.Units {
		if !strings.Contains(ch.Name, ".") || strings.Contains(ch.Name, "/") {
			return res, http.StatusBadRequest, "bad_request", fmt.Sprintf("invalid unit name %q", ch.Name)
		}
		switch ch.DesiredState {
		case "", "inactive", "loaded", "launched":
		default:
			return res, http.StatusBadRequest, "bad_request", fmt.Sprintf("%s: unknown desired state %q", ch.Name, ch.DesiredState)
		}
		rec, ok := s.units[ch.Name]
		switch {
		case !ok && ch.File == "":
			return res, http.StatusNotFound, "not_found", fmt.Sprintf("unit %s does not exist", ch.Name)
		case ok && ch.File != "" && hash(ch.File) != rec.Hash:
			return res, http.StatusConflict, "conflict", fmt.Sprintf("unit %s already exists with a different file; destroy it first", ch.Name)
		}
	}
	for _, name := range b.Destroy {
		if _, ok := s.units[name]; !ok {
			return res, http.StatusNotFound, "not_found", fmt.Sprintf("unit %s does not exist", name)
		}
	}

	res.Units = []apiv1.Unit{}
	for _, ch := range b.Units {
		rec, ok := s.units[ch.Name]
		if !ok {
			rec = &unitRec{Unit: apiv1.Unit{
				Name:         ch.Name,
				File:         ch.File,
				Hash:         hash(ch.File),
				Description:  option(ch.File, "Description"),
				DesiredState: "inactive",
				CurrentState: "inactive",
			}, settled: true}
			s.units[ch.Name] = rec
			if strings.Contains(ch.File, "Deprecated=") {
				res.Warnings = append(res.Warnings, ch.Name+": Deprecated= is deprecated")
			}
		}
		if ch.DesiredState != "" && ch.DesiredState != rec.DesiredState {
			rec.DesiredState = ch.DesiredState
			rec.settled = false
			rec.lagLeft = s.lag
			s.schedule(rec)
		}
		u := rec.Unit
		u.File = ""
		res.Units = append(res.Units, u)
	}
	for _, name := range b.Destroy {
		delete(s.units, name)
	}
	return res, http.StatusOK, "", ""
}

// schedule places a wanted unit on the first machine matching its
// MachineMetadata= options, or records why it cannot.
func (s *Server) schedule(rec *unitRec) {
	if rec.DesiredState == "inactive" || rec.Machine != "" {
		return
	}
	want := options(rec.File, "MachineMetadata")
	for _, m := range s.machines {
		if fits(m, want) {
			rec.Machine = m.ID
			rec.Reason = ""
			return
		}
	}
	rec.Reason = "no machine matches MachineMetadata=" + strings.Join(want, ",")
}

// fits reports whether machine m has every key=value of want.
func fits(m apiv1.Machine, want []string) bool {
	for _, kv := range want {
		k, v, _ := strings.Cut(kv, "=")
		if m.Metadata[k] != v {
			return false
		}
	}
	return true
}

// advance simulates the target machine's agent acting on the desired state.
// Units that use ExecStart=/bin/false fail when launched.
func (s *Server) advance(rec *unitRec) {
	if rec.settled || (rec.Machine == "" && rec.DesiredState != "inactive") {
		return
	}
	if rec.lagLeft > 0 {
		rec.lagLeft--
		return
	}
	rec.settled = true
	s.now = s.now.Add(time.Second)
	since := s.now.Format(time.RFC3339)
	st := &apiv1.UnitState{Name: rec.Name, Machine: rec.Machine, Hash: rec.Hash, Load: "loaded", Since: since}
	switch rec.DesiredState {
	case "inactive":
		rec.Machine = ""
		rec.CurrentState = "inactive"
		rec.State = nil
		return
	case "loaded":
		st.Active, st.Sub = "inactive", "dead"
		rec.CurrentState = "loaded"
	case "launched":
		if strings.Contains(rec.File, "ExecStart=/bin/false") {
			st.Active, st.Sub, st.Result = "failed", "failed", "exit-code"
			rec.CurrentState = "loaded"
		} else {
			s.nextPID++
			st.Active, st.Sub, st.PID = "active", "running", s.nextPID
			rec.CurrentState = "launched"
		}
	}
	rec.State = st
}

func (s *Server) unitStates(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := r.URL.Query()
	l := apiv1.UnitStateList{States: []apiv1.UnitState{}}
	for _, name := range s.sortedNames() {
		rec := s.units[name]
		s.advance(rec)
		if rec.State == nil {
			continue
		}
		if names := q["name"]; len(names) > 0 && !slices.Contains(names, name) {
			continue
		}
		if m := q.Get("machine"); m != "" && rec.State.Machine != m {
			continue
		}
		l.States = append(l.States, *rec.State)
	}
	writeJSON(w, http.StatusOK, l)
}

func (s *Server) listMachines(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := apiv1.MachineList{Machines: []apiv1.Machine{}}
	for _, m := range s.machines {
		l.Machines = append(l.Machines, s.machineView(m))
	}
	writeJSON(w, http.StatusOK, l)
}

// machineView is m as the API shows it; callers hold mu.
func (s *Server) machineView(m apiv1.Machine) apiv1.Machine {
	m.Metadata = maps.Clone(m.Metadata)
	m.Units = 0
	for _, rec := range s.units {
		if rec.Machine == m.ID {
			m.Units++
		}
	}
	return m
}

// patchMachine answers PATCH /v1/machines/{id} as the real server does,
// including its errors: 400 bad_request for an empty patch or an invalid
// key or value, 404 not_found for an unknown machine.
func (s *Server) patchMachine(w http.ResponseWriter, r *http.Request) {
	var p apiv1.MachinePatch
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "bad JSON body: "+err.Error())
		return
	}
	if len(p.Metadata) == 0 {
		writeError(w, http.StatusBadRequest, "bad_request", `the patch changes nothing: give {"metadata": {"key": "value" or null}}`)
		return
	}
	id := r.PathValue("id")
	for _, k := range slices.Sorted(maps.Keys(p.Metadata)) {
		if err := validMetadata(k, p.Metadata[k]); err != "" {
			writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("invalid request: machine %s: %s", id, err))
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.setMetadata(id, p.Metadata) {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("machine %s is not part of the cluster", id))
		return
	}
	writeJSON(w, http.StatusOK, s.machineView(s.machines[s.machineIndex(id)]))
}

// validMetadata checks a key and value (nil: removed) of a metadata patch
// as the real server does; it returns what is wrong, or "".
func validMetadata(k string, v *string) string {
	switch {
	case k == "":
		return "metadata has an empty key"
	case strings.ContainsAny(k, " \t,="):
		return fmt.Sprintf("metadata key %q may not contain spaces, commas or \"=\"", k)
	case v != nil && *v == "":
		return fmt.Sprintf("metadata %s= has an empty value", k)
	case v != nil && strings.ContainsAny(*v, "=,"):
		return fmt.Sprintf("metadata value %q may not contain \"=\" or \",\"", *v)
	}
	return ""
}

func cloneMachines(ms []apiv1.Machine) []apiv1.Machine {
	ms = slices.Clone(ms)
	for i := range ms {
		ms[i].Metadata = maps.Clone(ms[i].Metadata)
	}
	return ms
}

func (s *Server) journal(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	s.mu.Lock()
	_, ok := s.units[name]
	lines := s.journals[name]
	follow := s.follow[name]
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("unit %s does not exist", name))
		return
	}
	n := 10
	if v := r.URL.Query().Get("lines"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("invalid lines %q", v))
			return
		}
	}
	if n < len(lines) {
		lines = lines[len(lines)-n:]
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	if r.URL.Query().Get("follow") != "true" {
		return
	}
	for _, l := range follow {
		fmt.Fprintln(w, l)
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	<-r.Context().Done()
}

func (s *Server) sortedNames() []string {
	names := make([]string, 0, len(s.units))
	for n := range s.units {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, apiv1.Error{Error: msg, Code: code})
}

func hash(file string) string {
	h := sha1.Sum([]byte(file))
	return hex.EncodeToString(h[:])
}

// option returns the first value of a Key= line in file.
func option(file, key string) string {
	if v := options(file, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// options returns the values of every Key= line in file, in order.
func options(file, key string) []string {
	var vals []string
	sc := bufio.NewScanner(strings.NewReader(file))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if ok && strings.TrimSpace(k) == key {
			vals = append(vals, strings.TrimSpace(v))
		}
	}
	return vals
}
