package auth_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flotilla/flotilla/internal/auth"
	"github.com/flotilla/flotilla/internal/etcdtest"
	"github.com/flotilla/flotilla/internal/waitfor"
)

type pki struct {
	dir, ca string
}

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	ca, _, err := auth.CreateCA(filepath.Join(dir, "ca"), 0)
	if err != nil {
		t.Fatal(err)
	}
	return pki{dir: dir, ca: ca}
}

func (p pki) cert(t *testing.T, name string, client bool) auth.Files {
	t.Helper()
	c, k, err := auth.CreateCert(auth.CertRequest{CADir: filepath.Join(p.dir, "ca"), Name: name, Client: client, OutDir: filepath.Join(p.dir, "certs")})
	if err != nil {
		t.Fatal(err)
	}
	return auth.Files{CA: p.ca, Cert: c, Key: k}
}

func TestCreateRefusesToOverwrite(t *testing.T) {
	p := newPKI(t)
	if _, _, err := auth.CreateCA(filepath.Join(p.dir, "ca"), 0); !errors.Is(err, auth.ErrExists) {
		t.Errorf("CreateCA over an existing CA = %v, want ErrExists", err)
	}
	f := p.cert(t, "n1", false)
	before, _ := os.ReadFile(f.Key)
	_, _, err := auth.CreateCert(auth.CertRequest{CADir: filepath.Join(p.dir, "ca"), Name: "n1", OutDir: filepath.Join(p.dir, "certs")})
	if !errors.Is(err, auth.ErrExists) {
		t.Errorf("CreateCert over an existing certificate = %v, want ErrExists", err)
	}
	if after, _ := os.ReadFile(f.Key); string(after) != string(before) {
		t.Error("the existing key was changed")
	}
	for _, r := range []auth.CertRequest{
		{CADir: filepath.Join(p.dir, "ca"), Name: "../evil"},
		{CADir: filepath.Join(p.dir, "ca"), Name: "alice", Client: true, DNSNames: []string{"a.example"}},
		{CADir: filepath.Join(p.dir, "nope"), Name: "n2", OutDir: p.dir},
		{Name: "n3"},
	} {
		if _, _, err := auth.CreateCert(r); err == nil {
			t.Errorf("CreateCert(%+v) succeeded, want an error", r)
		}
	}
}

func TestLoad(t *testing.T) {
	p, other := newPKI(t), newPKI(t)
	n1 := p.cert(t, "n1", false)
	alice := p.cert(t, "alice", true)
	foreign := other.cert(t, "n1", false)
	if _, err := auth.Load(n1, "--tls", "n1"); err != nil {
		t.Fatalf("Load(n1) = %v", err)
	}
	for _, tc := range []struct {
		name    string
		f       auth.Files
		machine string
		want    string
	}{
		{"another machine's", n1, "n2", `names machine "n1"`},
		{"a client certificate", alice, "alice", "client certificate"},
		{"another CA's", auth.Files{CA: n1.CA, Cert: foreign.Cert, Key: foreign.Key}, "n1", "not valid under"},
		{"missing key", auth.Files{CA: n1.CA, Cert: n1.Cert}, "n1", "go together"},
		{"key of another cert", auth.Files{CA: n1.CA, Cert: n1.Cert, Key: alice.Key}, "n1", "--tls-cert and --tls-key"},
	} {
		if _, err := auth.Load(tc.f, "--tls", tc.machine); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%s) = %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}

