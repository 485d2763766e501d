package bench

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/flotilla/flotilla/internal/auth"
)

// runTLS are a run's credentials (--tls): a CA made for the run and, in
// the same directory, a machine certificate for etcd, each engine, each
// simulated agent and the bench itself (a machine's, as etcd takes no
// other: the bench reads etcd's metrics), all made with internal/auth as
// `flotilla tls` makes them.
type runTLS struct {
	dir    string
	client *tls.Config // the bench's: its client certificate, the run's CA
	// token is the admin token the bench bootstraps (the engines run with
	// --acl), sent on every request to them once set.
	token string
}

// clientName is the name of the bench's own certificate.
const clientName = "flotilla-bench"

// makeTLS creates the CA and the certificates of machines in dir.
func makeTLS(dir string, machines []string) (*runTLS, error) {
	if _, _, err := auth.CreateCA(dir, 1); err != nil {
		return nil, fmt.Errorf("bench CA: %w", err)
	}
	for _, m := range machines {
		if _, _, err := auth.CreateCert(auth.CertRequest{CADir: dir, Name: m, OutDir: dir, Days: 1}); err != nil {
			return nil, fmt.Errorf("certificate of %s: %w", m, err)
		}
	}
	cert, key, err := auth.CreateCert(auth.CertRequest{CADir: dir, Name: clientName, OutDir: dir, Days: 1})
	if err != nil {
		return nil, fmt.Errorf("the bench's certificate: %w", err)
	}
	client, err := auth.ClientConfig(auth.Files{CA: filepath.Join(dir, auth.CAFile), Cert: cert, Key: key})
	if err != nil {
		return nil, err
	}
	return &runTLS{dir: dir, client: client}, nil
}

// daemonFlags are the --tls-* flags of the daemon named machine.
func (t *runTLS) daemonFlags(machine string) []string {
	if t == nil {
		return nil
	}
	return []string{"--tls-ca", filepath.Join(t.dir, auth.CAFile),
		"--tls-cert", filepath.Join(t.dir, machine+".pem"), "--tls-key", filepath.Join(t.dir, machine+"-key.pem")}
}

// engineFlags are an engine daemon's --tls-* flags, and --acl: with TLS
// the run's engines require a token, as a secured cluster's do.
func (t *runTLS) engineFlags(machine string) []string {
	if t == nil {
		return nil
	}
	return append(t.daemonFlags(machine), "--acl")
}

// scheme is the scheme of every URL of the run: https with TLS.
func (t *runTLS) scheme() string {
	if t == nil {
		return "http"
	}
	return "https"
}

// httpClient returns a client of the run's daemons and etcd.
func (t *runTLS) httpClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: t.withToken(t.pool())}
}

// pool returns a pool of connections to the run's daemons and etcd.
func (t *runTLS) pool() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if t != nil {
		tr.TLSClientConfig = t.client.Clone()
	}
	return tr
}

// withToken returns tr sending the run's token once there is one.
func (t *runTLS) withToken(tr *http.Transport) http.RoundTripper {
	if t == nil {
		return tr
	}
	return tokenTransport{tr, t}
}

// tokenTransport adds the run's token to each request (as an API client
// does with --token), read when the request is sent.
type tokenTransport struct {
	base *http.Transport
	t    *runTLS
}

func (tt tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if tt.t.token == "" {
		return tt.base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+tt.t.token)
	return tt.base.RoundTrip(r)
}
