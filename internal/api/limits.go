package api

import (
	"fmt"
	"math"
	"net/http"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/engine"
	"github.com/flotilla/flotilla/internal/limits"
	"github.com/flotilla/flotilla/internal/machine"
	"github.com/flotilla/flotilla/internal/unit"
)

// The reading of write requests: each read* function decodes a request's
// body, checks it against the limits (internal/limits) and validates it,
// without the engine; on failure it has written a 400 or 413 that names
// what is wrong, and nothing reaches the engine or etcd. The handlers then
// hand what was read to the engine. The fuzz targets (fuzz_test.go) drive
// these functions.

// limitError is a request over one of the limits: 413 when the request is
// too large as a whole (too many units, too many pairs), 400 when one of
// its parts is (a name, a value, a weight).
type limitError struct {
	code int
	msg  string
}

func (e *limitError) Error() string { return e.msg }

func tooLarge(format string, args ...any) *limitError {
	return &limitError{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *limitError {
	return &limitError{code: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

func writeLimitError(w http.ResponseWriter, e *limitError) {
	kind := "bad_request"
	if e.code == http.StatusRequestEntityTooLarge {
		kind = "too_large"
	}
	writeError(w, e.code, kind, e.msg)
}

// bodyLimit is the largest body a request may carry: limits.BatchBytes for
// POST /v1/batch (or Config.MaxBodyBytes if smaller), limits.RequestBytes
// for every other.
func (s *server) bodyLimit(r *http.Request) int64 {
	if r.Method == http.MethodPost && r.URL.Path == "/v1/batch" {
		return s.cfg.MaxBodyBytes
	}
	return min(s.cfg.MaxBodyBytes, limits.RequestBytes)
}

// readPutUnit reads PUT /v1/units/{name}.
func (s *server) readPutUnit(w http.ResponseWriter, r *http.Request) ([]engine.Change, []string, bool) {
	var c apiv1.UnitChange
	if !s.decode(w, r, &c) {
		return nil, nil, false
	}
	name := r.PathValue("name")
	if c.Name != "" && c.Name != name {
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("body names unit %q but the path names %q", c.Name, name))
		return nil, nil, false
	}
	c.Name = name
	return prepare(w, apiv1.Batch{Units: []apiv1.UnitChange{c}})
}

// readBatch reads POST /v1/batch.
func (s *server) readBatch(w http.ResponseWriter, r *http.Request) ([]engine.Change, []string, bool) {
	changes, warnings, _, ok := s.readBatchUpdate(w, r)
	return changes, warnings, ok
}

// readBatchUpdate is readBatch, with the batch's [X-Update] overrides.
func (s *server) readBatchUpdate(w http.ResponseWriter, r *http.Request) ([]engine.Change, []string, map[string]string, bool) {
	var b apiv1.Batch
	if !s.decode(w, r, &b) {
		return nil, nil, nil, false
	}
	if len(b.Update) > limits.UpdateOptions {
		writeLimitError(w, tooLarge("the batch overrides %d [X-Update] options; there are %d", len(b.Update), limits.UpdateOptions))
		return nil, nil, nil, false
	}
	if _, err := unit.OverrideUpdate(unit.DefaultUpdate, b.Update); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "update: "+err.Error())
		return nil, nil, nil, false
	}
	changes, warnings, ok := prepare(w, b)
	return changes, warnings, b.Update, ok
}

// prepare checks a batch against the limits and validates it (toChanges).
func prepare(w http.ResponseWriter, b apiv1.Batch) ([]engine.Change, []string, bool) {
	if n := len(b.Units) + len(b.Destroy); n > limits.BatchUnits {
		writeLimitError(w, tooLarge("the batch has %d changes (%d units, %d to destroy); the limit is %d per request: send several batches",
			n, len(b.Units), len(b.Destroy), limits.BatchUnits))
		return nil, nil, false
	}
	if n := batchInstances(b); n > limits.BatchInstances {
		writeLimitError(w, tooLarge("the batch names %d units, counting each instance of its ranges; the limit is %d per request: send several batches",
			n, limits.BatchInstances))
		return nil, nil, false
	}
	changes, warnings, err := toChanges(b)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return nil, nil, false
	}
	if len(changes) == 0 {
		writeError(w, http.StatusBadRequest, "bad_request", "the batch is empty: name at least one unit")
		return nil, nil, false
	}
	return changes, warnings, true
}

// batchInstances counts the units b names, each instance of a range
// counted (a malformed range counts 1: toChanges refuses it).
func batchInstances(b apiv1.Batch) int {
	n := 0
	count := func(name string) {
		if _, r, ok, err := unit.ParseRange(name); ok && err == nil {
			n += r.Len()
		} else {
			n++
		}
	}
	for _, c := range b.Units {
		count(c.Name)
	}
	for _, name := range b.Destroy {
		count(name)
	}
	return n
}