// TestHandshakes runs real TLS on loopback: a machine's server admits
// clients the CA signed, and no one else; a machine dialing admits only
// servers that are machines.
func TestHandshakes(t *testing.T) {
	p, other := newPKI(t), newPKI(t)
	n1, err := auth.Load(p.cert(t, "n1", false), "--tls", "n1")
	if err != nil {
		t.Fatal(err)
	}
	n2, err := auth.Load(p.cert(t, "n2", false), "--tls", "n2")
	if err != nil {
		t.Fatal(err)
	}
	serve := func(cfg *tls.Config) string {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					c.SetDeadline(time.Now().Add(5 * time.Second))
					if err := c.(*tls.Conn).Handshake(); err == nil {
						c.Write([]byte("ok"))
					}
				}()
			}
		}()
		return ln.Addr().String()
	}
	dial := func(addr string, cfg *tls.Config) error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c) // a refused client certificate shows here in TLS 1.3
		if err != nil {
			return err
		}
		if string(b) != "ok" {
			return errors.New("no answer")
		}
		return nil
	}
	machine := serve(n1.ServerConfig())
	clientCfg := func(f auth.Files) *tls.Config {
		c, err := auth.ClientConfig(f)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	alice := p.cert(t, "alice", true)
	if err := dial(machine, n2.ClientConfig()); err != nil {
		t.Errorf("machine to machine: %v", err)
	}
	if err := dial(machine, clientCfg(alice)); err != nil {
		t.Errorf("a client certificate of the CA: %v", err)
	}
	if err := dial(machine, clientCfg(auth.Files{CA: alice.CA})); err == nil {
		t.Error("a client without a certificate was served")
	}
	o := other.cert(t, "n2", false)
	if err := dial(machine, clientCfg(auth.Files{CA: alice.CA, Cert: o.Cert, Key: o.Key})); err == nil {
		t.Error("a client with another CA's certificate was served")
	}
	if err := dial(machine, clientCfg(auth.Files{CA: o.CA, Cert: alice.Cert, Key: alice.Key})); err == nil {
		t.Error("the client trusted a server of another CA")
	}
	// A daemon does not forward to a server holding a mere client certificate.
	aliceCert, _ := tls.LoadX509KeyPair(alice.Cert, alice.Key)
	srv := n1.ServerConfig()
	srv.Certificates = []tls.Certificate{aliceCert}
	if err := dial(serve(srv), n2.ClientConfig()); err == nil {
		t.Error("a machine dialed a server whose certificate is not a machine's")
	}

	// An agent-only machine's certificate: a machine's, but not a server's.
	c, k, err := auth.CreateCert(auth.CertRequest{CADir: filepath.Join(p.dir, "ca"), Name: "a1", Agent: true, OutDir: filepath.Join(p.dir, "certs")})
	if err != nil {
		t.Fatal(err)
	}
	a1, err := auth.Load(auth.Files{CA: p.ca, Cert: c, Key: k}, "--tls", "a1")
	if err != nil {
		t.Fatal(err)
	}
	if a1.Kind() != auth.KindAgent || n1.Kind() != auth.KindServer {
		t.Errorf("kinds = %v and %v, want agent and server", a1.Kind(), n1.Kind())
	}
	agentAddr := serve(a1.ServerConfig())
	if err := dial(agentAddr, n2.ClientConfig()); err != nil {
		t.Errorf("a server dialing an agent machine: %v", err)
	}
	if err := dial(agentAddr, n2.MachineClientConfig("a1")); err != nil {
		t.Errorf("a server dialing machine a1 by name: %v", err)
	}
	if err := dial(agentAddr, n2.MachineClientConfig("n1")); err == nil {
		t.Error("a1 passed for machine n1")
	}
	if err := dial(agentAddr, n2.ServerClientConfig()); err == nil {
		t.Error("an agent machine passed for a server")
	}
	if err := dial(machine, a1.ServerClientConfig()); err != nil {
		t.Errorf("an agent machine dialing a server: %v", err)
	}
	if _, _, err := auth.CreateCert(auth.CertRequest{CADir: filepath.Join(p.dir, "ca"), Name: "x", Agent: true, Client: true, OutDir: p.dir}); err == nil {
		t.Error("CreateCert with Agent and Client succeeded")
	}
}

