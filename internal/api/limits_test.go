package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/api"
	"github.com/flotilla/flotilla/internal/etcdtest"
	"github.com/flotilla/flotilla/internal/limits"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// TestLimits: a request over one of the limits is refused with 400 or 413
// naming the limit, nothing reaches etcd, and the leader's term goes on.
func TestLimits(t *testing.T) {
	var cli *clientv3.Client
	// An election TTL of 5 s, above the daemon's default: with the tests' 1 s, a
	// CI machine busy with other packages let the lease lapse while the
	// large refused bodies were read, and the same-term check below failed
	// for a reason no request caused.
	c := startElected(t, etcdtest.Start(t).Client(t), 5*time.Second, func(cfg *api.Config, c *clientv3.Client) { cfg.MaxBodyBytes = 0; cli = c }) // the default, limits.BatchBytes
	_, rev0 := c.eng.IsLeader()
	ctx := context.Background()
	// written is the last revision at which a key of the cluster's data
	// changed: the election's keys left out, as a loaded test machine may
	// let the 1 s election lease lapse and a new term begin meanwhile.
	written := func() int64 {
		t.Helper()
		r, err := cli.Get(ctx, registry.DefaultPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		var last int64
		for _, kv := range r.Kvs {
			if !strings.HasPrefix(string(kv.Key), registry.DefaultPrefix+"election/") {
				last = max(last, kv.ModRevision)
			}
		}
		return last
	}
	before := written()

	metadata := func(n, keyLen, valueLen int) string {
		md := map[string]string{}
		for i := range n {
			md[fmt.Sprintf("k%0*d", keyLen-1, i)] = strings.Repeat("v", valueLen)
		}
		b, _ := json.Marshal(map[string]any{"metadata": md})
		return string(b)
	}
	roles := func(n int, p apiv1.RolePolicy, nameLen int) string {
		rs := map[string]apiv1.RolePolicy{}
		for i := range n {
			rs[fmt.Sprintf("r%0*d", nameLen-1, i)] = p
		}
		b, _ := json.Marshal(apiv1.Scheduler{Placement: "spread", Roles: rs})
		return string(b)
	}
	destroy := func(n int) string {
		b := apiv1.Batch{}
		for i := range n {
			b.Destroy = append(b.Destroy, fmt.Sprintf("u%d.service", i))
		}
		j, _ := json.Marshal(b)
		return string(j)
	}
	ranges := func(n, size int) string { // n ranges of a template that does not exist
		b := apiv1.Batch{}
		for i := range n {
			b.Units = append(b.Units, apiv1.UnitChange{Name: fmt.Sprintf("nope%d@{1..%d}.service", i, size), DesiredState: "launched"})
		}
		j, _ := json.Marshal(b)
		return string(j)
	}
	limitNamed := func(n int) string { return fmt.Sprintf("the limit is %d", n) }
	for _, tc := range []struct {
		name, method, path, body string
		code                     int
		msg                      string
	}{
		{"metadata value", "PATCH", "/v1/machines/m1", metadata(1, 4, limits.MetadataValueBytes+1), 400, limitNamed(limits.MetadataValueBytes)},
		{"1.8 MB metadata value", "PATCH", "/v1/machines/m1", metadata(1, 4, 1_800_000), 400, limitNamed(limits.MetadataValueBytes)},
		{"metadata key", "PATCH", "/v1/machines/m1", metadata(1, limits.MetadataKeyBytes+1, 1), 400, limitNamed(limits.MetadataKeyBytes)},
		{"metadata pairs", "PATCH", "/v1/machines/m1", metadata(limits.MetadataPairs+1, 4, 1), 413, limitNamed(limits.MetadataPairs)},
		{"machine name", "PATCH", "/v1/machines/" + strings.Repeat("m", limits.MachineNameBytes+1), metadata(1, 4, 1), 400, limitNamed(limits.MachineNameBytes)},
		{"machine name syntax", "PATCH", "/v1/machines/m%201", metadata(1, 4, 1), 400, "machine name"},
		{"roles", "PUT", "/v1/scheduler", roles(limits.SchedulerRoles+1, apiv1.RolePolicy{}, 4), 413, limitNamed(limits.SchedulerRoles)},
		{"role name", "PUT", "/v1/scheduler", roles(1, apiv1.RolePolicy{}, limits.RoleNameBytes+1), 400, limitNamed(limits.RoleNameBytes)},
		{"weight", "PUT", "/v1/scheduler", roles(1, apiv1.RolePolicy{Weight: 1e9}, 4), 400, "weight 1e+09 is outside 0.001 to 1000"},
		{"tiny weight", "PUT", "/v1/scheduler", roles(1, apiv1.RolePolicy{Weight: 1e-9}, 4), 400, "outside 0.001 to 1000"},
		{"CPU quota", "PUT", "/v1/scheduler", roles(1, apiv1.RolePolicy{Quota: apiv1.Resources{CPUPercent: limits.MaxCPUPercent + 1}}, 4), 400, "CPU quota"},
		{"memory quota", "PUT", "/v1/scheduler", roles(1, apiv1.RolePolicy{Quota: apiv1.Resources{MemoryBytes: -1}}, 4), 400, "memory quota -1"},
		{"batch units", "POST", "/v1/batch", destroy(limits.BatchUnits + 1), 413, limitNamed(limits.BatchUnits)},
		{"batch instances", "POST", "/v1/batch", ranges(20, 1_000_000), 413, limitNamed(limits.BatchInstances)},
		{"batch instances with destroy", "POST", "/v1/batch", ranges(1, 1_000_000)[:len(ranges(1, 1_000_000))-1] + `,"destroy":["x.service"]}`, 413, limitNamed(limits.BatchInstances)},
		{"request body", "PUT", "/v1/units/a.service", `{"file":"` + strings.Repeat("x", limits.RequestBytes) + `"}`, 413, fmt.Sprintf("exceeds %d bytes", limits.RequestBytes)},
		{"batch body", "POST", "/v1/batch", `{"destroy":["` + strings.Repeat("x", limits.BatchBytes) + `"]}`, 413, fmt.Sprintf("exceeds %d bytes", limits.BatchBytes)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := c.do(t, tc.method, tc.path, tc.body)
			var e apiv1.Error
			json.Unmarshal([]byte(body), &e)
			if resp.StatusCode != tc.code || !strings.Contains(e.Error, tc.msg) {
				t.Errorf("%s %s = %d %.300q, want %d naming %q", tc.method, tc.path, resp.StatusCode, e.Error, tc.code, tc.msg)
			}
		})
	}
	if ok, rev := c.eng.IsLeader(); !ok || rev != rev0 {
		t.Errorf("after refused requests IsLeader() = %v, %d; want the same term %d", ok, rev, rev0)
	}
	if after := written(); after != before {
		t.Errorf("the cluster's data changed at revision %d (last before: %d): a refused request was written", after, before)
	}

	// At the limits, the same requests are taken (once a leader answers:
	// see written).
	for _, tc := range []struct{ method, path, body string }{
		{"PATCH", "/v1/machines/m1", metadata(limits.MetadataPairs, limits.MetadataKeyBytes, limits.MetadataValueBytes)},
		{"PUT", "/v1/scheduler", roles(limits.SchedulerRoles, apiv1.RolePolicy{Weight: limits.MaxRoleWeight,
			Quota: apiv1.Resources{CPUPercent: limits.MaxCPUPercent, MemoryBytes: limits.MaxMemoryBytes}}, limits.RoleNameBytes)},
	} {
		var code int
		var body string
		waitfor.Until(t, 15*time.Second, tc.method+" "+tc.path+" answered by a leader", func() error {
			var resp *http.Response
			resp, body = c.do(t, tc.method, tc.path, tc.body)
			if code = resp.StatusCode; code == http.StatusServiceUnavailable {
				return fmt.Errorf("503 %.300s (a new term is being elected)", body)
			}
			return nil
		})
		if code != 200 {
			t.Errorf("%s %s at the limits = %d %.300s, want 200", tc.method, tc.path, code, body)
		}
	}
}

