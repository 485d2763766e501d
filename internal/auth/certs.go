// Package auth provides Flotilla's credentials: a cluster certificate
// authority and the certificates it signs (CreateCA, CreateCert), the TLS
// configurations every connection of a daemon uses (Load), the check that an
// agent's certificate names the machine it speaks for (CheckAgent), and API
// tokens with roles stored hashed in etcd (Tokens, Role).
//
// Three kinds of certificates are signed by the cluster CA:
//
//   - a server's (CreateCert without Agent or Client) serves and dials: its
//     common name is the machine's name, and it carries the DNS name
//     ServerSAN, which marks it as a server's: an engine candidate and
//     etcd member that also runs units. Only server certificates may join
//     the embedded etcd cluster or use its client port, and only servers
//     are trusted with what the leader forwards (people's tokens).
//   - an agent's (Agent: true) serves and dials too, but carries AgentSAN
//     instead: the machine only runs units. It may open its own agent
//     stream and ask a server who leads; it cannot reach etcd.
//   - a client certificate (Client: true) is for a person or a tool using
//     the API: it can only dial, and it cannot pass for a machine.
//
// Server and agent certificates are both machine certificates.
package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// ServerSAN is the DNS name every server certificate carries: a TLS peer
// whose certificate covers it is one of the cluster's servers (engine
// candidates and etcd members). Certificates made before agent
// certificates existed carry it too, and stay servers'.
const ServerSAN = "machine.flotilla"

// AgentSAN is the DNS name an agent certificate carries instead of
// ServerSAN: the machine only runs units.
const AgentSAN = "agent.flotilla"

// File names written by CreateCA.
const (
	CAFile    = "ca.pem"
	CAKeyFile = "ca-key.pem"
)

// Default validity of what CreateCA and CreateCert make.
const (
	DefaultCADays   = 5 * 365
	DefaultCertDays = 365
)

// ErrExists is returned when a file CreateCA or CreateCert would write is
// already there: credentials are never overwritten.
var ErrExists = errors.New("auth: file exists")

var certNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// CreateCA writes a new certificate authority, ca.pem and ca-key.pem, into
// dir (created if missing) and returns their paths. days is the validity
// (0: DefaultCADays).
func CreateCA(dir string, days int) (certPath, keyPath string, err error) {
	if days == 0 {
		days = DefaultCADays
	}
	if days < 0 {
		return "", "", fmt.Errorf("days %d: want a positive number of days", days)
	}
	certPath, keyPath = filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile)
	if err := refuseExisting(certPath, keyPath); err != nil {
		return "", "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Flotilla CA", Organization: []string{"Flotilla"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.AddDate(0, 0, days),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", fmt.Errorf("sign CA certificate: %w", err)
	}
	if err := writePair(dir, certPath, keyPath, der, key); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}

// CertRequest describes a certificate for CreateCert.
type CertRequest struct {
	// CADir holds ca.pem and ca-key.pem. Required.
	CADir string
	// Name is the machine's name (a machine certificate) or the person's or
	// tool's (a client certificate): 1-64 letters, digits, '.', '_', '-'.
	Name string
	// IPs and DNSNames the machine is reached at, besides 127.0.0.1, ::1,
	// localhost and the name itself, which a machine certificate always
	// covers. A client certificate covers none.
	IPs      []net.IP
	DNSNames []string
	// Client makes a certificate for a person or a tool: client use only.
	Client bool
	// Agent makes the certificate of a machine that only runs units: no
	// engine, no etcd member, no access to etcd (exclusive with Client).
	Agent bool
	// OutDir receives NAME.pem and NAME-key.pem (default: the current directory).
	OutDir string
	// Days is the validity (0: DefaultCertDays).
	Days int
}

// CreateCert signs a certificate with the CA in r.CADir and writes it with
// its key into r.OutDir; it returns their paths.
func CreateCert(r CertRequest) (certPath, keyPath string, err error) {
	if r.CADir == "" {
		return "", "", errors.New("no CA directory given (--ca-dir): create one with `flotilla tls ca create`")
	}
	if !certNameRE.MatchString(r.Name) {
		return "", "", fmt.Errorf("name %q: want 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", r.Name)
	}
	if r.Client && r.Agent {
		return "", "", errors.New("--client and --agent exclude each other: a person's certificate, or a machine's that only runs units")
	}
	if r.Client && (len(r.IPs) > 0 || len(r.DNSNames) > 0) {
		return "", "", errors.New("a client certificate is for dialing only: it takes no IP addresses or DNS names")
	}
	days := r.Days
	if days == 0 {
		days = DefaultCertDays
	}
	if days < 0 {
		return "", "", fmt.Errorf("days %d: want a positive number of days", days)
	}
	for _, d := range r.DNSNames {
		if d == "" || d == ServerSAN || d == AgentSAN {
			return "", "", fmt.Errorf("DNS name %q: want a host name of this machine", d)
		}
	}
	out := r.OutDir
	if out == "" {
		out = "."
	}
	certPath, keyPath = filepath.Join(out, r.Name+".pem"), filepath.Join(out, r.Name+"-key.pem")
	if err := refuseExisting(certPath, keyPath); err != nil {
		return "", "", err
	}
	ca, caKey, err := loadCA(r.CADir)
	if err != nil {
		return "", "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("generate key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: r.Name, Organization: []string{"Flotilla"}},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.AddDate(0, 0, days),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if ca.NotAfter.Before(tmpl.NotAfter) {
		tmpl.NotAfter = ca.NotAfter
	}
	if !r.Client {
		tmpl.Subject.OrganizationalUnit = []string{"machine"}
		san := ServerSAN
		if r.Agent {
			tmpl.Subject.OrganizationalUnit = []string{"agent"}
			san = AgentSAN
		}
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.DNSNames = uniq(append([]string{san, "localhost", r.Name}, r.DNSNames...))
		tmpl.IPAddresses = append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, r.IPs...)
	} else {
		tmpl.Subject.OrganizationalUnit = []string{"client"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", "", fmt.Errorf("sign certificate for %s: %w", r.Name, err)
	}
	if err := writePair(out, certPath, keyPath, der, key); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}

func loadCA(dir string) (*x509.Certificate, any, error) {
	certPath, keyPath := filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile)
	certs, err := readCerts(certPath)
	if err != nil {
		return nil, nil, err
	}
	ca := certs[0]
	if !ca.IsCA {
		return nil, nil, fmt.Errorf("%s is not a CA certificate", certPath)
	}
	b, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, fmt.Errorf("CA key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, nil, fmt.Errorf("%s holds no PEM block", keyPath)
	}
	key, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	return ca, key, nil
}

// readCerts reads the PEM certificates in path.
func readCerts(path string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return out, nil
}

func writePair(dir, certPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("encode key: %w", err)
	}
	if err := writeNew(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return err
	}
	if err := writeNew(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		os.Remove(keyPath)
		return err
	}
	return nil
}

// writeNew writes a file that must not exist yet.
func writeNew(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s: %w; remove it first to replace it", path, ErrExists)
	}
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func refuseExisting(paths ...string) error {
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return fmt.Errorf("%s: %w; remove it first to replace it", p, ErrExists)
		}
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

func uniq(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
