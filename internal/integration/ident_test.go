package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
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

// agentCert makes the certificate of a machine that only runs units.
func (p securePKI) agentCert(t *testing.T, name string) {
	t.Helper()
	run(t, "tls", "cert", "create", "--agent", "--ca-dir", filepath.Join(p.dir, "ca"), "--name", name, "--ip", "127.0.0.1", "--out", filepath.Join(p.dir, "certs"))
}

func (p securePKI) files(name string) auth.Files {
	return auth.Files{CA: p.ca, Cert: p.cert(name), Key: p.key(name)}
}

// apiClient calls a TLS API as alice with a token.
type apiClient struct {
	t      *testing.T
	hc     *http.Client
	secret string
}

// get GETs url into v, failing on any answer but 200.
func (c apiClient) get(url string, v any) error {
	c.t.Helper()
	code, b, err := c.do("GET", url, nil)
	if err != nil || code != http.StatusOK {
		return fmt.Errorf("GET %s = %d %s %v", url, code, b, err)
	}
	return json.Unmarshal(b, v)
}

func (c apiClient) do(method, url string, body any) (int, []byte, error) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.secret != "" {
		req.Header.Set("Authorization", "Bearer "+c.secret)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// TestCompromisedMachine runs a server and a machine that only runs units
// (an agent certificate, --servers), with TLS and --acl, and attacks the
// cluster as a compromised machine would: with its certificate and etcd's
// own client, and with a Hello of its own making that claims metadata, a
// large capacity and an API address of its choosing.
func TestCompromisedMachine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two daemons")
	}
	p := makePKI(t, "s1")
	p.agentCert(t, "a1")
	p.agentCert(t, "evil")

	s1 := &node{name: "s1", dir: t.TempDir(), api: freeAddr(t), etcdClient: freeAddr(t), peer: freeAddr(t)}
	s1grpc := freeAddr(t)
	s1.args = []string{"daemon", "--name", "s1", "--data-dir", s1.dir, "--api-addr", s1.api, "--grpc-addr", s1grpc,
		"--etcd-embed", "--etcd-client-addr", s1.etcdClient, "--etcd-peer-addr", s1.peer,
		"--tls-ca", p.ca, "--tls-cert", p.cert("s1"), "--tls-key", p.key("s1"), "--acl",
		"--agent-ttl", agentTTL.String(), "--election-ttl", electionTTL.String(), "--log-level", "debug"}
	a1 := &node{name: "a1", dir: t.TempDir(), api: freeAddr(t)}
	a1.args = []string{"daemon", "--name", "a1", "--data-dir", a1.dir, "--api-addr", a1.api, "--servers", s1grpc,
		"--tls-ca", p.ca, "--tls-cert", p.cert("a1"), "--tls-key", p.key("a1"), "--acl",
		"--agent-ttl", agentTTL.String(), "--election-ttl", electionTTL.String(), "--log-level", "debug"}
	nodes := []*node{s1, a1}
	for _, nd := range nodes {
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

	// An agent certificate does not make a server.
	for _, args := range [][]string{
		{"daemon", "--name", "a1", "--data-dir", t.TempDir(), "--etcd-embed", "--etcd-client-addr", freeAddr(t), "--etcd-peer-addr", freeAddr(t)},
		{"daemon", "--name", "a1", "--data-dir", t.TempDir(), "--etcd-endpoints", "https://" + s1.etcdClient},
	} {
		args = append(args, "--tls-ca", p.ca, "--tls-cert", p.cert("a1"), "--tls-key", p.key("a1"), "--acl")
		if out, err := runErr(t, args...); err == nil || !strings.Contains(out, "agent certificate") {
			t.Errorf("flotilla %s = %v, %q; want a refusal naming the agent certificate", strings.Join(args, " "), err, out)
		}
	}

	tc, err := auth.ClientConfig(p.files("alice"))
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	anon := apiClient{t: t, hc: hc}
	var admin apiClient
	waitfor.Until(t, 60*time.Second, "the ACL bootstrap", func() error {
		code, b, err := anon.do("POST", "https://"+s1.api+"/v1/acl/bootstrap", struct{}{})
		if err != nil || code != 200 {
			return fmt.Errorf("%d %s %v", code, b, err)
		}
		var nt apiv1.NewToken
		if err := json.Unmarshal(b, &nt); err != nil {
			return err
		}
		admin = apiClient{t: t, hc: hc, secret: nt.Secret}
		return nil
	})
	_, b, err := admin.do("POST", "https://"+s1.api+"/v1/acl/tokens", apiv1.TokenRequest{Role: "read", Name: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	var nt apiv1.NewToken
	if err := json.Unmarshal(b, &nt); err != nil || nt.Secret == "" {
		t.Fatalf("token create = %s, %v", b, err)
	}
	reader := apiClient{t: t, hc: hc, secret: nt.Secret}

	// The machine that only runs units finds the leader through --servers,
	// and its API forwards a person's request to the leader.
	waitfor.Until(t, 60*time.Second, "a1 joined through --servers, listed through its own API", func() error {
		code, b, err := reader.do("GET", "https://"+a1.api+"/v1/machines", nil)
		if err != nil || code != 200 {
			return fmt.Errorf("%d %s %v", code, b, err)
		}
		if !strings.Contains(string(b), `"a1"`) || !strings.Contains(string(b), `"s1"`) {
			return fmt.Errorf("machines: %s", b)
		}
		return nil
	})

	// 1. Only servers reach etcd: the machine's certificate, with etcd's own
	// client, cannot write a token of its own making (nor read one).
	atc, err := auth.ClientConfig(p.files("evil"))
	if err != nil {
		t.Fatal(err)
	}
	if ecli, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + s1.etcdClient}, TLS: atc, DialTimeout: 3 * time.Second, Logger: zap.NewNop()}); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, perr := ecli.Put(ctx, "/flotilla/acl/tokens/"+strings.Repeat("0", 64), `{"id":"pwn","role":"admin"}`)
		_, gerr := ecli.Get(ctx, "/flotilla/acl/tokens/", clientv3.WithPrefix())
		cancel()
		ecli.Close()
		if perr == nil || gerr == nil {
			t.Errorf("an agent certificate reached the embedded etcd: put %v, get %v", perr, gerr)
		}
	}
	// The server's own certificate does reach it: the refusal is the kind's.
	stc, _ := auth.ClientConfig(p.files("s1"))
	if ecli, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + s1.etcdClient}, TLS: stc, DialTimeout: 3 * time.Second, Logger: zap.NewNop()}); err != nil {
		t.Fatal(err)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := ecli.Get(ctx, "/flotilla/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
			t.Errorf("a server certificate could not read etcd: %v", err)
		}
		cancel()
		ecli.Close()
	}

	// 4. An admin reserves the key role and sets s1's; a machine's own
	// claim of it no longer counts.
	if code, b, err := admin.do("PUT", "https://"+s1.api+"/v1/scheduler", apiv1.Scheduler{Placement: "spread", ReservedMetadata: []string{"role"}}); err != nil || code != 200 {
		t.Fatalf("PUT /v1/scheduler = %d %s %v", code, b, err)
	}
	db := "db"
	if code, b, err := admin.do("PATCH", "https://"+s1.api+"/v1/machines/s1", apiv1.MachinePatch{Metadata: map[string]*string{"role": &db}}); err != nil || code != 200 {
		t.Fatalf("PATCH /v1/machines/s1 = %d %s %v", code, b, err)
	}

	// 3. The rogue: evil's agent certificate, a Hello claiming role=db, 64
	// CPUs and an API address it chose, which it listens on itself.
	var (
		mu      sync.Mutex
		stolen  []string
		clients []string
	)
	evilCreds, err := auth.Load(p.files("evil"), "--tls", "evil")
	if err != nil {
		t.Fatal(err)
	}
	scfg := evilCreds.ServerConfig()
	scfg.ClientAuth = tls.RequestClientCert // takes whatever it is sent
	ln, err := tls.Listen("tcp", "127.0.0.1:0", scfg)
	if err != nil {
		t.Fatal(err)
	}
	rogueAPI := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		stolen = append(stolen, r.Header.Get("Authorization")+" "+r.URL.RawQuery)
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			clients = append(clients, r.TLS.PeerCertificates[0].Subject.CommonName)
		}
		mu.Unlock()
		io.WriteString(w, "nothing to see\n")
	})}
	go rogueAPI.Serve(ln)
	t.Cleanup(func() { rogueAPI.Close() })

	conn, err := grpc.NewClient(s1grpc, grpc.WithTransportCredentials(credentials.NewTLS(atc)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hello := func(ctx context.Context, apiAddr string) (agentpb.Engine_ConnectClient, error) {
		st, err := agentpb.NewEngineClient(conn).Connect(ctx)
		if err != nil {
			return nil, err
		}
		m := &agentpb.Machine{Id: "evil", Ip: "127.0.0.1", ApiAddr: apiAddr, Metadata: map[string]string{"role": "db"},
			CpuPercent: 6400, MemoryBytes: 256 << 30, Drivers: []string{"exec"}, Version: "rogue", Instance: "rogue"}
		if err := st.Send(&agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Hello{Hello: &agentpb.Hello{Machine: m}}}); err != nil {
			return nil, err
		}
		_, err = st.Recv()
		return st, err
	}
	// An API address its certificate does not cover is refused, saying so.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err = hello(ctx, "10.99.0.1:7480")
	cancel()
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "does not cover") {
		t.Errorf("Hello claiming API address 10.99.0.1:7480 = %v, want PermissionDenied saying the certificate does not cover it", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	st, err := hello(ctx, ln.Addr().String())
	if err != nil {
		t.Fatalf("the rogue's Hello with an address its certificate covers: %v", err)
	}
	go func() { // keep the rogue heard, and swallow what it is sent
		for ctx.Err() == nil {
			if st.Send(&agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Heartbeat{Heartbeat: &agentpb.Heartbeat{UnixNano: time.Now().UnixNano()}}}) != nil {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	go func() {
		for {
			if _, err := st.Recv(); err != nil {
				return
			}
		}
	}()
	waitfor.Until(t, 30*time.Second, "the rogue listed, without the reserved key it claimed", func() error {
		var ms apiv1.MachineList
		if err := reader.get("https://"+s1.api+"/v1/machines", &ms); err != nil {
			return err
		}
		for _, m := range ms.Machines {
			if m.ID == "evil" {
				if m.Metadata["role"] != "" {
					t.Errorf("evil's metadata = %v, want its claim of the reserved key role dropped", m.Metadata)
				}
				return nil
			}
		}
		return fmt.Errorf("no evil in %+v", ms)
	})

	// A unit with a secret, constrained to role=db, goes where the admin
	// said role=db is, not to the machine that claimed it (and the most CPUs).
	dir := t.TempDir()
	secret := writeUnit(t, dir, "secret.service", "[Service]\nEnvironment=DB_PASSWORD=hunter2\nExecStart=/bin/sh -c 'echo up; exec sleep 600'\n[X-Fleet]\nMachineMetadata=role=db\n")
	bait := writeUnit(t, dir, "bait.service", "[Service]\nExecStart=/bin/sleep 600\n[X-Fleet]\nMachineID=evil\n")
	mine := writeUnit(t, dir, "mine.service", "[Service]\nExecStart=/bin/sh -c 'echo hello from a1; exec sleep 600'\n[X-Fleet]\nMachineID=a1\n")
	filler := writeUnit(t, dir, "filler.service", "[Service]\nExecStart=/bin/sleep 600\n[X-Fleet]\nMachineID=s1\n")
	base := []string{"--endpoint", "https://" + s1.api, "--ca-file", p.ca, "--cert-file", p.cert("alice"), "--key-file", p.key("alice"), "--token", admin.secret}
	// s1 and the rogue hold a unit each first: spread would then prefer
	// the rogue (its 64 CPUs, its name first) if its claim counted.
	run(t, append(base, "start", "--no-block", bait, mine, filler)...)
	run(t, append(base, "start", "--no-block", secret)...)
	waitfor.Until(t, 30*time.Second, "secret.service placed", func() error {
		var u apiv1.Unit
		if err := reader.get("https://"+s1.api+"/v1/units/secret.service", &u); err != nil {
			return err
		}
		switch u.Machine {
		case "s1":
			return nil
		case "":
			return fmt.Errorf("not placed yet: %+v", u)
		}
		t.Fatalf("secret.service (MachineMetadata=role=db, role reserved) went to %s, want s1", u.Machine)
		return nil
	})

	// The admin reads the journal of the unit on the rogue: the rogue is
	// shown the leader's certificate, never the admin's token.
	code, b, err := admin.do("GET", "https://"+s1.api+"/v1/units/bait.service/journal?lines=5", nil)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got, who := stolen, clients
	mu.Unlock()
	if len(got) == 0 {
		t.Fatalf("journal of bait.service = %d %s: never reached the rogue's address", code, b)
	}
	for _, g := range got {
		if strings.Contains(g, admin.secret) || strings.Contains(g, "Bearer") {
			t.Errorf("the rogue machine received %q: a person's token", g)
		}
	}
	if len(who) == 0 || who[0] != "s1" {
		t.Errorf("the rogue was shown client certificates %v, want s1's (the server's own identity)", who)
	}

	// The honest machine's journal: the leader reads it with its own
	// identity, which a1 accepts; a person's token at a1 itself is not.
	waitfor.Until(t, 30*time.Second, "a1's unit's journal through the leader", func() error {
		code, b, err := reader.do("GET", "https://"+s1.api+"/v1/units/mine.service/journal?lines=5", nil)
		if err != nil || code != 200 || !strings.Contains(string(b), "hello from a1") {
			return fmt.Errorf("%d %q %v", code, b, err)
		}
		return nil
	})
	if code, b, err := reader.do("GET", "https://"+a1.api+"/v1/local/journal/mine.service", nil); err != nil || code != http.StatusForbidden {
		t.Errorf("a person's read token at a1's /v1/local/journal = %d %s %v, want 403 (for servers only)", code, b, err)
	}
	// And a1's API still forwards a person's reads to the leader.
	if code, b, err := reader.do("GET", "https://"+a1.api+"/v1/units/mine.service/journal?lines=5", nil); err != nil || code != 200 || !strings.Contains(string(b), "hello from a1") {
		t.Errorf("journal of mine.service through a1's API = %d %q %v", code, b, err)
	}
}
