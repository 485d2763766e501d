package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// Files names a CA certificate, a certificate it signed and that
// certificate's key, all PEM.
type Files struct {
	CA, Cert, Key string
}

// Set reports whether any of the files is named.
func (f Files) Set() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// Credentials are a machine's: the cluster CA, and the machine's
// certificate and key. Every TLS connection of a daemon, served or dialed,
// is mutually authenticated with them.
type Credentials struct {
	Files     Files
	flag      string // the flags' prefix, for errors
	machine   string // the machine the certificate must name ("" for any)
	pool      *x509.CertPool
	caExpires time.Time
	cur       atomic.Pointer[tls.Certificate] // the certificate and key, Leaf set; Reload swaps it
}

// Load reads a machine's credentials. flag prefixes errors ("--tls"); the
// certificate must be a machine certificate the CA signed, valid now, whose
// name is machine (when machine is not "").
func Load(f Files, flag, machine string) (*Credentials, error) {
	if f.CA == "" || f.Cert == "" || f.Key == "" {
		return nil, fmt.Errorf("%s-ca, %s-cert and %s-key go together: give all three", flag, flag, flag)
	}
	cas, err := readCerts(f.CA)
	if err != nil {
		return nil, fmt.Errorf("%s-ca: %w", flag, err)
	}
	pool := x509.NewCertPool()
	var caExpires time.Time
	for _, c := range cas {
		pool.AddCert(c)
		if caExpires.IsZero() || c.NotAfter.Before(caExpires) {
			caExpires = c.NotAfter
		}
	}
	c := &Credentials{Files: f, flag: flag, machine: machine, pool: pool, caExpires: caExpires}
	cert, err := c.read()
	if err != nil {
		return nil, err
	}
	c.cur.Store(cert)
	return c, nil
}

// read reads the certificate and key and checks them: a machine
// certificate the CA signed, valid now, naming c.machine (when set).
func (c *Credentials) read() (*tls.Certificate, error) {
	f, flag := c.Files, c.flag
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("%s-cert and %s-key: %w", flag, flag, err)
	}
	leaf := cert.Leaf
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: c.pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("%s-cert %s: not valid under %s-ca %s: %w", flag, f.Cert, flag, f.CA, err)
	}
	if !isMachine(leaf) {
		return nil, fmt.Errorf("%s-cert %s: a client certificate, not a machine's: make one with `flotilla tls cert create` without --client", flag, f.Cert)
	}
	if c.machine != "" && leaf.Subject.CommonName != c.machine {
		return nil, fmt.Errorf("%s-cert %s names machine %q, but this is machine %q: the leader would refuse its agent", flag, f.Cert, leaf.Subject.CommonName, c.machine)
	}
	return &cert, nil
}

// Reload reads the certificate and key again from their files, checked as
// Load checks them, and presents them on every connection made or
// accepted from now on (connections already open keep theirs). The CA is
// kept: trusting another needs a restart. On an error nothing changes.
// The embedded etcd member reads the same files at each handshake itself.
func (c *Credentials) Reload() error {
	cert, err := c.read()
	if err != nil {
		return err
	}
	c.cur.Store(cert)
	return nil
}

// certificate is the machine's certificate and key as last loaded.
func (c *Credentials) certificate() *tls.Certificate { return c.cur.Load() }

// ServerConfig is the TLS configuration of a server: it presents the
// machine's certificate and requires a client certificate the CA signed.
func (c *Credentials) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// A callback rather than Certificates, so that Reload reaches
		// every listener without rebuilding its configuration.
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.certificate(), nil },
		ClientAuth:     tls.RequireAndVerifyClientCert,
		ClientCAs:      c.pool,
	}
}

// ClientConfig is the TLS configuration to dial another machine: it
// presents the machine's certificate and requires a server certificate of
// a machine of the cluster.
func (c *Credentials) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion:            tls.VersionTLS12,
		GetClientCertificate:  func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return c.certificate(), nil },
		RootCAs:               c.pool,
		VerifyPeerCertificate: requireMachine,
	}
}

// Names are the DNS names and IP addresses the machine's certificate covers.
func (c *Credentials) Names() []string {
	leaf := c.certificate().Leaf
	out := slices.Clone(leaf.DNSNames)
	for _, ip := range leaf.IPAddresses {
		out = append(out, ip.String())
	}
	return out
}

// CAExpires is when the first of the CA file's certificates stops being
// valid.
func (c *Credentials) CAExpires() time.Time { return c.caExpires }

// Expires is when the machine's certificate stops being valid.
func (c *Credentials) Expires() time.Time { return c.certificate().Leaf.NotAfter }

// ClientConfig returns the TLS configuration of a client of the API or of
// an external etcd: the CA to verify servers with (the system's roots if
// f.CA is empty), and the certificate to present (none if f.Cert is empty).
// Errors name the file at fault.
func ClientConfig(f Files) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		cas, err := readCerts(f.CA)
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		for _, c := range cas {
			cfg.RootCAs.AddCert(c)
		}
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, fmt.Errorf("certificate %q and key %q go together: give both or neither", f.Cert, f.Key)
	}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("certificate %s with key %s: %w", f.Cert, f.Key, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

func isMachine(c *x509.Certificate) bool {
	return c.VerifyHostname(MachineSAN) == nil && slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
}

// requireMachine is a VerifyPeerCertificate that accepts only machine
// certificates (the chain itself is verified by crypto/tls first).
func requireMachine(_ [][]byte, chains [][]*x509.Certificate) error {
	for _, ch := range chains {
		if len(ch) > 0 && isMachine(ch[0]) {
			return nil
		}
	}
	return errors.New("the peer's certificate is not a machine certificate of this cluster")
}

// ErrNotMachine is returned by CheckAgent for a peer that is not the
// machine it speaks for.
var ErrNotMachine = errors.New("auth: the peer's certificate does not name this machine")

// CheckAgent returns nil when the peer of a gRPC call (ctx of its handler)
// presented a machine certificate, verified under the cluster CA, whose
// name is machine. Connections without TLS are refused too: call it only
// when the server requires TLS.
func CheckAgent(ctx context.Context, machine string) error {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return fmt.Errorf("%w: no peer in the call", ErrNotMachine)
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return fmt.Errorf("%w: the connection is not TLS", ErrNotMachine)
	}
	if len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return fmt.Errorf("%w: no certificate verified under the cluster CA", ErrNotMachine)
	}
	leaf := ti.State.VerifiedChains[0][0]
	if !isMachine(leaf) {
		return fmt.Errorf("%w: %q presented a client certificate, not a machine's", ErrNotMachine, leaf.Subject.CommonName)
	}
	if leaf.Subject.CommonName != machine {
		return fmt.Errorf("%w: the certificate names machine %q, not %q", ErrNotMachine, leaf.Subject.CommonName, machine)
	}
	return nil
}

// Loopback reports whether a listen address (host:port) accepts
// connections from this host only.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
