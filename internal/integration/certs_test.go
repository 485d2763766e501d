package integration

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/waitfor"
)

// TestCertReload: a daemon given SIGHUP presents its renewed certificate on
// new connections, without a restart, and says when it expires in
// flotilla_cert_expiry_seconds; a certificate that does not check is
// refused and the one loaded kept. Judged from outside: the certificate a
// TLS handshake with the daemon's API receives.
func TestCertReload(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a daemon")
	}
	p := makePKI(t, "n1")
	nd := &node{name: "n1", dir: t.TempDir(), api: freeAddr(t), etcdClient: freeAddr(t), peer: freeAddr(t)}
	nd.args = []string{"daemon", "--name", "n1", "--data-dir", nd.dir, "--api-addr", nd.api, "--grpc-addr", freeAddr(t),
		"--etcd-embed", "--etcd-client-addr", nd.etcdClient, "--etcd-peer-addr", nd.peer,
		"--tls-ca", p.ca, "--tls-cert", p.cert("n1"), "--tls-key", p.key("n1"), "--acl", "--metrics-public",
		"--no-agent", "--election-ttl", electionTTL.String()}
	nd.start(t)
	t.Cleanup(func() {
		nd.shutdown(t)
		if t.Failed() {
			t.Logf("---- log of n1 ----\n%s", tail(nd.log.String(), 40))
		}
	})
	alice, err := tls.LoadX509KeyPair(p.cert("alice"), p.key("alice"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(p.ca)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(caPEM)
	cfg := &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{alice}}
	// served is the certificate a new connection to the API gets.
	served := func() (*x509.Certificate, error) {
		c, err := tls.Dial("tcp", nd.api, cfg)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0], nil
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}, Timeout: 5 * time.Second}
	expiry := regexp.MustCompile(`(?m)^flotilla_cert_expiry_seconds\{cert="machine"\} (\S+)$`)
	// published is the machine certificate's expiry in /metrics.
	// Prometheus writes the shortest form of the float (1.8273412e+09), so
	// it is parsed, not compared as text.
	published := func() (int64, error) {
		resp, err := hc.Get("https://" + nd.api + "/metrics")
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		m := expiry.FindSubmatch(b)
		if m == nil {
			return 0, fmt.Errorf("no flotilla_cert_expiry_seconds{cert=\"machine\"} in /metrics")
		}
		f, err := strconv.ParseFloat(string(m[1]), 64)
		return int64(f), err
	}
	var first *x509.Certificate
	waitfor.Until(t, 60*time.Second, "the API serving TLS", func() (err error) { first, err = served(); return err })
	if got, err := published(); err != nil || got != first.NotAfter.Unix() {
		t.Errorf("expiry in /metrics = %d, %v; want %d", got, err, first.NotAfter.Unix())
	}

	// Renewed, for ten days: SIGHUP, and new connections get it.
	os.Remove(p.cert("n1"))
	os.Remove(p.key("n1"))
	run(t, "tls", "cert", "create", "--ca-dir", filepath.Join(p.dir, "ca"), "--name", "n1", "--ip", "127.0.0.1", "--days", "10", "--out", filepath.Join(p.dir, "certs"))
	nd.cmd.Process.Signal(syscall.SIGHUP)
	var renewed *x509.Certificate
	waitfor.Until(t, 10*time.Second, "the renewed certificate served", func() (err error) {
		if renewed, err = served(); err == nil && renewed.SerialNumber.Cmp(first.SerialNumber) == 0 {
			err = fmt.Errorf("still serial %s", first.SerialNumber)
		}
		return err
	})
	if got, err := published(); err != nil || got != renewed.NotAfter.Unix() {
		t.Errorf("expiry in /metrics after reload = %d, %v; want %d", got, err, renewed.NotAfter.Unix())
	}
	if !strings.Contains(nd.log.String(), "expires soon") {
		t.Error("no warning in the log for a certificate ten days from its end")
	}

	// A person's certificate in its place is refused; the renewed one stays.
	for _, f := range [][2]string{{p.cert("alice"), p.cert("n1")}, {p.key("alice"), p.key("n1")}} {
		b, err := os.ReadFile(f[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f[1], b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	nd.cmd.Process.Signal(syscall.SIGHUP)
	waitfor.Until(t, 10*time.Second, "the refusal logged", func() error {
		if !strings.Contains(nd.log.String(), "cannot reload the certificate") {
			return fmt.Errorf("not in the log yet")
		}
		return nil
	})
	if c, err := served(); err != nil || c.SerialNumber.Cmp(renewed.SerialNumber) != 0 {
		t.Errorf("after a refused reload the API serves %v, %v; want the renewed certificate", c.SerialNumber, err)
	}
	if !nd.running() {
		t.Fatal("the daemon exited on SIGHUP")
	}
}
