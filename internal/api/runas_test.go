package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/api"
	"github.com/flotilla/flotilla/internal/auth"
)

// tokenCluster starts the API with tokens on and returns it with the
// bootstrap admin's secret.
func tokenCluster(t *testing.T) (*cluster, string) {
	t.Helper()
	var tokens *auth.Tokens
	c := start(t, func(cfg *api.Config, cli *clientv3.Client) {
		tokens = auth.NewTokens(cli, "/flotilla/", nil)
		cfg.Tokens = tokens
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go tokens.Run(ctx)
	resp, b := c.do(t, "POST", "/v1/acl/bootstrap", "{}")
	var admin apiv1.NewToken
	if json.Unmarshal([]byte(b), &admin); resp.StatusCode != 200 || admin.Secret == "" {
		t.Fatalf("bootstrap = %d %s", resp.StatusCode, b)
	}
	return c, admin.Secret
}

// newTokenAs makes a token with the admin secret; it fails the test on error.
func newTokenAs(t *testing.T, c *cluster, admin string, req apiv1.TokenRequest) apiv1.NewToken {
	t.Helper()
	body, _ := json.Marshal(req)
	resp, b := c.do(t, "POST", "/v1/acl/tokens", string(body), "Authorization", "Bearer "+admin)
	var nt apiv1.NewToken
	if json.Unmarshal([]byte(b), &nt); resp.StatusCode != 200 {
		t.Fatalf("create token %+v = %d %s", req, resp.StatusCode, b)
	}
	return nt
}

// TestRunAs: a write token submits units that run as the users of its
// --run-as only; a unit that runs as root or gets root's powers back is
// refused with 403 naming the option, on /v1 (PUT, batch) and /fleet/v1,
// unless the token may run units as root ("*", or admin).
func TestRunAs(t *testing.T) {
	c, admin := tokenCluster(t)
	app := newTokenAs(t, c, admin, apiv1.TokenRequest{Name: "ci", Role: "write", RunAs: []string{"app", "nobody"}})
	if strings.Join(app.RunAs, ",") != "app,nobody" {
		t.Fatalf("token's runAs = %v", app.RunAs)
	}
	legacy := newTokenAs(t, c, admin, apiv1.TokenRequest{Name: "old", Role: "write"})
	root := newTokenAs(t, c, admin, apiv1.TokenRequest{Name: "ops", Role: "write", RunAs: []string{"*"}})

	// Bad --run-as lists are refused when the token is made.
	for _, req := range []string{`{"role":"read","runAs":["app"]}`, `{"role":"write","runAs":["a b"]}`, `{"role":"write","runAs":["Root;"]}`} {
		if resp, b := c.do(t, "POST", "/v1/acl/tokens", req, "Authorization", "Bearer "+admin); resp.StatusCode != 400 {
			t.Errorf("create token %s = %d %s, want 400", req, resp.StatusCode, b)
		}
	}

	svc := "[Service]\nExecStart=/bin/sleep 1000\n"
	for _, tc := range []struct {
		name, file string
		msg        string // for app; "" for allowed
	}{
		{"nobody.service", svc + "User=nobody\n", ""},
		{"app.service", svc + "User=app\nGroup=app\n", ""},
		{"nouser.service", svc, "User= is not set"},
		{"root.service", svc + "User=root\n", "User=root is root"},
		{"uid0.service", svc + "User=0\n", "User=0 is root"},
		{"other.service", svc + "User=postgres\n", "User=postgres: token ci"},
		{"plus.service", "[Service]\nExecStart=+/bin/sleep 1000\nUser=nobody\n", `ExecStart=+...`},
		{"bang.service", "[Service]\nExecStartPre=-!/bin/true\nExecStart=/bin/true\nUser=nobody\n", `ExecStartPre=!...`},
		{"ambient.service", svc + "User=nobody\nAmbientCapabilities=CAP_DAC_READ_SEARCH\n", "AmbientCapabilities=CAP_DAC_READ_SEARCH"},
		{"group.service", svc + "User=nobody\nGroup=root\n", "Group=root"},
		{"groups.service", svc + "User=nobody\nSupplementaryGroups=docker\n", "SupplementaryGroups=docker"},
		{"pso.service", svc + "User=nobody\nPermissionsStartOnly=yes\n", "PermissionsStartOnly=yes"},
		{"hostnet.service", "[Service]\nUser=nobody\n[X-Container]\nImage=busybox\nNetwork=host\n", "Network=host"},
		{"hostvol.service", "[Service]\nUser=nobody\n[X-Container]\nImage=busybox\nVolumes=/:/host\n", "Volumes=/:/host"},
		{"data.mount", "[Mount]\nWhat=/dev/sda1\nWhere=/data\n", "a .mount unit"},
	} {
		b := batch(apiv1.UnitChange{Name: tc.name, File: tc.file, DesiredState: "loaded"})
		put, _ := json.Marshal(apiv1.UnitChange{File: tc.file, DesiredState: "loaded"})
		for _, req := range []struct{ method, path, body string }{
			{"POST", "/v1/batch", b},
			{"PUT", "/v1/units/" + tc.name, string(put)},
		} {
			resp, body := c.do(t, req.method, req.path, req.body, "Authorization", "Bearer "+app.Secret)
			var e apiv1.Error
			json.Unmarshal([]byte(body), &e)
			switch {
			case tc.msg == "" && resp.StatusCode != 200:
				t.Errorf("%s %s %s as ci = %d %s, want 200", req.method, req.path, tc.name, resp.StatusCode, body)
			case tc.msg != "" && (resp.StatusCode != 403 || !strings.Contains(e.Error, tc.msg)):
				t.Errorf("%s %s %s as ci = %d %q, want 403 naming %q", req.method, req.path, tc.name, resp.StatusCode, e.Error, tc.msg)
			}
		}
		// A token made before --run-as existed (none) submits no unit
		// with a User=, nor one that runs as root.
		if resp, body := c.do(t, "POST", "/v1/batch", strings.Replace(b, `.service"`, `-old.service"`, 1), "Authorization", "Bearer "+legacy.Secret); resp.StatusCode != 403 {
			t.Errorf("batch %s as a write token without run-as = %d %s, want 403", tc.name, resp.StatusCode, body)
		}
		// "*" and admin may run anything (a mount unit's name is its path).
		if strings.HasSuffix(tc.name, ".mount") {
			continue
		}
		for who, secret := range map[string]string{"ops": root.Secret, "admin": admin} {
			name := strings.Replace(tc.name, ".", "-"+who+".", 1)
			if resp, body := c.do(t, "POST", "/v1/batch", batch(apiv1.UnitChange{Name: name, File: tc.file, DesiredState: "loaded"}), "Authorization", "Bearer "+secret); resp.StatusCode != 200 {
				t.Errorf("batch %s as %s = %d %s, want 200", name, who, resp.StatusCode, body)
			}
		}
	}
	if us, _ := c.eng.Units([]string{"root.service", "plus.service", "nouser.service"}); len(us) != 0 {
		t.Errorf("refused units were written: %v", us)
	}
	// Starting and stopping an existing unit (no file) needs no run-as:
	// its file was checked when it was submitted.
	if resp, body := c.do(t, "POST", "/v1/batch", batch(apiv1.UnitChange{Name: "root-ops.service", DesiredState: "inactive"}), "Authorization", "Bearer "+app.Secret); resp.StatusCode != 200 {
		t.Errorf("stop root-ops.service as ci = %d %s, want 200", resp.StatusCode, body)
	}

	// fleet's API: the same rules.
	fleetUnit := func(user string) string {
		opts := []map[string]string{{"section": "Service", "name": "ExecStart", "value": "/bin/sleep 1000"}}
		if user != "" {
			opts = append(opts, map[string]string{"section": "Service", "name": "User", "value": user})
		}
		b, _ := json.Marshal(map[string]any{"desiredState": "loaded", "options": opts})
		return string(b)
	}
	for _, tc := range []struct {
		user string
		code int
	}{{"", 403}, {"root", 403}, {"nobody", 201}} {
		resp, body := c.do(t, "PUT", "/fleet/v1/units/fleet-"+tc.user+"x.service", fleetUnit(tc.user), "Authorization", "Bearer "+app.Secret)
		if resp.StatusCode != tc.code || tc.code == 403 && !strings.Contains(body, "may not run units as root") {
			t.Errorf("PUT /fleet/v1/units as ci, User=%s = %d %s, want %d", tc.user, resp.StatusCode, body, tc.code)
		}
	}
}

// TestRevertRunAs: a revert is checked against the token as a submit is:
// a token that may run units as app only cannot revert a unit to a version
// an admin made that runs as root; plan is open to a read token, and the
// version made names the token.
func TestRevertRunAs(t *testing.T) {
	c, admin := tokenCluster(t)
	app := newTokenAs(t, c, admin, apiv1.TokenRequest{Name: "ci", Role: "write", RunAs: []string{"app"}})
	reader := newTokenAs(t, c, admin, apiv1.TokenRequest{Name: "eyes", Role: "read"})
	put := func(secret, file string) (int, string) {
		body, _ := json.Marshal(apiv1.UnitChange{File: file})
		resp, b := c.do(t, "PUT", "/v1/units/db.service?replace=true", string(body), "Authorization", "Bearer "+secret)
		return resp.StatusCode, b
	}
	svc := "[Service]\nExecStart=/bin/sleep 1000\n"
	if code, b := put(admin, svc+"User=root\n"); code != 200 {
		t.Fatalf("admin's put = %d %s", code, b)
	}
	if code, b := put(app.Secret, svc+"User=app\n"); code != 200 {
		t.Fatalf("ci's put = %d %s", code, b)
	}
	resp, b := c.do(t, "POST", "/v1/units/db.service/revert", `{"version":1}`, "Authorization", "Bearer "+app.Secret)
	if resp.StatusCode != 403 || !strings.Contains(b, "User=root is root") {
		t.Fatalf("ci's revert to root's version = %d %s, want 403", resp.StatusCode, b)
	}
	resp, b = c.do(t, "POST", "/v1/plan?replace=true", `{"units":[{"name":"db.service","file":"[Service]\nExecStart=/bin/true\nUser=app\n"}]}`, "Authorization", "Bearer "+reader.Secret)
	if resp.StatusCode != 200 || !strings.Contains(b, `"change":"changed"`) {
		t.Fatalf("a read token's plan = %d %s", resp.StatusCode, b)
	}
	resp, b = c.do(t, "GET", "/v1/units/db.service/versions", "", "Authorization", "Bearer "+reader.Secret)
	var l apiv1.VersionList
	if json.Unmarshal([]byte(b), &l); resp.StatusCode != 200 || len(l.Versions) != 2 || l.Versions[1].By != "ci" || !l.Versions[1].Current {
		t.Fatalf("versions = %d %s", resp.StatusCode, b)
	}
	if resp, b := c.do(t, "PUT", "/v1/config/versions", `{"keep":3}`, "Authorization", "Bearer "+app.Secret); resp.StatusCode != 403 {
		t.Fatalf("a write token's versions setting = %d %s, want 403", resp.StatusCode, b)
	}
}