// readMachinePatch reads PATCH /v1/machines/{id}.
func (s *server) readMachinePatch(w http.ResponseWriter, r *http.Request) (string, apiv1.MachinePatch, bool) {
	var p apiv1.MachinePatch
	if !s.decode(w, r, &p) {
		return "", p, false
	}
	id := r.PathValue("id")
	if err := checkMachinePatch(id, p); err != nil {
		writeLimitError(w, err)
		return "", p, false
	}
	return id, p, true
}

func checkMachinePatch(id string, p apiv1.MachinePatch) *limitError {
	if err := machine.ValidateName(id); err != nil {
		return badRequest("%v", err)
	}
	if len(p.Metadata) == 0 && p.Drain == nil {
		return badRequest(`the patch changes nothing: give {"metadata": {"key": "value" or null}} or {"drain": true or false}`)
	}
	if p.MaxParallel != 0 && (p.Drain == nil || !*p.Drain) {
		return badRequest(`machine %s: "maxParallel" goes with "drain": true`, id)
	}
	if p.MaxParallel < 0 || p.MaxParallel > apiv1.MaxDrainParallel {
		return badRequest(`machine %s: "maxParallel" is %d: want 1 to %d`, id, p.MaxParallel, apiv1.MaxDrainParallel)
	}
	if err := machine.CheckMetadataCount(len(p.Metadata)); err != nil {
		return tooLarge("machine %s: the patch has %v", id, err)
	}
	for k, v := range p.Metadata {
		val := ""
		if v != nil {
			val = *v
		}
		if err := machine.CheckMetadataPair(k, val); err != nil {
			return badRequest("machine %s: %v", id, err)
		}
		if err := unit.ValidateMetadata(k, v); err != nil {
			return badRequest("machine %s: %v", id, err)
		}
	}
	return nil
}

// readScheduler reads PUT /v1/scheduler. The placement strategy and the
// rest of the policy's meaning are the scheduler's to judge (the engine
// answers 400); here are its sizes and ranges.
func (s *server) readScheduler(w http.ResponseWriter, r *http.Request) (apiv1.Scheduler, bool) {
	var sc apiv1.Scheduler
	if !s.decode(w, r, &sc) {
		return sc, false
	}
	if err := checkScheduler(sc); err != nil {
		writeLimitError(w, err)
		return sc, false
	}
	return sc, true
}

func checkScheduler(sc apiv1.Scheduler) *limitError {
	if len(sc.Shares) > 0 {
		return badRequest("shares are read-only: give placement and roles")
	}
	if len(sc.Placement) > limits.RoleNameBytes {
		return badRequest("placement %.20q... is %d bytes: want spread or binpack", sc.Placement, len(sc.Placement))
	}
	if len(sc.Roles) > limits.SchedulerRoles {
		return tooLarge("the policy gives %d roles; the limit is %d", len(sc.Roles), limits.SchedulerRoles)
	}
	for name, p := range sc.Roles {
		switch {
		case len(name) > limits.RoleNameBytes:
			return badRequest("role %.20q... is %d bytes; the limit is %d", name, len(name), limits.RoleNameBytes)
		case math.IsNaN(p.Weight) || p.Weight != 0 && (p.Weight < limits.MinRoleWeight || p.Weight > limits.MaxRoleWeight):
			return badRequest("role %s: weight %v is outside %v to %v (0 for 1)", name, p.Weight, limits.MinRoleWeight, limits.MaxRoleWeight)
		case p.Quota.CPUPercent < 0 || p.Quota.CPUPercent > limits.MaxCPUPercent:
			return badRequest("role %s: CPU quota %d%% is outside 0 to %d%% (0: no cap)", name, p.Quota.CPUPercent, limits.MaxCPUPercent)
		case p.Quota.MemoryBytes < 0 || p.Quota.MemoryBytes > limits.MaxMemoryBytes:
			return badRequest("role %s: memory quota %d bytes is outside 0 to %d (0: no cap)", name, p.Quota.MemoryBytes, int64(limits.MaxMemoryBytes))
		}
	}
	return nil
}

// longLived clears the server's read and write deadlines
// (limits.HTTPReadTimeout, limits.HTTPWriteTimeout) for a stream that
// lasts as long as its client stays: the event stream and journal follows.
// Other requests keep them.
func longLived(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/events" || isFollow(r) {
			rc := http.NewResponseController(w)
			// Neither fails on the connections http.Server makes; a writer
			// without deadlines (a test's recorder) has none to clear.
			rc.SetReadDeadline(time.Time{})
			rc.SetWriteDeadline(time.Time{})
		}
		h(w, r)
	}
}
