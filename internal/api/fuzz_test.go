package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/engine"
	"github.com/flotilla/flotilla/internal/limits"
	"github.com/flotilla/flotilla/internal/machine"
	"github.com/flotilla/flotilla/internal/unit"
)

// The write endpoints whose bodies FuzzRequests reads.
const (
	kindPutUnit = iota
	kindBatch
	kindPatchMachine
	kindScheduler
	kinds
)

// requestSeed is one request of the seed corpus: an endpoint (kind), the
// name in its path, and its body.
type requestSeed struct {
	kind uint8
	name string
	body string
}

func requestSeeds() []requestSeed {
	const svc = `[Service]\nExecStart=/bin/sleep infinity\n`
	return []requestSeed{
		{kindPutUnit, "web.service", `{"file":"` + svc + `","desiredState":"launched"}`},
		{kindPutUnit, "web@.service", `{"name":"web@.service","file":"` + svc + `[X-Fleet]\nConflicts=web@*.service\n"}`},
		{kindPutUnit, "web@1.service", `{"desiredState":"loaded"}`},
		{kindPutUnit, "a.service", `{"name":"b.service","file":"` + svc + `"}`},
		{kindPutUnit, "../x", `{"file":"` + svc + `"}`},
		{kindBatch, "", `{"units":[{"name":"a.service","file":"` + svc + `","desiredState":"launched"},{"name":"b.service","file":"[Unit]\nDescription=b\n` + svc + `[X-Fleet]\nMachineMetadata=disk=ssd\nGlobal=true\n"}],"destroy":["c.service"]}`},
		{kindBatch, "", `{"units":[{"name":"a.service","file":"` + svc + `"},{"name":"a.service","desiredState":"inactive"}]}`},
		{kindBatch, "", `{"destroy":["a.service","a.service"]}`},
		{kindBatch, "", `{"units":[{"name":"a.service","file":"[Service\n"}]}`},
		{kindBatch, "", `{"units":[]}`},
		{kindBatch, "", `{"unitz":1}`},
		{kindBatch, "", `[`},
		{kindPatchMachine, "m1", `{"metadata":{"disk":"ssd","region":null}}`},
		{kindPatchMachine, "m1", `{"drain":true}`},
		{kindPatchMachine, "m1", `{"drain":true,"maxParallel":3}`},
		{kindPatchMachine, "m1", `{"drain":false,"maxParallel":3}`},
		{kindPatchMachine, "m1", `{"drain":true,"maxParallel":10001}`},
		{kindPatchMachine, "m1", `{"metadata":{"bad key":"x"}}`},
		{kindPatchMachine, "m1", `{"metadata":{"k":"` + strings.Repeat("v", limits.MetadataValueBytes+1) + `"}}`},
		{kindPatchMachine, "-m1", `{"drain":false}`},
		{kindPatchMachine, "m1", `{}`},
		{kindScheduler, "", `{"placement":"binpack","roles":{"batch":{"weight":0.5,"quota":{"cpuPercent":400,"memoryBytes":1073741824}},"*":{"weight":2}}}`},
		{kindScheduler, "", `{"placement":"spread"}`},
		{kindScheduler, "", `{"placement":"spread","roles":{"x":{"weight":1e300}}}`},
		{kindScheduler, "", `{"placement":"spread","roles":{"x":{"quota":{"cpuPercent":-1}}}}`},
		{kindScheduler, "", `{"placement":"spread","shares":{"x":0.5}}`},
	}
}

// readRequest reads a request of the given kind as its handler does, up
// to the engine: the changes, patch or policy read, or the error answer
// (status and body) when the request is refused.
func readRequest(kind uint8, name string, body []byte) (code int, answer []byte, accepted any) {
	s := &server{cfg: Config{MaxBodyBytes: DefaultMaxBodyBytes}}
	var r *http.Request
	switch kind % kinds {
	case kindPutUnit:
		r = httptest.NewRequest("PUT", "/v1/units/x", bytes.NewReader(body))
		r.SetPathValue("name", name)
	case kindBatch:
		r = httptest.NewRequest("POST", "/v1/batch", bytes.NewReader(body))
	case kindPatchMachine:
		r = httptest.NewRequest("PATCH", "/v1/machines/x", bytes.NewReader(body))
		r.SetPathValue("id", name)
	case kindScheduler:
		r = httptest.NewRequest("PUT", "/v1/scheduler", bytes.NewReader(body))
	}
	w := httptest.NewRecorder()
	var ok bool
	switch kind % kinds {
	case kindPutUnit, kindBatch:
		var changes any
		if kind%kinds == kindPutUnit {
			changes, _, ok = s.readPutUnit(w, r)
		} else {
			changes, _, ok = s.readBatch(w, r)
		}
		accepted = changes
	case kindPatchMachine:
		id, p, okp := s.readMachinePatch(w, r)
		ok, accepted = okp, struct {
			id string
			p  apiv1.MachinePatch
		}{id, p}
	case kindScheduler:
		sc, oks := s.readScheduler(w, r)
		ok, accepted = oks, sc
	}
	if ok {
		return 0, nil, accepted
	}
	return w.Code, w.Body.Bytes(), nil
}