func TestTokens(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := auth.NewTokens(srv.Client(t), "/flotilla/", nil)
	b := auth.NewTokens(srv.Client(t), "/flotilla/", nil) // another daemon
	go a.Run(ctx)
	go b.Run(ctx)

	admin, secret, err := a.Bootstrap(ctx)
	if err != nil || admin.Role != "admin" || secret == "" {
		t.Fatalf("Bootstrap = %+v, %q, %v", admin, secret, err)
	}
	if _, _, err := b.Bootstrap(ctx); !errors.Is(err, auth.ErrBootstrapped) {
		t.Errorf("second Bootstrap = %v, want ErrBootstrapped", err)
	}
	if got, err := b.Lookup(ctx, secret); err != nil || got.ID != admin.ID {
		t.Errorf("other daemon Lookup(admin) = %+v, %v", got, err)
	}
	reader, rs, err := a.Create(ctx, "ci", auth.RoleRead, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.Lookup(ctx, rs); err != nil || got.Role != "read" || got.Name != "ci" {
		t.Errorf("Lookup(read token) at once on another daemon = %+v, %v", got, err)
	}
	if _, err := b.Lookup(ctx, "flt_nope"); !errors.Is(err, auth.ErrUnknownToken) {
		t.Errorf("Lookup(unknown) = %v, want ErrUnknownToken", err)
	}
	if _, err := b.Lookup(ctx, ""); !errors.Is(err, auth.ErrNoToken) {
		t.Errorf("Lookup(\"\") = %v, want ErrNoToken", err)
	}
	// Only hashes are stored.
	resp, err := srv.Client(t).Get(ctx, "/flotilla/acl/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Key)+string(kv.Value), rs) || strings.Contains(string(kv.Key)+string(kv.Value), secret) {
			t.Fatalf("a secret is stored in etcd: %s", kv.Key)
		}
	}
	ts, err := b.List(ctx)
	if err != nil || len(ts) != 2 {
		t.Fatalf("List = %v, %v", ts, err)
	}
	if _, err := a.Revoke(ctx, reader.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Revoke(ctx, reader.ID); !errors.Is(err, auth.ErrTokenNotFound) {
		t.Errorf("second Revoke = %v, want ErrTokenNotFound", err)
	}
	waitfor.Until(t, 10*time.Second, "the other daemon refusing the revoked token", func() error {
		if _, err := b.Lookup(ctx, rs); !errors.Is(err, auth.ErrUnknownToken) {
			return fmt.Errorf("Lookup = %v, want ErrUnknownToken", err)
		}
		return nil
	})
}

func TestRequired(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		want         auth.Role
	}{
		{"GET", "/ui/app.js", auth.RoleNone},
		{"POST", "/v1/acl/bootstrap", auth.RoleNone},
		{"GET", "/v1/units", auth.RoleRead},
		{"GET", "/v1/units/a.service/journal", auth.RoleRead},
		{"GET", "/metrics", auth.RoleRead},
		{"GET", "/v1/scheduler", auth.RoleRead},
		{"POST", "/v1/batch", auth.RoleWrite},
		{"DELETE", "/v1/units/a.service", auth.RoleWrite},
		{"PATCH", "/v1/machines/m1", auth.RoleWrite},
		{"PUT", "/v1/scheduler", auth.RoleAdmin},
		{"GET", "/v1/acl/tokens", auth.RoleAdmin},
		{"DELETE", "/v1/acl/tokens/x", auth.RoleAdmin},
	} {
		if got := auth.Required(tc.method, tc.path); got != tc.want {
			t.Errorf("Required(%s %s) = %v, want %v", tc.method, tc.path, got, tc.want)
		}
	}
}

// BenchmarkMutualHandshake measures one mutual TLS handshake between two
// machines on loopback (both sides' CPU), what each agent stream, API
// connection and etcd connection pays once when TLS is on.
func BenchmarkMutualHandshake(b *testing.B) {
	dir := b.TempDir()
	if _, _, err := auth.CreateCA(filepath.Join(dir, "ca"), 0); err != nil {
		b.Fatal(err)
	}
	load := func(name string) *auth.Credentials {
		c, k, err := auth.CreateCert(auth.CertRequest{CADir: filepath.Join(dir, "ca"), Name: name, OutDir: dir})
		if err != nil {
			b.Fatal(err)
		}
		cr, err := auth.Load(auth.Files{CA: filepath.Join(dir, "ca", "ca.pem"), Cert: c, Key: k}, "--tls", name)
		if err != nil {
			b.Fatal(err)
		}
		return cr
	}
	srv, cli := load("n1"), load("n2")
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv.ServerConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { c.(*tls.Conn).Handshake(); c.Write([]byte{1}); c.Close() }()
		}
	}()
	b.ResetTimer()
	for b.Loop() {
		c, err := tls.Dial("tcp", ln.Addr().String(), cli.ClientConfig())
		if err != nil {
			b.Fatal(err)
		}
		var one [1]byte
		if _, err := io.ReadFull(c, one[:]); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
