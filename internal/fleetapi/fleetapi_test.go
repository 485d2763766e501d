package fleetapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/daemon/daemontest"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// start runs a one-machine daemon (machine m1, 127.0.0.1, the sim driver)
// and returns its API's URL.
func start(t *testing.T) string {
	t.Helper()
	return daemontest.Start(t, daemontest.Machine{ID: "m1"}).URL
}

// do sends a request, with Content-Type: application/json when ctype is
// true, and returns the status and the body.
func do(t *testing.T, url, method, path, body string, ctype bool) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
	if ctype {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// golden is one request and the exact answer it must get.
type golden struct {
	method, path, body string
	ctype              bool
	code               int
	want               string
}

func check(t *testing.T, url string, tests []golden) {
	t.Helper()
	for _, g := range tests {
		code, body := do(t, url, g.method, g.path, g.body, g.ctype)
		if code != g.code || body != g.want {
			t.Errorf("%s %s %s\n got %d %s\nwant %d %s", g.method, g.path, g.body, code, body, g.code, g.want)
		}
	}
}

// eventually polls a GET until its body is want.
func eventually(t *testing.T, url, path, want string) {
	t.Helper()
	waitfor.Until(t, 10*time.Second, "GET "+path, func() error {
		if code, body := do(t, url, "GET", path, "", false); code != http.StatusOK || body != want {
			return fmt.Errorf("\n got %d %s\nwant %s", code, body, want)
		}
		return nil
	})
}

const (
	helloOpts = `[{"section":"Service","name":"ExecStart","value":"/bin/bash -c \"while true; do echo Hello, World!; sleep 1; done\""}]`
	// fleet's hash of hello.service (sha1sum of the serialized file).
	helloHash = "3750b3e9f3962a56c7582929426e9abb012754cf"
	byeOpts   = `[{"section":"Unit","name":"Description","value":"bye"},{"section":"Service","name":"ExecStart","value":"/bin/sleep 1000"}]`
	// printf '[Unit]\nDescription=bye\n\n[Service]\nExecStart=/bin/sleep 1000\n' | sha1sum
	byeHash = "99fe7d27625156720aa81fa41ee330af246ab391"
)

func TestUnitsGolden(t *testing.T) {
	url := start(t)
	check(t, url, []golden{
		{"GET", "/fleet/v1/units", "", false, 200, `{}`},
		{"GET", "/fleet/v1/state", "", false, 200, `{}`},
		{"GET", "/fleet/v1/machines", "", false, 200, `{"machines":[{"id":"m1","primaryIP":"127.0.0.1"}]}`},
		{"PUT", "/fleet/v1/units/hello.service", `{"desiredState":"launched","options":` + helloOpts + `}`, false, 415,
			`{"error":{"code":415,"message":"PUT /fleet/v1/units/hello.service needs a JSON body with Content-Type: application/json, got \"\""}}`},
		{"PUT", "/fleet/v1/units/hello.service", `{"desiredState":"launched"}`, true, 409,
			`{"error":{"code":409,"message":"unit does not exist and options field empty"}}`},
		{"PUT", "/fleet/v1/units/hello.service", `{"name":"other.service","desiredState":"launched","options":` + helloOpts + `}`, true, 400,
			`{"error":{"code":400,"message":"name in URL \"hello.service\" differs from unit name in request body \"other.service\""}}`},
		{"PUT", "/fleet/v1/units/hello.service", `{"desiredState":"launched",`, true, 400,
			`{"error":{"code":400,"message":"unable to decode body: unexpected EOF"}}`},
		{"PUT", "/fleet/v1/units/hello.service", `{"desiredState":"running","options":` + helloOpts + `}`, true, 400,
			`{"error":{"code":400,"message":"unit hello.service: desiredState: unknown desired state \"running\" (want inactive, loaded or launched)"}}`},
		{"PUT", "/fleet/v1/units/hello.service", `{"name":"hello.service","desiredState":"loaded","options":` + helloOpts + `}`, true, 201, ``},
		{"PUT", "/fleet/v1/units/hello.service", `{"name":"hello.service"}`, true, 409,
			`{"error":{"code":409,"message":"must provide DesiredState to update existing unit"}}`},
		// The same options again only set the desired state.
		{"PUT", "/fleet/v1/units/hello.service", `{"desiredState":"launched","options":` + helloOpts + `}`, true, 204, ``},
		{"PUT", "/fleet/v1/units/hello@.service", `{"desiredState":"launched","options":` + helloOpts + `}`, true, 400,
			`{"error":{"code":400,"message":"cannot activate template \"hello@.service\""}}`},
		{"GET", "/fleet/v1/units/nope.service", "", false, 404, `{"error":{"code":404,"message":"unit does not exist"}}`},
		{"DELETE", "/fleet/v1/units/nope.service", "", false, 404, `{"error":{"code":404,"message":"unit does not exist"}}`},
		{"POST", "/fleet/v1/units", "{}", true, 405, `{"error":{"code":405,"message":"only GET supported against this resource"}}`},
		{"GET", "/fleet/v1/nope", "", false, 404, `{"error":{"code":404,"message":"no such resource: /fleet/v1/nope"}}`},
		{"GET", "/fleet/v1/units?nextPageToken=!!", "", false, 400,
			`{"error":{"code":400,"message":"invalid value of nextPageToken query parameter \"!!\""}}`},
		// limit 50, page 1: another server's token.
		{"GET", "/fleet/v1/units?nextPageToken=MgABAA==", "", false, 400, `{"error":{"code":400,"message":"token limit must be 100"}}`},
	})
	unit := `{"name":"hello.service","options":` + helloOpts + `,"desiredState":"launched","currentState":"launched","machineID":"m1"}`
	eventually(t, url, "/fleet/v1/units/hello.service", unit)
	check(t, url, []golden{{"GET", "/fleet/v1/units", "", false, 200, `{"units":[` + unit + `]}`}})
	state := `{"states":[{"name":"hello.service","hash":"` + helloHash + `","machineID":"m1","systemdLoadState":"loaded","systemdActiveState":"active","systemdSubState":"running"}]}`
	eventually(t, url, "/fleet/v1/state", state)
	check(t, url, []golden{
		{"GET", "/fleet/v1/state?unitName=hello.service", "", false, 200, state},
		{"GET", "/fleet/v1/state?machineID=m1", "", false, 200, state},
		{"GET", "/fleet/v1/state?machineID=m2", "", false, 200, `{}`},
		{"GET", "/fleet/v1/state?unitName=hello", "", false, 200, `{}`},
		// One unit's state, as fleetctl start asks once the unit is launched.
		{"GET", "/fleet/v1/state/hello.service", "", false, 200, `{"name":"hello.service","hash":"` + helloHash + `","machineID":"m1","systemdLoadState":"loaded","systemdActiveState":"active","systemdSubState":"running"}`},
		{"GET", "/fleet/v1/state/hello", "", false, 404, `{"error":{"code":404,"message":"unit state does not exist"}}`},
		{"GET", "/fleet/v1/state/hello*", "", false, 404, `{"error":{"code":404,"message":"unit state does not exist"}}`},
		{"POST", "/fleet/v1/state/hello.service", "{}", true, 405, `{"error":{"code":405,"message":"only GET supported against this resource"}}`},
	})

	// New options replace the unit: it runs the new file, with its hash.
	check(t, url, []golden{{"PUT", "/fleet/v1/units/hello.service", `{"desiredState":"launched","options":` + byeOpts + `}`, true, 201, ``}})
	eventually(t, url, "/fleet/v1/state", strings.ReplaceAll(state, helloHash, byeHash))
	eventually(t, url, "/fleet/v1/units/hello.service",
		`{"name":"hello.service","options":`+byeOpts+`,"desiredState":"launched","currentState":"launched","machineID":"m1"}`)

	check(t, url, []golden{
		{"DELETE", "/fleet/v1/units/hello.service", "", false, 204, ``},
		{"DELETE", "/fleet/v1/units/hello.service", "", false, 404, `{"error":{"code":404,"message":"unit does not exist"}}`},
	})
	eventually(t, url, "/fleet/v1/state", `{}`)
}

func TestUnplaceableReason(t *testing.T) {
	url := start(t)
	opts := `[{"section":"Service","name":"ExecStart","value":"/bin/true"},{"section":"X-Fleet","name":"MachineMetadata","value":"disk=ssd"}]`
	check(t, url, []golden{{"PUT", "/fleet/v1/units/ssd.service", `{"desiredState":"launched","options":` + opts + `}`, true, 201, ``}})
	// The PUT is answered once the unit is written; the pass that finds
	// no machine for it (and says why) comes just after.
	var (
		u    struct{ MachineID, CurrentState, Reason string }
		body string
	)
	waitfor.Until(t, 10*time.Second, "ssd.service with a reason", func() error {
		var code int
		code, body = do(t, url, "GET", "/fleet/v1/units/ssd.service", "", false)
		if err := json.Unmarshal([]byte(body), &u); code != 200 || err != nil {
			t.Fatalf("GET ssd.service: %d %s", code, body)
		}
		if u.Reason == "" {
			return fmt.Errorf("%s", body)
		}
		return nil
	})
	if u.MachineID != "" || u.CurrentState != "inactive" || !strings.Contains(u.Reason, "disk") {
		t.Errorf("GET ssd.service = %s, want no machineID, currentState inactive and a reason naming the metadata disk", body)
	}
}

func TestPaging(t *testing.T) {
	url := start(t)
	var b apiv1.Batch
	for i := range 150 {
		b.Units = append(b.Units, apiv1.UnitChange{Name: fmt.Sprintf("u%03d.service", i), File: "[Service]\nExecStart=/bin/true\n"})
	}
	body, _ := json.Marshal(b)
	if code, out := do(t, url, "POST", "/v1/batch", string(body), true); code != 200 {
		t.Fatalf("POST /v1/batch: %d %s", code, out)
	}
	var names []string
	path, pages := "/fleet/v1/units", 0
	for {
		code, out := do(t, url, "GET", path, "", false)
		var p struct {
			Units []struct {
				Name string
			}
			NextPageToken string
		}
		if err := json.Unmarshal([]byte(out), &p); code != 200 || err != nil {
			t.Fatalf("GET %s: %d %s", path, code, out)
		}
		pages++
		for _, u := range p.Units {
			names = append(names, u.Name)
		}
		if p.NextPageToken == "" {
			break
		}
		if p.NextPageToken != "ZAACAA==" { // limit 100, page 2, as fleet encodes it
			t.Fatalf("GET %s: nextPageToken %q, want ZAACAA==", path, p.NextPageToken)
		}
		path = "/fleet/v1/units?nextPageToken=" + p.NextPageToken
	}
	if pages != 2 || len(names) != 150 || names[0] != "u000.service" || names[100] != "u100.service" || names[149] != "u149.service" {
		t.Errorf("paging through /fleet/v1/units: %d pages, %d units (%v…), want 2 pages of 150 units in order", pages, len(names), names[:min(3, len(names))])
	}
}

func TestMachinesPatchGolden(t *testing.T) {
	url := start(t)
	check(t, url, []golden{
		{"PATCH", "/fleet/v1/machines", `[{"op":"add","path":"/m1/metadata/disk","value":{"value":"ssd"}},{"op":"add","path":"/m1/metadata/zone","value":"a"}]`, true, 204, ``},
		{"GET", "/fleet/v1/machines", "", false, 200, `{"machines":[{"id":"m1","primaryIP":"127.0.0.1","metadata":{"disk":"ssd","zone":"a"}}]}`},
		{"PATCH", "/fleet/v1/machines", `[{"op":"remove","path":"/m1/metadata/zone"},{"op":"replace","path":"/m1/metadata/disk","value":{"value":"hdd"}}]`, true, 204, ``},
		{"GET", "/fleet/v1/machines", "", false, 200, `{"machines":[{"id":"m1","primaryIP":"127.0.0.1","metadata":{"disk":"hdd"}}]}`},
		{"PATCH", "/fleet/v1/machines", `[{"op":"move","path":"/m1/metadata/disk"}]`, true, 400,
			`{"error":{"code":400,"message":"ops[0]: invalid op \"move\": expect add, remove, or replace"}}`},
		{"PATCH", "/fleet/v1/machines", `[{"op":"add","path":"/m1/disk","value":"x"}]`, true, 400,
			`{"error":{"code":400,"message":"ops[0]: machine metadata path \"/m1/disk\" invalid: want /MACHINE/metadata/KEY"}}`},
		{"PATCH", "/fleet/v1/machines", `[{"op":"add","path":"/m1/metadata/disk"}]`, true, 400,
			`{"error":{"code":400,"message":"ops[0]: invalid value: add and replace require a value"}}`},
		{"DELETE", "/fleet/v1/machines", "", false, 405, `{"error":{"code":405,"message":"only GET and PATCH supported against this resource"}}`},
	})
	code, body := do(t, url, "GET", "/fleet/v1/discovery", "", false)
	var d struct{ ID, BasePath string }
	if err := json.Unmarshal([]byte(body), &d); code != 200 || err != nil || d.ID != "fleet:v1" || d.BasePath != "/fleet/v1/" {
		t.Errorf("GET /fleet/v1/discovery = %d %.200s, want 200 and a discovery document of fleet:v1 at /fleet/v1/", code, body)
	}
}