// FuzzRequests: whatever the body of PUT /v1/units/{name}, POST /v1/batch,
// PATCH /v1/machines/{id} or PUT /v1/scheduler, reading it never panics; a
// refused request is answered 400 or 413 with an error naming what is
// wrong; an accepted one is within every limit and valid, so all that is
// left to the engine is the cluster's state (conflicts, unknown units).
//
// The target reads requests as the handlers do, without the engine: a real
// engine commits each accepted request to etcd (an fsync, milliseconds)
// and keeps every unit it accepts, so a million executions would take
// hours and grow its state without end. TestRequestSeeds replays the seeds
// through the real handler on a real engine.
func FuzzRequests(f *testing.F) {
	for _, s := range requestSeeds() {
		f.Add(s.kind, s.name, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, kind uint8, name string, body []byte) {
		code, answer, accepted := readRequest(kind, name, body)
		if code != 0 {
			var e apiv1.Error
			if err := json.Unmarshal(answer, &e); err != nil || e.Error == "" {
				t.Fatalf("kind %d, %q, %q: answer %d %q is not an error naming the problem", kind, name, body, code, answer)
			}
			if !(code == 400 && e.Code == "bad_request" || code == 413 && e.Code == "too_large") {
				t.Fatalf("kind %d, %q, %q: answer %d %+v, want 400 bad_request or 413 too_large", kind, name, body, code, e)
			}
			return
		}
		if err := checkAccepted(kind%kinds, accepted); err != nil {
			t.Fatalf("kind %d, %q, %q was accepted: %v", kind, name, body, err)
		}
	})
}

// checkAccepted checks, independently of the reading, that what was
// accepted is within the limits and valid.
func checkAccepted(kind uint8, accepted any) error {
	switch kind {
	case kindPutUnit, kindBatch:
		changes := accepted.([]engine.Change)
		if len(changes) == 0 || len(changes) > limits.BatchUnits {
			return fmt.Errorf("%d changes", len(changes))
		}
		instances := 0
		for _, c := range changes {
			if c.Range != nil {
				instances += c.Range.Len()
			} else {
				instances++
			}
		}
		if instances > limits.BatchInstances {
			return fmt.Errorf("%d units named, counting ranges' instances", instances)
		}
		seen := map[string]bool{}
		for _, c := range changes {
			if err := unit.ValidateName(c.Name); err != nil {
				return err
			}
			if seen[c.Name] {
				return fmt.Errorf("unit %s twice", c.Name)
			}
			seen[c.Name] = true
			switch {
			case c.Destroy && (c.File != nil || c.DesiredState != ""):
				return fmt.Errorf("destroy of %s carries a change", c.Name)
			case !c.Destroy && c.File == nil && c.DesiredState == "":
				return fmt.Errorf("change of %s changes nothing", c.Name)
			}
			if c.DesiredState != "" {
				if _, err := unit.ParseDesiredState(string(c.DesiredState)); err != nil {
					return err
				}
			}
			if c.File != nil {
				again, err := unit.Parse(c.Name, []byte(c.File.Raw))
				if err != nil || again.Hash != c.File.Hash {
					return fmt.Errorf("file of %s does not parse again to its hash: %v", c.Name, err)
				}
			}
		}
	case kindPatchMachine:
		a := accepted.(struct {
			id string
			p  apiv1.MachinePatch
		})
		if err := machine.ValidateName(a.id); err != nil {
			return err
		}
		if len(a.p.Metadata) == 0 && a.p.Drain == nil || len(a.p.Metadata) > limits.MetadataPairs {
			return fmt.Errorf("%d metadata pairs", len(a.p.Metadata))
		}
		if a.p.MaxParallel != 0 && (a.p.Drain == nil || !*a.p.Drain || a.p.MaxParallel < 1 || a.p.MaxParallel > apiv1.MaxDrainParallel) {
			return fmt.Errorf("maxParallel %d with drain %v", a.p.MaxParallel, a.p.Drain)
		}
		for k, v := range a.p.Metadata {
			if len(k) > limits.MetadataKeyBytes || v != nil && len(*v) > limits.MetadataValueBytes {
				return fmt.Errorf("pair %q over the limits", k)
			}
			if err := unit.ValidateMetadata(k, v); err != nil {
				return err
			}
		}
	case kindScheduler:
		sc := accepted.(apiv1.Scheduler)
		if len(sc.Shares) > 0 || len(sc.Roles) > limits.SchedulerRoles {
			return fmt.Errorf("%d shares, %d roles", len(sc.Shares), len(sc.Roles))
		}
		for name, p := range sc.Roles {
			w := p.Weight
			if len(name) > limits.RoleNameBytes || w != 0 && !(w >= limits.MinRoleWeight && w <= limits.MaxRoleWeight) ||
				p.Quota.CPUPercent < 0 || p.Quota.CPUPercent > limits.MaxCPUPercent ||
				p.Quota.MemoryBytes < 0 || p.Quota.MemoryBytes > limits.MaxMemoryBytes {
				return fmt.Errorf("role %q: %+v over the limits", name, p)
			}
		}
	}
	return nil
}
