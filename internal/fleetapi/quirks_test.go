package fleetapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/daemon/daemontest"
	"github.com/flotilla/flotilla/internal/limits"
	"github.com/flotilla/flotilla/internal/supervisor/supervisortest"
	"github.com/flotilla/flotilla/internal/waitfor"
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

func TestMain(m *testing.M) { supervisortest.Main(m) }

// fleetUnit is what fleetctl reads of a unit: GET /fleet/v1/units/{name}.
type fleetUnit struct {
	DesiredState, CurrentState, MachineID string
}

// fleetctl sends its writes as fleet's generated client does, with
// Content-Type: application/json.
func fleetctlPut(t *testing.T, url, name, body string) {
	t.Helper()
	if code, out := do(t, url, "PUT", "/fleet/v1/units/"+name, body, true); code != 201 && code != 204 {
		t.Fatalf("PUT %s %s = %d %s", name, body, code, out)
	}
}

// fleetctlWait polls as fleetctl's assertUnitState does: GET the unit every
// 250 ms until its currentState is want; it gives up after limit (fleetctl
// polls for ever).
func fleetctlWait(t *testing.T, url, name, want string, limit time.Duration) {
	t.Helper()
	var u fleetUnit
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); {
		time.Sleep(250 * time.Millisecond) // fleetctl's pace, which the test imitates: a condition polled
		code, out := do(t, url, "GET", "/fleet/v1/units/"+name, "", false)
		if err := json.Unmarshal([]byte(out), &u); code != 200 || err != nil {
			t.Fatalf("GET %s = %d %s", name, code, out)
		}
		if u.CurrentState == want {
			return
		}
	}
	t.Fatalf("%s: currentState %q, not %q within %v: fleetctl would wait for ever", name, u.CurrentState, want, limit)
}

// pidOf is the unit's main process as /v1 shows it (0: none running).
func pidOf(t *testing.T, url, name string) int {
	t.Helper()
	code, out := do(t, url, "GET", "/v1/units/"+name, "", false)
	var u apiv1.Unit
	if err := json.Unmarshal([]byte(out), &u); code != 200 || err != nil {
		t.Fatalf("GET /v1/units/%s = %d %s", name, code, out)
	}
	if u.State == nil || u.State.Active != "active" {
		return 0
	}
	return u.State.PID
}

// TestFleetctlRestartShape: fleetctl restart (fleet's TestUnitRestart) sets
// the target loaded, waits for currentState launched, then sets launched and
// waits for launched: it returns, and the unit runs a new process. stop and
// start, run the same way, still wait for what they wait for.
func TestFleetctlRestartShape(t *testing.T) {
	c := daemontest.Start(t, daemontest.Machine{ID: "m1", Exec: true})
	const name = "sleeper.service"
	opts := `[{"section":"Service","name":"ExecStart","value":"/bin/sleep 1000"}]`
	fleetctlPut(t, c.URL, name, `{"name":"`+name+`","desiredState":"launched","options":`+opts+`}`)
	fleetctlWait(t, c.URL, name, "launched", 20*time.Second)
	pid := pidOf(t, c.URL, name)

	for i := range 3 {
		fleetctlPut(t, c.URL, name, `{"name":"`+name+`","desiredState":"loaded"}`)
		fleetctlWait(t, c.URL, name, "launched", 10*time.Second)
		fleetctlPut(t, c.URL, name, `{"name":"`+name+`","desiredState":"launched"}`)
		fleetctlWait(t, c.URL, name, "launched", 10*time.Second)
		var now int
		waitfor.Until(t, 10*time.Second, fmt.Sprintf("restart %d: the unit running a new process", i+1), func() error {
			if now = pidOf(t, c.URL, name); now == 0 || now == pid {
				return fmt.Errorf("pid %d, was %d", now, pid)
			}
			return nil
		})
		pid = now
	}

	// stop waits for loaded, and gets it with the unit stopped.
	fleetctlPut(t, c.URL, name, `{"name":"`+name+`","desiredState":"loaded"}`)
	fleetctlWait(t, c.URL, name, "loaded", 10*time.Second)
	if p := pidOf(t, c.URL, name); p != 0 {
		t.Fatalf("after stop: the unit runs pid %d", p)
	}
	// A later read shows it as it is.
	fleetctlWait(t, c.URL, name, "loaded", time.Second)
	// start waits for launched.
	fleetctlPut(t, c.URL, name, `{"name":"`+name+`","desiredState":"launched"}`)
	fleetctlWait(t, c.URL, name, "launched", 10*time.Second)
	if p := pidOf(t, c.URL, name); p == 0 || p == pid {
		t.Fatalf("after start: pid %d (before the stop: %d)", p, pid)
	}
}

