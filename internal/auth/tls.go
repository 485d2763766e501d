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
	if KindOf(leaf) == KindClient {
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
	if was, is := c.Kind(), KindOf(cert.Leaf); is != was {
		return fmt.Errorf("%s-cert %s is now a%s %s certificate, not a%s %s one: a daemon keeps its kind until it restarts", c.flag, c.Files.Cert, article(is), is, article(was), was)
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
// presents the machine's certificate and requires a certificate of a
// machine of the cluster (a server's or an agent's).
func (c *Credentials) ClientConfig() *tls.Config {
	return c.dialConfig(requireKind(KindAgent))
}

// ServerClientConfig is the TLS configuration to dial a server (an engine,
// an etcd member, the leader's API): it requires a server certificate, so
// an agent-only machine posing as one gets nothing sent to it.
func (c *Credentials) ServerClientConfig() *tls.Config {
	return c.dialConfig(requireKind(KindServer))
}

// MachineClientConfig is the TLS configuration to dial the machine named
// machine, agent or server: its certificate must name it.
func (c *Credentials) MachineClientConfig(machine string) *tls.Config {
	return c.dialConfig(func(_ [][]byte, chains [][]*x509.Certificate) error {
		for _, ch := range chains {
			if len(ch) > 0 && KindOf(ch[0]) != KindClient && ch[0].Subject.CommonName == machine {
				return nil
			}
		}
		return fmt.Errorf("the peer's certificate is not machine %s's", machine)
	})
}

func (c *Credentials) dialConfig(verify func([][]byte, [][]*x509.Certificate) error) *tls.Config {
	return &tls.Config{
		MinVersion:            tls.VersionTLS12,
		GetClientCertificate:  func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return c.certificate(), nil },
		RootCAs:               c.pool,
		VerifyPeerCertificate: verify,
	}
}

// Kind is the kind of the machine's certificate: KindServer or KindAgent.
func (c *Credentials) Kind() Kind { return KindOf(c.certificate().Leaf) }

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

func article(k Kind) string {
	if k == KindAgent {
		return "n"
	}
	return ""
}

// Kind is what a certificate of the cluster's CA is for, from least to
// most trusted.
type Kind int

const (
	// KindClient is a person's or a tool's: it only dials the API.
	KindClient Kind = iota
	// KindAgent is a machine's that only runs units (AgentSAN).
	KindAgent
	// KindServer is a machine's that is also an engine candidate and an
	// etcd member (ServerSAN).
	KindServer
)

func (k Kind) String() string {
	switch k {
	case KindAgent:
		return "agent"
	case KindServer:
		return "server"
	}
	return "client"
}

// KindOf tells a certificate's kind by its names and key usage (its chain
// is verified elsewhere).
func KindOf(c *x509.Certificate) Kind {
	if !slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		return KindClient
	}
	if c.VerifyHostname(ServerSAN) == nil {
		return KindServer
	}
	if c.VerifyHostname(AgentSAN) == nil {
		return KindAgent
	}
	return KindClient
}

// PeerKind is the kind of the certificate a TLS peer presented and the
// cluster's CA verified (KindClient for none, or without TLS).
func PeerKind(cs *tls.ConnectionState) Kind {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return KindClient
	}
	return KindOf(cs.VerifiedChains[0][0])
}

// requireKind is a VerifyPeerCertificate that accepts certificates of
// kind least or more trusted (the chain itself is verified by crypto/tls
// first).
func requireKind(least Kind) func([][]byte, [][]*x509.Certificate) error {
	return func(_ [][]byte, chains [][]*x509.Certificate) error {
		for _, ch := range chains {
			if len(ch) > 0 && KindOf(ch[0]) >= least {
				return nil
			}
		}
		if least == KindServer {
			return errors.New("the peer's certificate is not a server certificate of this cluster")
		}
		return errors.New("the peer's certificate is not a machine certificate of this cluster")
	}
}

// ErrNotMachine is returned by CheckAgent for a peer that is not the
// machine it speaks for.
var ErrNotMachine = errors.New("auth: the peer's certificate does not name this machine")

// CheckAgent returns nil when the peer of a gRPC call (ctx of its handler)
// presented a machine certificate (a server's or an agent's), verified
// under the cluster CA, whose name is machine, and which covers the IP
// address and the API address's host the agent claims for it (each may be
// empty: nothing claimed). Connections without TLS are refused too: call
// it only when the server requires TLS.
func CheckAgent(ctx context.Context, machine, ip, apiAddr string) error {
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
	if KindOf(leaf) == KindClient {
		return fmt.Errorf("%w: %q presented a client certificate, not a machine's", ErrNotMachine, leaf.Subject.CommonName)
	}
	if leaf.Subject.CommonName != machine {
		return fmt.Errorf("%w: the certificate names machine %q, not %q", ErrNotMachine, leaf.Subject.CommonName, machine)
	}
	if ip != "" && leaf.VerifyHostname(ip) != nil {
		return fmt.Errorf("%w: machine %s claims IP %s, which its certificate does not cover (give it with `flotilla tls cert create --ip`)", ErrNotCovered, machine, ip)
	}
	if apiAddr != "" {
		host, _, err := net.SplitHostPort(apiAddr)
		if err != nil {
			host = apiAddr
		}
		if leaf.VerifyHostname(host) != nil {
			return fmt.Errorf("%w: machine %s claims API address %s, whose host its certificate does not cover (give it with `flotilla tls cert create --ip` or --dns)", ErrNotCovered, machine, apiAddr)
		}
	}
	return nil
}

// ErrNotCovered is returned by CheckAgent for an agent that claims an
// address its certificate does not cover: the leader would send people's
// reads of its units there.
var ErrNotCovered = errors.New("auth: an address the machine claims is not in its certificate")

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
