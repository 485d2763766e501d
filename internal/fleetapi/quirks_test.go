package fleetapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/flotilla/flotilla/internal/daemon/daemontest"
	"github.com/flotilla/flotilla/internal/limits"
)

// fleetMetadataOp is the op of fleet's functional tests
// (functional/machines_test.go), whose value has no JSON tag: it is sent
// as "Value".
type fleetMetadataOp struct {
	Operation string `json:"op"`
	Path      string `json:"path"`
	Value     struct {
		Value string `json:"value"`
	}
}

// fleetRequest sends a request as fleet's functional tests do
// (getHTTPResponse): a bare http.NewRequest, no Content-Type header.
func fleetRequest(t *testing.T, method, url, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), strings.TrimSpace(string(b))
}

func fleetOps(t *testing.T, ops ...[3]string) string {
	t.Helper()
	var out []fleetMetadataOp
	for _, o := range ops {
		op := fleetMetadataOp{Operation: o[0], Path: o[1]}
		op.Value.Value = o[2]
		out = append(out, op)
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMachinesPatchFleetShape: fleet's TestMachinesPatchAddModify,
// TestMachinesPatchDelete and TestMachinesPatchBad send PATCH
// /fleet/v1/machines with no Content-Type at all, and check that every
// answer, the 204s included, is typed application/json.
func TestMachinesPatchFleetShape(t *testing.T) {
	c := daemontest.Start(t, daemontest.Machine{ID: "m0"}, daemontest.Machine{ID: "m1", IP: "127.0.0.2"})
	url := c.URL + "/fleet/v1/machines"
	patch := func(body string, want int) string {
		t.Helper()
		code, ctype, out := fleetRequest(t, "PATCH", url, body)
		if code != want || !strings.Contains(ctype, "application/json") {
			t.Fatalf("PATCH %.200s\n= %d (Content-Type %q) %.300s\nwant %d, application/json", body, code, ctype, out, want)
		}
		return out
	}
	machines := func() string {
		t.Helper()
		code, ctype, out := fleetRequest(t, "GET", url, "")
		if code != 200 || !strings.Contains(ctype, "application/json") {
			t.Fatalf("GET %s = %d %q %s", url, code, ctype, out)
		}
		return out
	}

	// TestMachinesPatchAddModify
	patch(fleetOps(t, [3]string{"add", "/m0/metadata/foo", "bar"}, [3]string{"replace", "/m1/metadata/ping", "splat"}), 204)
	want := `{"machines":[{"id":"m0","primaryIP":"127.0.0.1","metadata":{"foo":"bar"}},{"id":"m1","primaryIP":"127.0.0.2","metadata":{"ping":"splat"}}]}`
	if got := machines(); got != want {
		t.Fatalf("machines after add and replace:\n got %s\nwant %s", got, want)
	}
	// TestMachinesPatchDelete
	patch(fleetOps(t, [3]string{"remove", "/m0/metadata/foo", ""}, [3]string{"remove", "/m1/metadata/ping", ""}), 204)
	if got, want := machines(), `{"machines":[{"id":"m0","primaryIP":"127.0.0.1"},{"id":"m1","primaryIP":"127.0.0.2"}]}`; got != want {
		t.Fatalf("machines after remove:\n got %s\nwant %s", got, want)
	}
	// TestMachinesPatchBad: a bad op, a bad path, a bad value.
	patch(fleetOps(t, [3]string{"noop", "/m0/metadata/foo", "bar"}), 400)
	patch(fleetOps(t, [3]string{"add", "/m0/foo", "bar"}), 400)
	patch(fleetOps(t, [3]string{"add", "/m0/metadata/foo", ""}), 400)

	// The limits of PATCH /v1/machines/{id}, answered alike.
	for _, tc := range []struct {
		what, body string
		code       int
		want       string
	}{
		{"a 1 MB value", fleetOps(t, [3]string{"add", "/m0/metadata/big", strings.Repeat("v", 1<<20)}), 400, fmt.Sprintf("the limit is %d", limits.MetadataValueBytes)},
		{"a 300-byte key", fleetOps(t, [3]string{"add", "/m0/metadata/" + strings.Repeat("k", 300), "v"}), 400, fmt.Sprintf("the limit is %d", limits.MetadataKeyBytes)},
		{"65 pairs", fleetOps(t, manyPairs("m0", limits.MetadataPairs+1)...), 413, fmt.Sprintf("%d metadata pairs; the limit is %d", limits.MetadataPairs+1, limits.MetadataPairs)},
		{"a 3 MB body", fleetOps(t, [3]string{"add", "/m0/metadata/big", strings.Repeat("v", 3<<20)}), 413, fmt.Sprintf("exceeds %d bytes", limits.RequestBytes)},
	} {
		if out := patch(tc.body, tc.code); !strings.Contains(out, tc.want) {
			t.Errorf("PATCH with %s: %s, want a message with %q", tc.what, out, tc.want)
		}
	}
	patch(fleetOps(t, manyPairs("m0", limits.MetadataPairs)...), 204)

	// What a web page could send is still refused: a typed body that is
	// not JSON (a form); and a bare body anywhere but fleet's PATCH (fleet
	// itself refused a PUT of a unit without its JSON type).
	for _, tc := range []struct{ method, path, ctype string }{
		{"PATCH", "/fleet/v1/machines", "text/plain"},
		{"PUT", "/fleet/v1/units/x.service", "application/x-www-form-urlencoded"},
		{"PUT", "/fleet/v1/units/x.service", ""},
		{"POST", "/v1/batch", ""},
		{"PUT", "/v1/units/x.service", ""},
		{"PATCH", "/v1/machines/m0", ""},
	} {
		req, _ := http.NewRequest(tc.method, c.URL+tc.path, strings.NewReader(`{}`))
		if tc.ctype != "" {
			req.Header.Set("Content-Type", tc.ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnsupportedMediaType {
			t.Errorf("%s %s with Content-Type %q = %d, want 415", tc.method, tc.path, tc.ctype, resp.StatusCode)
		}
	}
}

func manyPairs(machine string, n int) [][3]string {
	var ops [][3]string
	for i := range n {
		ops = append(ops, [3]string{"add", fmt.Sprintf("/%s/metadata/k%d", machine, i), "v"})
	}
	return ops
}