// fleetctlBin is the unmodified fleetctl that $FLOTILLA_TEST_FLEETCTL
// names; the test is skipped without one.
func fleetctlBin(t *testing.T) string {
	bin := os.Getenv("FLOTILLA_TEST_FLEETCTL")
	if bin == "" {
		t.Skip("$FLOTILLA_TEST_FLEETCTL does not name a fleetctl binary (docs/fleet.md says how to build one)")
	}
	return bin
}

// runFleetctl runs fleetctl against endpoint in dir.
func runFleetctl(bin, endpoint, dir string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--endpoint", endpoint}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestFleetctlDetectMachineId is fleet's TestDetectMachineId with the
// unmodified fleetctl: a daemon whose machine name is live elsewhere stays
// up and fleetctl list-machines against it exits 1 with fleetd's words;
// once the other is gone it joins, and list-machines works.
func TestFleetctlDetectMachineId(t *testing.T) {
	bin := fleetctlBin(t)
	c := daemontest.Start(t, daemontest.Machine{ID: "e", NoAgent: true})
	first := c.Add(t, daemontest.Machine{ID: "a", IP: "10.0.0.1"})
	waitfor.Until(t, 10*time.Second, "the leader hearing from the first a", func() error {
		if code, body := do(t, c.URL, "GET", "/fleet/v1/machines", "", false); code != 200 || !strings.Contains(body, "10.0.0.1") {
			return fmt.Errorf("GET /fleet/v1/machines = %d %s", code, body)
		}
		return nil
	})
	second := c.Add(t, daemontest.Machine{ID: "a", IP: "10.0.0.2"})
	var out string
	var err error
	waitfor.Poll(10*time.Second, func() error {
		if out, err = runFleetctl(bin, c.URLs[second], t.TempDir(), "list-machines", "--no-legend"); err == nil {
			return errors.New("fleetctl list-machines succeeded")
		}
		return nil
	})
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(out, "fleet server unable to communicate with etcd") {
		t.Fatalf("fleetctl list-machines against the second a: %v\n%s\nwant exit 1 and fleetd's message", err, out)
	}
	if err := c.Stop(t, first); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 20*time.Second, "fleetctl list-machines once the first a is gone", func() error {
		out, err := runFleetctl(bin, c.URLs[second], t.TempDir(), "list-machines", "--no-legend")
		if err != nil {
			return fmt.Errorf("%v\n%s", err, out)
		}
		if !strings.Contains(out, "10.0.0.2") {
			return fmt.Errorf("%s", out)
		}
		return nil
	})
}

// TestFleetctlRestart runs the unmodified fleetctl (built from coreos/fleet
// as docs/fleet.md says; its path in $FLOTILLA_TEST_FLEETCTL) through
// start, restart (a new process), stop and start of a unit.
func TestFleetctlRestart(t *testing.T) {
	bin := fleetctlBin(t)
	c := daemontest.Start(t, daemontest.Machine{ID: "m1", Exec: true})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello.service"), []byte("[Service]\nExecStart=/bin/sleep 1000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fleetctl := func(args ...string) string {
		t.Helper()
		out, err := runFleetctl(bin, "unix://"+c.Socket, dir, args...)
		if err != nil {
			t.Fatalf("fleetctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	fleetctl("start", "hello.service")
	pid := pidOf(t, c.URL, "hello.service")
	if out := fleetctl("restart", "hello.service"); !strings.Contains(out, "was restarted") {
		t.Errorf("fleetctl restart said:\n%s", out)
	}
	if now := pidOf(t, c.URL, "hello.service"); now == 0 || now == pid {
		t.Errorf("after fleetctl restart: pid %d, was %d", now, pid)
	}
	fleetctl("stop", "hello.service")
	if p := pidOf(t, c.URL, "hello.service"); p != 0 {
		t.Errorf("after fleetctl stop: pid %d runs", p)
	}
	fleetctl("start", "hello.service")
	if p := pidOf(t, c.URL, "hello.service"); p == 0 {
		t.Error("after fleetctl start: no process")
	}
}
