package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/auth"
	"github.com/flotilla/flotilla/internal/waitfor"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// run runs the flotilla binary with args and returns its standard output.
func run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := runErr(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func runErr(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runEnv(t, nil, args...)
}

// runEnv runs the flotilla binary with args and env added to the environment.
func runEnv(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, flotillaBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String() + errb.String(), fmt.Errorf("flotilla %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// securePKI is what `flotilla tls` makes for a test: a CA, a certificate
// per machine, one for a person, and a machine certificate of another CA.
type securePKI struct {
	dir, ca string
}

func (p securePKI) cert(name string) string { return filepath.Join(p.dir, "certs", name+".pem") }
func (p securePKI) key(name string) string  { return filepath.Join(p.dir, "certs", name+"-key.pem") }

func makePKI(t *testing.T, machines ...string) securePKI {
	t.Helper()
	p := securePKI{dir: t.TempDir()}
	p.ca = filepath.Join(p.dir, "ca", "ca.pem")
	run(t, "tls", "ca", "create", "--dir", filepath.Join(p.dir, "ca"))
	for _, m := range machines {
		run(t, "tls", "cert", "create", "--ca-dir", filepath.Join(p.dir, "ca"), "--name", m, "--ip", "127.0.0.1", "--out", filepath.Join(p.dir, "certs"))
	}
	run(t, "tls", "cert", "create", "--ca-dir", filepath.Join(p.dir, "ca"), "--name", "alice", "--client", "--out", filepath.Join(p.dir, "certs"))
	return p
}

// TestSecureCluster runs three daemons with mutual TLS and --acl, with
// certificates made by `flotilla tls`, and attacks them from outside.
func TestSecureCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-daemon cluster")
	}
	p := makePKI(t, "n1", "n2", "n3")
	other := makePKI(t, "n1")

	var nodes []*node
	var initial []string
	grpcAddrs := map[string]string{}
	for i := range 3 {
		nd := &node{name: fmt.Sprintf("n%d", i+1), dir: t.TempDir(), api: freeAddr(t), etcdClient: freeAddr(t), peer: freeAddr(t)}
		grpcAddrs[nd.name] = freeAddr(t)
		initial = append(initial, nd.name+"=https://"+nd.peer)
		nodes = append(nodes, nd)
	}
	for _, nd := range nodes {
		nd.args = []string{"daemon", "--name", nd.name, "--data-dir", nd.dir, "--api-addr", nd.api, "--grpc-addr", grpcAddrs[nd.name],
			"--etcd-embed", "--etcd-client-addr", nd.etcdClient, "--etcd-peer-addr", nd.peer,
			"--etcd-initial-cluster", strings.Join(initial, ","),
			"--tls-ca", p.ca, "--tls-cert", p.cert(nd.name), "--tls-key", p.key(nd.name), "--acl",
			"--agent-ttl", agentTTL.String(), "--election-ttl", electionTTL.String(), "--log-level", "debug"}
		nd.start(t)
	}
	t.Cleanup(func() {
		for _, nd := range nodes {
			nd.shutdown(t)
		}
		if t.Failed() {
			for _, nd := range nodes {
				t.Logf("---- log of %s ----\n%s", nd.name, tail(nd.log.String(), 60))
			}
		}
	})
	// cli runs the CLI as alice against nd, with token secret if not "".
	cli := func(nd *node, secret string, args ...string) (string, error) {
		t.Helper()
		base := []string{"--endpoint", "https://" + nd.api, "--ca-file", p.ca, "--cert-file", p.cert("alice"), "--key-file", p.key("alice")}
		if secret != "" {
			base = append(base, "--token", secret)
		}
		return runErr(t, append(base, args...)...)
	}

	// No token: refused, saying so. The bootstrap needs none, once.
	var boot string
	waitfor.Until(t, 60*time.Second, "the ACL bootstrap", func() error {
		out, err := cli(nodes[1], "", "acl", "bootstrap")
		if err != nil {
			return err
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		boot = lines[len(lines)-1]
		return nil
	})
	if out, err := cli(nodes[2], "", "acl", "bootstrap"); err == nil || !strings.Contains(out, "already bootstrapped") {
		t.Errorf("second acl bootstrap = %v, %q; want a refusal", err, out)
	}
	if out, err := cli(nodes[0], "", "list-units"); err == nil || !strings.Contains(out, "needs an API token") {
		t.Errorf("list-units without a token = %v, %q; want a refusal naming the token", err, out)
	}
	secrets := map[string]string{"admin": boot}
	for _, role := range []string{"read", "write"} {
		args := []string{"token", "create", "--role", role, "--name", role + "er", "-o", "json"}
		if role == "write" {
			args = append(args, "--run-as", "*") // its units run as root
		}
		out, err := cli(nodes[0], boot, args...)
		if err != nil {
			t.Fatal(err)
		}
		var nt apiv1.NewToken
		if err := json.Unmarshal([]byte(out), &nt); err != nil || nt.Secret == "" || nt.Role != role {
			t.Fatalf("token create --role %s -o json = %q, %v", role, out, err)
		}
		secrets[role] = nt.Secret
	}
	waitfor.Until(t, 60*time.Second, "three machines through every daemon (forwarding over TLS)", func() error {
		for _, nd := range nodes {
			out, err := cli(nd, secrets["read"], "list-machines", "--no-legend")
			if err != nil {
				return err
			}
			if n := strings.Count(strings.TrimSpace(out), "\n") + 1; n != 3 {
				return fmt.Errorf("%s lists %d machines: %q", nd.name, n, out)
			}
		}
		return nil
	})

	// Roles.
	dir := t.TempDir()
	unitPath := writeUnit(t, dir, "hello.service", fmt.Sprintf(sleeper, "hello", "hello"))
	if out, err := cli(nodes[2], secrets["read"], "start", unitPath); err == nil || !strings.Contains(out, "needs role write") {
		t.Errorf("start with a read token = %v, %q; want a refusal naming the role", err, out)
	}
	if _, err := cli(nodes[2], secrets["write"], "start", unitPath); err != nil {
		t.Fatal(err)
	}
	if out, err := cli(nodes[0], secrets["read"], "list-units", "--no-legend"); err != nil || !strings.Contains(out, "active") {
		t.Errorf("list-units with a read token = %v, %q; want hello.service active", err, out)
	}
	if out, err := cli(nodes[0], secrets["write"], "token", "list"); err == nil || !strings.Contains(out, "needs role admin") {
		t.Errorf("token list with a write token = %v, %q; want a refusal", err, out)
	}
	// The same settings from the environment.
	env := []string{"FLOTILLA_ENDPOINT=https://" + nodes[1].api, "FLOTILLA_CA_FILE=" + p.ca, "FLOTILLA_CERT_FILE=" + p.cert("alice"),
		"FLOTILLA_KEY_FILE=" + p.key("alice"), "FLOTILLA_TOKEN=" + secrets["read"]}
	if out, err := runEnv(t, env, "list-units", "--no-legend"); err != nil || !strings.Contains(out, "hello.service") {
		t.Errorf("list-units configured by FLOTILLA_* = %v, %q", err, out)
	}
	if out, err := cli(nodes[0], "flt_guessed", "list-units"); err == nil || !strings.Contains(out, "unknown") {
		t.Errorf("list-units with a made-up token = %v, %q; want a refusal", err, out)
	}

	// Plain HTTP against the TLS API gets nothing of the cluster.
	if resp, err := http.Get("http://" + nodes[0].api + "/v1/units"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || strings.Contains(string(b), "hello.service") {
			t.Errorf("plain HTTP GET /v1/units = %s %q; want 400 and no data", resp.Status, b)
		}
	}
	// HTTPS without a client certificate, or with another CA's.
	for what, f := range map[string]auth.Files{
		"no client certificate":    {CA: p.ca},
		"another CA's certificate": {CA: p.ca, Cert: other.cert("n1"), Key: other.key("n1")},
		"a server of another CA":   {CA: other.ca, Cert: p.cert("alice"), Key: p.key("alice")},
	} {
		tc, err := auth.ClientConfig(f)
		if err != nil {
			t.Fatal(err)
		}
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
		req, _ := http.NewRequest("GET", "https://"+nodes[0].api+"/v1/units", nil)
		req.Header.Set("Authorization", "Bearer "+secrets["admin"])
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			t.Errorf("GET /v1/units with %s = %s, want a failed handshake", what, resp.Status)
		}
	}

	// The agents' gRPC: a machine's certificate for another machine's Hello,
	// a person's certificate, another CA's: each refused.
	leader, err := leaderName(cli, nodes[0], secrets["read"])
	if err != nil {
		t.Fatal(err)
	}
	victim := "n1"
	if leader == victim {
		victim = "n2"
	}
	thief := map[string]string{"n1": "n3", "n2": "n3"}[victim]
	hello := func(f auth.Files, machine string) error {
		tc, err := auth.ClientConfig(f)
		if err != nil {
			return err
		}
		conn, err := grpc.NewClient(grpcAddrs[leader], grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := agentpb.NewEngineClient(conn).Connect(ctx)
		if err != nil {
			return err
		}
		if err := st.Send(&agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Hello{Hello: &agentpb.Hello{Machine: &agentpb.Machine{Id: machine, Ip: "127.0.0.1"}}}}); err != nil {
			_, err = st.Recv()
			return err
		}
		m, err := st.Recv()
		if err != nil {
			return err
		}
		return fmt.Errorf("the leader answered %v", m)
	}
	for what, tc := range map[string]struct {
		f       auth.Files
		machine string
		code    codes.Code
	}{
		thief + "'s certificate as " + victim: {auth.Files{CA: p.ca, Cert: p.cert(thief), Key: p.key(thief)}, victim, codes.PermissionDenied},
		"a person's certificate":              {auth.Files{CA: p.ca, Cert: p.cert("alice"), Key: p.key("alice")}, "alice", codes.PermissionDenied},
		"another CA's certificate":            {auth.Files{CA: p.ca, Cert: other.cert("n1"), Key: other.key("n1")}, victim, codes.Unavailable},
	} {
		err := hello(tc.f, tc.machine)
		if status.Code(err) != tc.code {
			t.Errorf("Hello with %s = %v, want %v", what, err, tc.code)
		}
	}
	// The victim's agent was not cut off: it still reports its units.
	if out, err := cli(nodes[0], secrets["read"], "list-machines", "--no-legend"); err != nil || !strings.Contains(out, victim) {
		t.Errorf("after the refused Hellos, list-machines = %v, %q; want %s listed", err, out, victim)
	}

	// The embedded etcd serves machines only: a person's certificate of the
	// same CA does not reach the tokens behind the API's roles.
	tc, err := auth.ClientConfig(auth.Files{CA: p.ca, Cert: p.cert("alice"), Key: p.key("alice")})
	if err != nil {
		t.Fatal(err)
	}
	ecli, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + nodes[0].etcdClient}, TLS: tc, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, gerr := ecli.Get(ctx, "/flotilla/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		cancel()
		ecli.Close()
		if gerr == nil {
			t.Error("a client certificate read the embedded etcd")
		}
	}

	// A revoked token is refused from then on, by every daemon.
	out, err := cli(nodes[0], boot, "token", "list", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var toks []apiv1.Token
	json.Unmarshal([]byte(out), &toks)
	for _, tk := range toks {
		if tk.Role == "read" {
			if _, err := cli(nodes[1], boot, "token", "revoke", tk.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitfor.Until(t, 10*time.Second, "the revoked token refused everywhere", func() error {
		for _, nd := range nodes {
			if out, err := cli(nd, secrets["read"], "list-units"); err == nil || !strings.Contains(out, "unknown") {
				return fmt.Errorf("%s: %v, %q", nd.name, err, out)
			}
		}
		return nil
	})
}

func leaderName(cli func(*node, string, ...string) (string, error), nd *node, secret string) (string, error) {
	out, err := cli(nd, secret, "list-machines", "-o", "json")
	if err != nil {
		return "", err
	}
	var ms []machineRow
	if err := json.Unmarshal([]byte(out), &ms); err != nil {
		return "", err
	}
	return leaderAmong(ms)
}

// TestDevDriveBy: `flotilla dev` runs open on loopback with no setup, but
// a web page cannot make it act: the cross-site text/plain POST that used
// to launch a unit is refused and starts nothing, while the CLI and the
// dashboard keep working.
func TestDevDriveBy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a daemon")
	}
	nd := &node{name: "dev", dir: t.TempDir(), api: freeAddr(t)}
	nd.args = []string{"dev", "--data-dir", nd.dir, "--api-addr", nd.api}
	nd.start(t)
	t.Cleanup(func() { nd.shutdown(t) })
	waitfor.Until(t, 30*time.Second, "dev up", func() error { _, err := cli(t, nd, "list-machines"); return err })

	body := `{"units":[{"name":"pwn.service","file":"[Service]\nExecStart=/usr/bin/id\n","desiredState":"launched"}]}`
	for what, hdr := range map[string]map[string]string{
		"cross-site text/plain": {"Content-Type": "text/plain", "Origin": "http://evil.example"},
		"text/plain":            {"Content-Type": "text/plain"},
		"rebound DNS name":      {"Content-Type": "application/json", "Host": "evil.example"},
		"cross-site JSON (no CORS preflight answer needed)": {"Content-Type": "application/json", "Origin": "http://evil.example"},
	} {
		req, _ := http.NewRequest("POST", "http://"+nd.api+"/v1/batch", strings.NewReader(body))
		for k, v := range hdr {
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusUnsupportedMediaType {
			t.Errorf("%s POST /v1/batch = %s %s, want 403 or 415", what, resp.Status, b)
		}
	}
	if out := mustCLI(t, nd, "list-unit-files", "--no-legend"); strings.Contains(out, "pwn") {
		t.Fatalf("a refused request made a unit: %q", out)
	}
	// The CLI and the dashboard still work.
	p := writeUnit(t, t.TempDir(), "ok.service", fmt.Sprintf(sleeper, "ok", "ok"))
	mustCLI(t, nd, "start", p)
	resp, err := http.Get("http://" + nd.api + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /ui/ = %s", resp.Status)
	}
}

// TestSafeByDefault: a daemon that would listen beyond loopback without TLS
// and --acl refuses to start, saying what to give.
func TestSafeByDefault(t *testing.T) {
	dir := t.TempDir()
	p := makePKI(t, "n1")
	tlsArgs := []string{"--tls-ca", p.ca, "--tls-cert", p.cert("n1"), "--tls-key", p.key("n1")}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"daemon", "--data-dir", dir, "--etcd-embed", "--name", "n1", "--api-addr", "0.0.0.0:0"}, "--api-addr 0.0.0.0:0 listens beyond loopback"},
		{[]string{"daemon", "--data-dir", dir, "--etcd-embed", "--name", "n1", "--grpc-addr", ":0"}, "--insecure"},
		{append([]string{"daemon", "--data-dir", dir, "--etcd-embed", "--name", "n1", "--api-addr", "0.0.0.0:0"}, tlsArgs...), "--acl"},
		{[]string{"dev", "--data-dir", dir, "--api-addr", "0.0.0.0:0"}, "listens beyond loopback"},
		{append([]string{"daemon", "--data-dir", dir, "--etcd-embed", "--name", "n2"}, tlsArgs...), `names machine "n1"`},
		{append([]string{"daemon", "--data-dir", dir, "--etcd-embed", "--name", "n1", "--etcd-initial-cluster", "n1=http://127.0.0.1:1"}, tlsArgs...), "https://"},
		{[]string{"daemon", "--data-dir", dir, "--etcd-embed", "--name", "n1", "--tls-cert", p.cert("n1")}, "give all three"},
	} {
		out, err := runErr(t, tc.args...)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("flotilla %s = %v, %q; want a failure naming %q", strings.Join(tc.args, " "), err, out, tc.want)
		}
	}
}