// TestRequestSeeds: the fuzz seeds of FuzzRequests, sent to the real
// handler on a real engine, are refused exactly as reading them without
// the engine refuses them, and what reading accepts is not refused as too
// large or malformed by the handler; the leader's term goes on.
func TestRequestSeeds(t *testing.T) {
	c := start(t)
	_, rev0 := c.eng.IsLeader()
	for _, s := range api.RequestSeeds() {
		method, path, body := s.Request()
		if strings.Contains(path, "..") {
			continue // the client would clean the path: reading alone covers it
		}
		wantCode, wantAnswer := s.Read()
		resp, got := c.do(t, method, path, body)
		switch {
		case wantCode != 0 && (resp.StatusCode != wantCode || strings.TrimSpace(got) != strings.TrimSpace(string(wantAnswer))):
			t.Errorf("%s %s %.80s = %d %s; reading it alone answers %d %s", method, path, body, resp.StatusCode, got, wantCode, wantAnswer)
		case wantCode == 0 && (resp.StatusCode == 413 || resp.StatusCode == 400 && strings.Contains(got, "malformed")):
			t.Errorf("%s %s %.80s = %d %s; reading it alone accepts it", method, path, body, resp.StatusCode, got)
		}
	}
	if ok, rev := c.eng.IsLeader(); !ok || rev != rev0 {
		t.Errorf("after the seeds IsLeader() = %v, %d; want the same term %d", ok, rev, rev0)
	}
}
