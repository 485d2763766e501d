package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/api"
	"github.com/flotilla/flotilla/internal/auth"
	"github.com/flotilla/flotilla/internal/metrics"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// secureNode is one daemon with mutual TLS and --acl (the exec driver,
// real processes), and HTTPS clients for each kind of caller.
type secureNode struct {
	nd      *node
	pki     securePKI
	clients map[string]*http.Client // by principal
	secrets map[string]string       // token secrets by principal
	url     string
}

// The principals of the authorization matrix: who calls, holding what.
const (
	pNone      = "none"     // a person's certificate, no token
	pRead      = "read"     // read token
	pWrite     = "write"    // write token without --run-as
	pWriteAs   = "write-as" // write token with --run-as nobody
	pAdmin     = "admin"    // the bootstrap admin token
	pMachine   = "machine"  // an agent's certificate (--agent), no token
	pServer    = "server"   // another server's certificate, no token
	pForeign   = "foreign"  // a machine certificate of another CA
	runAsUser  = "nobody"   // the user of pWriteAs
	refusedTLS = 0          // the status of a request TLS refused
)

var principals = []string{pNone, pRead, pWrite, pWriteAs, pAdmin, pMachine, pServer, pForeign}

// startSecureNode runs one daemon with TLS and --acl, bootstraps its ACL
// and makes a token of each kind.
func startSecureNode(t *testing.T) *secureNode {
	t.Helper()
	p := makePKI(t, "n1", "n2")
	run(t, "tls", "cert", "create", "--ca-dir", filepath.Join(p.dir, "ca"), "--name", "w1", "--agent", "--ip", "127.0.0.1", "--out", filepath.Join(p.dir, "certs"))
	other := makePKI(t, "n1")
	nd := &node{name: "n1", dir: t.TempDir(), api: freeAddr(t), etcdClient: freeAddr(t), peer: freeAddr(t)}
	nd.args = []string{"daemon", "--name", "n1", "--data-dir", nd.dir, "--api-addr", nd.api, "--grpc-addr", freeAddr(t),
		"--etcd-embed", "--etcd-client-addr", nd.etcdClient, "--etcd-peer-addr", nd.peer,
		"--tls-ca", p.ca, "--tls-cert", p.cert("n1"), "--tls-key", p.key("n1"), "--acl",
		"--agent-ttl", agentTTL.String(), "--election-ttl", electionTTL.String()}
	os.Chmod(nd.dir, 0o755) // the daemon tightens it
	nd.start(t)
	t.Cleanup(func() {
		nd.shutdown(t)
		if t.Failed() {
			t.Logf("---- log of n1 ----\n%s", tail(nd.log.String(), 60))
		}
	})
	s := &secureNode{nd: nd, pki: p, url: "https://" + nd.api, clients: map[string]*http.Client{}, secrets: map[string]string{}}
	client := func(f auth.Files) *http.Client {
		tc, err := auth.ClientConfig(f)
		if err != nil {
			t.Fatal(err)
		}
		return &http.Client{Timeout: 20 * time.Second,
			Transport:     &http.Transport{TLSClientConfig: tc},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	person := client(auth.Files{CA: p.ca, Cert: p.cert("alice"), Key: p.key("alice")})
	for _, who := range []string{pNone, pRead, pWrite, pWriteAs, pAdmin} {
		s.clients[who] = person
	}
	s.clients[pMachine] = client(auth.Files{CA: p.ca, Cert: p.cert("w1"), Key: p.key("w1")})
	s.clients[pServer] = client(auth.Files{CA: p.ca, Cert: p.cert("n2"), Key: p.key("n2")})
	s.clients[pForeign] = client(auth.Files{CA: p.ca, Cert: other.cert("n1"), Key: other.key("n1")})

	waitfor.Until(t, 60*time.Second, "the ACL bootstrap", func() error {
		code, b, err := s.call(pNone, "POST", "/v1/acl/bootstrap", "{}")
		if err != nil || code != 200 {
			return fmt.Errorf("%d %s %v", code, b, err)
		}
		var nt apiv1.NewToken
		json.Unmarshal([]byte(b), &nt)
		s.secrets[pAdmin] = nt.Secret
		return nil
	})
	for who, req := range map[string]apiv1.TokenRequest{
		pRead:    {Name: "reader", Role: "read"},
		pWrite:   {Name: "writer", Role: "write"},
		pWriteAs: {Name: "runner", Role: "write", RunAs: []string{runAsUser}},
	} {
		body, _ := json.Marshal(req)
		code, b, err := s.call(pAdmin, "POST", "/v1/acl/tokens", string(body))
		var nt apiv1.NewToken
		if json.Unmarshal([]byte(b), &nt); err != nil || code != 200 || nt.Secret == "" {
			t.Fatalf("token %s: %d %s %v", who, code, b, err)
		}
		s.secrets[who] = nt.Secret
	}
	waitfor.Until(t, 60*time.Second, "the leader and its machine", func() error {
		code, b, err := s.call(pRead, "GET", "/v1/machines", "")
		if err != nil || code != 200 || !strings.Contains(b, `"n1"`) {
			return fmt.Errorf("%d %s %v", code, b, err)
		}
		return nil
	})
	return s
}

// call sends a request as who and returns the status (refusedTLS when
// the TLS handshake failed, with err) and the body. A stream's body is
// not waited for.
func (s *secureNode) call(who, method, path, body string) (int, string, error) {
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if sec := s.secrets[who]; sec != "" {
		req.Header.Set("Authorization", "Bearer "+sec)
	}
	resp, err := s.clients[who].Do(req)
	if err != nil {
		return refusedTLS, "", err
	}
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp.StatusCode, "", nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b), nil
}

// matrixRequest is one request of a route's row; %s in its path and body
// is the principal, so that each writes its own unit.
type matrixRequest struct {
	method, path, body string
	need               auth.Role // the least role that passes
	ok                 int       // the status of a caller who may
	// override is the status of principals the role alone does not
	// decide (run-as).
	override map[string]int
}

// expect is the status principal who gets for r.
func (r matrixRequest) expect(who string) int {
	if code, ok := r.override[who]; ok {
		return code
	}
	role := map[string]auth.Role{pNone: auth.RoleNone, pMachine: auth.RoleNone, pServer: auth.RoleNone, pRead: auth.RoleRead,
		pWrite: auth.RoleWrite, pWriteAs: auth.RoleWrite, pAdmin: auth.RoleAdmin}[who]
	switch {
	case who == pForeign:
		return refusedTLS
	case role >= r.need:
		return r.ok
	case role == auth.RoleNone:
		return http.StatusUnauthorized
	}
	return http.StatusForbidden
}

// TestAuthorizationMatrix: every route of the API, generated from the
// router's own patterns (a route without a row fails the test), times
// every principal: no token, read, write, write with --run-as, admin, an
// agent's certificate and another server's without a token (a server reads
// the machine-local routes it forwards to), another CA's certificate. Run
// against a real daemon with TLS and --acl.
func TestAuthorizationMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a daemon")
	}
	nobodyUnit := `{"file":"[Service]\nExecStart=/bin/true\nUser=` + runAsUser + `\n"}`
	rootBatch := `{"units":[{"name":"b-%s.service","file":"[Service]\nExecStart=/bin/true\n"}]}`
	fleetRoot := `{"desiredState":"inactive","options":[{"section":"Service","name":"ExecStart","value":"/bin/true"}]}`
	rows := map[string][]matrixRequest{
		"GET /v1/status":                                 {{method: "GET", path: "/v1/status", need: auth.RoleRead, ok: 200}},
		"GET /v1/units":                                  {{method: "GET", path: "/v1/units", need: auth.RoleRead, ok: 200}},
		"GET /v1/units/{name}":                           {{method: "GET", path: "/v1/units/none-%s.service", need: auth.RoleRead, ok: 404}},
		"PUT /v1/units/{name}":                           {{method: "PUT", path: "/v1/units/mx-%s.service", body: nobodyUnit, need: auth.RoleWrite, ok: 200, override: map[string]int{pWrite: 403}}},
		"DELETE /v1/units/{name}":                        {{method: "DELETE", path: "/v1/units/none-%s.service", need: auth.RoleWrite, ok: 404}},
		"POST /v1/batch":                                 {{method: "POST", path: "/v1/batch", body: rootBatch, need: auth.RoleWrite, ok: 200, override: map[string]int{pWrite: 403, pWriteAs: 403}}},
		"GET /v1/unit-states":                            {{method: "GET", path: "/v1/unit-states", need: auth.RoleRead, ok: 200}},
		"GET /v1/units/{name}/versions":                  {{method: "GET", path: "/v1/units/none-%s.service/versions", need: auth.RoleRead, ok: 404}},
		"GET /v1/units/{name}/versions/{version}":        {{method: "GET", path: "/v1/units/none-%s.service/versions/1", need: auth.RoleRead, ok: 404}},
		"PUT /v1/units/{name}/versions/{version}/tag":    {{method: "PUT", path: "/v1/units/none-%s.service/versions/1/tag", body: `{"tag":"good"}`, need: auth.RoleWrite, ok: 404}},
		"DELETE /v1/units/{name}/versions/{version}/tag": {{method: "DELETE", path: "/v1/units/none-%s.service/versions/1/tag", need: auth.RoleWrite, ok: 404}},
		"POST /v1/units/{name}/revert":                   {{method: "POST", path: "/v1/units/none-%s.service/revert", body: "{}", need: auth.RoleWrite, ok: 404}},
		"GET /v1/config/versions":                        {{method: "GET", path: "/v1/config/versions", need: auth.RoleRead, ok: 200}},
		"PUT /v1/config/versions":                        {{method: "PUT", path: "/v1/config/versions", body: `{"keep":10}`, need: auth.RoleAdmin, ok: 200}},
		"POST /v1/plan":                                  {{method: "POST", path: "/v1/plan", body: rootBatch, need: auth.RoleRead, ok: 200}},
		"GET /v1/deployments":                            {{method: "GET", path: "/v1/deployments", need: auth.RoleRead, ok: 200}},
		"GET /v1/deployments/{unit}":                     {{method: "GET", path: "/v1/deployments/none-%s@.service", need: auth.RoleRead, ok: 404}},
		"POST /v1/deployments/{unit}/{action}":           {{method: "POST", path: "/v1/deployments/none-%s@.service/pause", body: "{}", need: auth.RoleWrite, ok: 404}},
		"GET /v1/state":                                  {{method: "GET", path: "/v1/state", need: auth.RoleRead, ok: 200}},
		"GET /metrics":                                   {{method: "GET", path: "/metrics", need: auth.RoleRead, ok: 200, override: map[string]int{pServer: 200}}},
		"GET /v1/events":                                 {{method: "GET", path: "/v1/events", need: auth.RoleRead, ok: 200}},
		"GET /v1/machines":                               {{method: "GET", path: "/v1/machines", need: auth.RoleRead, ok: 200}},
		"GET /v1/scheduler":                              {{method: "GET", path: "/v1/scheduler", need: auth.RoleRead, ok: 200}},
		"PUT /v1/scheduler":                              {{method: "PUT", path: "/v1/scheduler", body: `{"placement":"binpack"}`, need: auth.RoleAdmin, ok: 200}},
		"PATCH /v1/machines/{id}":                        {{method: "PATCH", path: "/v1/machines/n1", body: `{"metadata":{"by":"%s"}}`, need: auth.RoleWrite, ok: 200}},
		"POST /v1/machines/{id}/enroll":                  {{method: "POST", path: "/v1/machines/w1/enroll", body: "{}", need: auth.RoleAdmin, ok: 400, override: map[string]int{pMachine: 400}}}, // 400: no etcd users in the grpc registry
		"GET /v1/units/{name}/journal":                   {{method: "GET", path: "/v1/units/none-%s.service/journal", need: auth.RoleRead, ok: 404}},
		"GET /v1/local/journal/{name}":                   {{method: "GET", path: "/v1/local/journal/none-%s.service", need: auth.RoleRead, ok: 404, override: map[string]int{pServer: 404}}},
		"POST /v1/acl/bootstrap":                         {{method: "POST", path: "/v1/acl/bootstrap", body: "{}", need: auth.RoleNone, ok: 409}},
		"GET /v1/acl/tokens":                             {{method: "GET", path: "/v1/acl/tokens", need: auth.RoleAdmin, ok: 200}},
		"POST /v1/acl/tokens":                            {{method: "POST", path: "/v1/acl/tokens", body: `{"role":"read","name":"by-%s"}`, need: auth.RoleAdmin, ok: 200}},
		"DELETE /v1/acl/tokens/{id}":                     {{method: "DELETE", path: "/v1/acl/tokens/00000000000000ff", need: auth.RoleAdmin, ok: 404}},
		"GET /ui/":                                       {{method: "GET", path: "/ui/", need: auth.RoleNone, ok: 200}},
		"GET /{$}":                                       {{method: "GET", path: "/", need: auth.RoleNone, ok: 302}},
		"GET /fleet/v1/discovery":                        {{method: "GET", path: "/fleet/v1/discovery", need: auth.RoleRead, ok: 200}},
		"/fleet/v1":                                      {{method: "GET", path: "/fleet/v1", need: auth.RoleRead, ok: 405}},
		"/fleet/v1/": {
			{method: "GET", path: "/fleet/v1/units", need: auth.RoleRead, ok: 200},
			{method: "PUT", path: "/fleet/v1/units/f-%s.service", body: fleetRoot, need: auth.RoleWrite, ok: 201, override: map[string]int{pWrite: 403, pWriteAs: 403}},
			{method: "DELETE", path: "/fleet/v1/units/none-%s.service", need: auth.RoleWrite, ok: 404},
		},
		"/v1/": {{method: "GET", path: "/v1/no-such-route", need: auth.RoleRead, ok: 404}},
	}
	routes := api.Routes(api.Config{Metrics: metrics.New()})
	for _, r := range routes {
		if _, ok := rows[r]; !ok {
			t.Errorf("route %q has no row in the authorization matrix: add one", r)
		}
	}
	for r := range rows {
		if !slices.Contains(routes, r) {
			t.Errorf("the matrix has a row for %q, which the router no longer serves", r)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	s := startSecureNode(t)
	var table strings.Builder
	fmt.Fprintf(&table, "%-42s %s\n", "request", strings.Join(principals, " "))
	slices.Sort(routes)
	for _, route := range routes {
		for _, req := range rows[route] {
			fmt.Fprintf(&table, "%-42s", req.method+" "+req.path)
			for _, who := range principals {
				path, body := req.path, req.body
				if strings.Contains(path, "%s") {
					path = fmt.Sprintf(path, who)
				}
				if strings.Contains(body, "%s") {
					body = fmt.Sprintf(body, who)
				}
				code, b, err := s.call(who, req.method, path, body)
				fmt.Fprintf(&table, " %*d", len(who), code)
				if want := req.expect(who); code != want {
					t.Errorf("%s %s as %s = %d (%s %v), want %d", req.method, path, who, code, strings.TrimSpace(b), err, want)
				}
			}
			table.WriteString("\n")
		}
	}
	t.Logf("status by principal:\n%s", table.String())
}

// TestUnitCannotReadKeys: a unit submitted through the API, run by the
// exec driver as a real process, cannot read the daemon's TLS key or its
// data directory: not as the user a write token may run it as, nor as root
// (a token with --run-as '*'); what it prints goes to its journal, which a
// read token reads back, and holds no key.
func TestUnitCannotReadKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a daemon")
	}
	if os.Geteuid() != 0 {
		t.Skip("the exec driver hides paths when run as root")
	}
	s := startSecureNode(t)
	body, _ := json.Marshal(apiv1.TokenRequest{Name: "ops", Role: "write", RunAs: []string{"*"}})
	code, b, err := s.call(pAdmin, "POST", "/v1/acl/tokens", string(body))
	var nt apiv1.NewToken
	if json.Unmarshal([]byte(b), &nt); err != nil || code != 200 {
		t.Fatalf("token --run-as '*': %d %s %v", code, b, err)
	}
	s.secrets["root"], s.clients["root"] = nt.Secret, s.clients[pWrite]
	key := s.pki.key("n1")
	if b, err := os.ReadFile(key); err != nil || !strings.Contains(string(b), "PRIVATE KEY") {
		t.Fatalf("the daemon's key %s: %v", key, err)
	}
	script := fmt.Sprintf(`echo uid=$(id -u); cat %s; ls -la %s; echo done`, key, s.nd.dir)
	for who, user := range map[string]string{pWriteAs: runAsUser, "root": "root"} {
		name := "thief-" + who + ".service"
		file := fmt.Sprintf("[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/sh -c '%s'\nUser=%s\n", script, user)
		req, _ := json.Marshal(apiv1.UnitChange{File: file, DesiredState: "launched"})
		if code, b, err := s.call(who, "PUT", "/v1/units/"+name, string(req)); err != nil || code != 200 {
			t.Fatalf("PUT %s as %s = %d %s %v", name, who, code, b, err)
		}
		var journal string
		waitfor.Until(t, 60*time.Second, name+" to run", func() error {
			code, b, err := s.call(pRead, "GET", "/v1/units/"+name+"/journal?lines=100", "")
			if err != nil || code != 200 || !strings.Contains(b, "done") {
				return fmt.Errorf("journal: %d %s %v", code, b, err)
			}
			journal = b
			return nil
		})
		if strings.Contains(journal, "PRIVATE KEY") || strings.Contains(journal, "member") || strings.Contains(journal, "units") {
			t.Errorf("%s (User=%s) read the daemon's secrets:\n%s", name, user, journal)
		}
		if !strings.Contains(journal, "uid=") || !strings.Contains(journal, key) {
			t.Errorf("%s: its journal lacks its own output:\n%s", name, journal)
		}
	}
	// The key file and data directory are the daemon's alone.
	for path, want := range map[string]os.FileMode{key: 0o600, s.nd.dir: 0o700} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, %v; want %v", path, fi.Mode().Perm(), err, want)
		}
	}
}
