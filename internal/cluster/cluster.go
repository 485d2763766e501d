// Package cluster brings up a real Flotilla cluster in Docker containers on
// this host, and takes it down again: what `make cluster` and
// `make cluster-down` run (through contrib/cluster), and what TestCluster
// drives.
//
// Each machine is a container of the systemd test image
// (internal/systemdtest, built by the same code when missing) whose PID 1
// is systemd, on a Docker network of the cluster's own with a fixed address
// per machine, so that certificates and etcd's peer URLs stay true when a
// container restarts or is reconnected. Flotilla runs there as the shipped
// contrib/systemd/flotilla.service, unchanged, with an
// /etc/flotilla/flotilla.yaml per machine: an embedded etcd member each,
// mutual TLS with certificates from `flotilla tls`, --acl, and the exec and
// systemd drivers. The host reaches every daemon's API at its container's
// address.
//
// The state directory holds the CA, the certificates, the admin token and
// env, the export lines for a shell. Everything Up makes in Docker carries
// the label flotilla-cluster=<name>, which Down removes by.
package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flotilla/flotilla/internal/systemdtest"
)

// Label is the Docker label on the network and the containers of a
// cluster; its value is the cluster's name.
const Label = "flotilla-cluster"

// Ports every daemon listens on, at its container's address.
const (
	APIPort      = 7480
	GRPCPort     = 7481
	EtcdClient   = 2379
	EtcdPeerPort = 2380
)

// stateFile, in the state directory, records the cluster (JSON of Cluster).
const stateFile = "cluster.json"

// Config says what cluster Up makes.
type Config struct {
	Name     string    // of the network, prefix of the containers' names; default "flotilla-cluster"
	N        int       // machines, 1 to 32
	Dir      string    // state directory: made by Up, must not hold a cluster already
	Binary   string    // a static (CGO_ENABLED=0) flotilla binary, for the containers and for this host
	UnitFile string    // flotilla.service to install unchanged (contrib/systemd/flotilla.service)
	Subnet   string    // the network's IPv4 /24 ("10.213.7.0/24"); default: the first free of 172.30.10-249.0/24
	Log      io.Writer // progress; nil: none
}

// Node is one machine of a cluster.
type Node struct {
	Name      string `json:"name"`      // the daemon's --name and the container's host name: n1, n2, ...
	Container string `json:"container"` // the container's name: <cluster>-n1, ...
	IP        string `json:"ip"`        // its fixed address on the cluster's network
}

// Cluster is a cluster Up made.
type Cluster struct {
	Name    string `json:"name"`
	Dir     string `json:"dir"`
	Subnet  string `json:"subnet"`
	Nodes   []Node `json:"nodes"`
	CAFile  string `json:"caFile"`
	Cert    string `json:"certFile"` // the client certificate (role: none; the token gives admin)
	Key     string `json:"keyFile"`
	Token   string `json:"token"` // the admin token acl bootstrap made
	Binary  string `json:"binary"`
	EnvFile string `json:"envFile"`
}

// Endpoint is every daemon's API URL, comma-separated, as --endpoint and
// FLOTILLA_ENDPOINT take them (the first that answers is used).
func (c *Cluster) Endpoint() string {
	var u []string
	for _, n := range c.Nodes {
		u = append(u, n.URL())
	}
	return strings.Join(u, ",")
}

// URL is the node's API URL.
func (n Node) URL() string {
	return "https://" + net.JoinHostPort(n.IP, strconv.Itoa(APIPort))
}

// Env is the CLI's environment for the cluster: FLOTILLA_ENDPOINT,
// FLOTILLA_CA_FILE, FLOTILLA_CERT_FILE, FLOTILLA_KEY_FILE, FLOTILLA_TOKEN.
func (c *Cluster) Env() []string {
	return []string{
		"FLOTILLA_ENDPOINT=" + c.Endpoint(),
		"FLOTILLA_CA_FILE=" + c.CAFile,
		"FLOTILLA_CERT_FILE=" + c.Cert,
		"FLOTILLA_KEY_FILE=" + c.Key,
		"FLOTILLA_TOKEN=" + c.Token,
	}
}

// Exports is Env as shell lines: export K='V', one per variable.
func (c *Cluster) Exports() string {
	var b strings.Builder
	for _, kv := range c.Env() {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(v))
	}
	return b.String()
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Load reads the cluster recorded in the state directory dir.
func Load(dir string) (*Cluster, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, err
	}
	var c Cluster
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, stateFile), err)
	}
	return &c, nil
}

func (c *Cluster) save() error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.Dir, stateFile), append(b, '\n'), 0o600)
}

func (cfg *Config) check() error {
	if cfg.Name == "" {
		cfg.Name = "flotilla-cluster"
	}
	for _, r := range cfg.Name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return fmt.Errorf("cluster name %q: only a-z, 0-9 and '-'", cfg.Name)
		}
	}
	if cfg.N < 1 || cfg.N > 32 {
		return fmt.Errorf("N=%d: a cluster has 1 to 32 machines", cfg.N)
	}
	if cfg.Dir == "" {
		return errors.New("no state directory given")
	}
	if _, err := os.Stat(filepath.Join(cfg.Dir, stateFile)); err == nil {
		return fmt.Errorf("%s already holds a cluster: take it down first (make cluster-down)", cfg.Dir)
	}
	for what, p := range map[string]string{"flotilla binary": cfg.Binary, "unit file": cfg.UnitFile} {
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			return fmt.Errorf("the %s %q: not a file (%v)", what, p, err)
		}
	}
	if cfg.Subnet != "" {
		if _, _, err := subnetBase(cfg.Subnet); err != nil {
			return err
		}
	}
	return nil
}

// subnetBase parses an IPv4 /24 and returns its first three octets.
func subnetBase(s string) (string, *net.IPNet, error) {
	ip, n, err := net.ParseCIDR(s)
	if err != nil || ip.To4() == nil {
		return "", nil, fmt.Errorf("subnet %q: want an IPv4 /24 such as 10.213.7.0/24", s)
	}
	if ones, _ := n.Mask.Size(); ones != 24 {
		return "", nil, fmt.Errorf("subnet %q: want a /24, such as 10.213.7.0/24", s)
	}
	v := n.IP.To4()
	return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]), n, nil
}

func (cfg *Config) logf(format string, a ...any) {
	if cfg.Log != nil {
		fmt.Fprintf(cfg.Log, format+"\n", a...)
	}
}

// Up makes the cluster and returns it once every daemon runs and the admin
// token is made. On error, what it made is left for Down (the state
// directory records it), so that the caller can look at it.
func Up(ctx context.Context, cfg Config) (*Cluster, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	var err error
	if cfg.Dir, err = filepath.Abs(cfg.Dir); err != nil {
		return nil, err
	}
	if out, _ := docker(ctx, "ps", "-aq", "--filter", "label="+Label+"="+cfg.Name); strings.TrimSpace(out) != "" {
		return nil, fmt.Errorf("containers of a cluster %q exist already: take it down first (make cluster-down)", cfg.Name)
	}
	start := time.Now()
	if built, err := systemdtest.BuildImage(ctx); err != nil {
		return nil, err
	} else if built {
		cfg.logf("built the image %s in %v", systemdtest.Image, time.Since(start).Round(time.Second))
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	c := &Cluster{Name: cfg.Name, Dir: cfg.Dir, EnvFile: filepath.Join(cfg.Dir, "env")}
	if err := c.save(); err != nil {
		return nil, err
	}
	bin := filepath.Join(cfg.Dir, "flotilla")
	if err := copyFile(cfg.Binary, bin, 0o755); err != nil {
		return nil, err
	}
	c.Binary = bin

	// The network, on a /24 of its own: machines get .11, .12, ...
	if c.Subnet, err = createNetwork(ctx, cfg); err != nil {
		return nil, err
	}
	base, _, _ := subnetBase(c.Subnet)
	for i := 1; i <= cfg.N; i++ {
		n := Node{Name: fmt.Sprintf("n%d", i), Container: fmt.Sprintf("%s-n%d", cfg.Name, i), IP: fmt.Sprintf("%s.%d", base, 10+i)}
		c.Nodes = append(c.Nodes, n)
	}
	if err := c.save(); err != nil {
		return nil, err
	}
	cfg.logf("network %s on %s", cfg.Name, c.Subnet)

	for _, n := range c.Nodes {
		args := append([]string{"run", "-d"}, systemdtest.RunFlags...)
		args = append(args, "--name", n.Container, "--hostname", n.Name, "--network", cfg.Name, "--ip", n.IP,
			"--label", Label+"="+cfg.Name, systemdtest.Image, "/lib/systemd/systemd")
		if _, err := docker(ctx, args...); err != nil {
			return nil, err
		}
	}
	if err := c.each(func(n Node) error {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		return systemdtest.WaitRunning(wctx, n.Container)
	}); err != nil {
		return nil, err
	}
	cfg.logf("%d containers run systemd (%v)", cfg.N, time.Since(start).Round(time.Second))

	if err := c.makeCerts(ctx); err != nil {
		return nil, err
	}
	if err := c.each(func(n Node) error { return c.install(ctx, n, cfg.UnitFile) }); err != nil {
		return nil, err
	}
	// Every daemon at once: an embedded member of a new cluster waits for
	// its peers before it tells systemd it is ready.
	if err := c.each(func(n Node) error {
		_, err := docker(ctx, "exec", n.Container, "systemctl", "enable", "--now", "--no-block", "flotilla")
		return err
	}); err != nil {
		return nil, err
	}
	if err := c.each(func(n Node) error { return c.WaitService(ctx, n, 2*time.Minute) }); err != nil {
		return nil, err
	}
	cfg.logf("flotilla.service is active on %d machines (%v)", cfg.N, time.Since(start).Round(time.Second))

	if err := c.bootstrap(ctx); err != nil {
		return nil, err
	}
	if err := c.save(); err != nil {
		return nil, err
	}
	if err := os.WriteFile(c.EnvFile, []byte(c.Exports()), 0o600); err != nil {
		return nil, err
	}
	cfg.logf("cluster %s is up in %v; its state is in %s", cfg.Name, time.Since(start).Round(time.Second), cfg.Dir)
	return c, nil
}

// createNetwork makes the cluster's network on cfg.Subnet, or on the first
// /24 of 172.30.10-249.0 that no interface of this host and no other Docker
// network uses.
func createNetwork(ctx context.Context, cfg Config) (string, error) {
	create := func(subnet string) error {
		_, err := docker(ctx, "network", "create", "--driver", "bridge", "--subnet", subnet,
			"--label", Label+"="+cfg.Name, cfg.Name)
		return err
	}
	if cfg.Subnet != "" {
		return cfg.Subnet, create(cfg.Subnet)
	}
	addrs, _ := net.InterfaceAddrs()
	for i := 10; i < 250; i++ {
		s := fmt.Sprintf("172.30.%d.0/24", i)
		_, n, _ := net.ParseCIDR(s)
		used := false
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && (n.Contains(ipn.IP) || ipn.Contains(n.IP)) {
				used = true
			}
		}
		if used {
			continue
		}
		err := create(s)
		if err == nil {
			return s, nil
		}
		if !strings.Contains(err.Error(), "overlap") {
			return "", err
		}
	}
	return "", errors.New("no free /24 in 172.30.10.0-172.30.249.0 for the cluster's network: give one (SUBNET=10.213.7.0/24)")
}

// each runs f for every node at once and returns the errors joined.
func (c *Cluster) each(f func(Node) error) error {
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(n); err != nil {
				errs[i] = fmt.Errorf("%s: %w", n.Name, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// makeCerts makes the CA, one server certificate per machine naming its
// address and host names, and a client certificate, with `flotilla tls`.
func (c *Cluster) makeCerts(ctx context.Context) error {
	ca, certs := filepath.Join(c.Dir, "ca"), filepath.Join(c.Dir, "certs")
	if _, err := c.Flotilla(ctx, nil, "tls", "ca", "create", "--dir", ca); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if _, err := c.Flotilla(ctx, nil, "tls", "cert", "create", "--ca-dir", ca, "--out", certs,
			"--name", n.Name, "--ip", n.IP, "--dns", n.Name+","+n.Container); err != nil {
			return err
		}
	}
	if _, err := c.Flotilla(ctx, nil, "tls", "cert", "create", "--ca-dir", ca, "--out", certs, "--client", "--name", "admin"); err != nil {
		return err
	}
	c.CAFile = filepath.Join(ca, "ca.pem")
	c.Cert, c.Key = filepath.Join(certs, "admin.pem"), filepath.Join(certs, "admin-key.pem")
	return nil
}

// Config is the /etc/flotilla/flotilla.yaml of node n.
func (c *Cluster) Config(n Node) string {
	var peers []string
	for _, p := range c.Nodes {
		peers = append(peers, fmt.Sprintf("%s=https://%s", p.Name, net.JoinHostPort(p.IP, strconv.Itoa(EtcdPeerPort))))
	}
	hp := func(port int) string { return net.JoinHostPort(n.IP, strconv.Itoa(port)) }
	return fmt.Sprintf(`# /etc/flotilla/flotilla.yaml of %[1]s, made by make cluster (internal/cluster);
# keys are the flags of flotilla daemon (contrib/systemd/flotilla.yaml explains them).
name: %[1]s
data-dir: /var/lib/flotilla
public-ip: %[2]s
api-addr: %[3]s
grpc-addr: %[4]s
etcd-embed: true
etcd-client-addr: %[5]s
etcd-peer-addr: %[6]s
etcd-initial-cluster: %[7]s
tls-ca: /etc/flotilla/ca.pem
tls-cert: /etc/flotilla/%[1]s.pem
tls-key: /etc/flotilla/%[1]s-key.pem
acl: true
# Services exec can run go to exec (the machine's supervisor); the others
# (Type=forking, timers, sockets, ...) to the container's systemd.
driver: [exec, systemd]
log-level: info
`, n.Name, n.IP, hp(APIPort), hp(GRPCPort), hp(EtcdClient), hp(EtcdPeerPort), strings.Join(peers, ","))
}

// install puts the binary, the unit, the configuration and the node's
// certificate in its container.
func (c *Cluster) install(ctx context.Context, n Node, unitFile string) error {
	if _, err := docker(ctx, "exec", n.Container, "install", "-d", "-m", "0700", "/etc/flotilla"); err != nil {
		return err
	}
	certs := filepath.Join(c.Dir, "certs")
	for _, f := range []struct{ src, dst string }{
		{c.Binary, "/usr/local/bin/flotilla"},
		{unitFile, "/etc/systemd/system/flotilla.service"},
		{c.CAFile, "/etc/flotilla/ca.pem"},
		{filepath.Join(certs, n.Name+".pem"), "/etc/flotilla/" + n.Name + ".pem"},
		{filepath.Join(certs, n.Name+"-key.pem"), "/etc/flotilla/" + n.Name + "-key.pem"},
	} {
		if _, err := docker(ctx, "cp", f.src, n.Container+":"+f.dst); err != nil {
			return err
		}
	}
	cmd := exec.CommandContext(ctx, "docker", "exec", "-i", n.Container, "sh", "-c",
		`cat > /etc/flotilla/flotilla.yaml && chown -R root:root /etc/flotilla /usr/local/bin/flotilla /etc/systemd/system/flotilla.service &&
		chmod 0600 /etc/flotilla/*-key.pem && chmod 0644 /etc/systemd/system/flotilla.service && systemctl daemon-reload`)
	cmd.Stdin = strings.NewReader(c.Config(n))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("configure: %w: %s", err, out)
	}
	return nil
}

// WaitService waits until flotilla.service is active in n's container; the
// error then has the end of its journal.
func (c *Cluster) WaitService(ctx context.Context, n Node, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		out, _ := docker(ctx, "exec", n.Container, "systemctl", "is-active", "flotilla")
		state := strings.TrimSpace(out)
		if state == "active" {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			j, _ := docker(ctx, "exec", n.Container, "journalctl", "-u", "flotilla", "--no-pager", "-n", "30")
			return fmt.Errorf("flotilla.service is %q after %v; its journal ends:\n%s", state, timeout, j)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// bootstrap makes the cluster's first admin token (acl bootstrap), retried
// until a leader answers.
func (c *Cluster) bootstrap(ctx context.Context) error {
	env := c.Env()[:4]
	deadline := time.Now().Add(90 * time.Second)
	for {
		out, err := c.Flotilla(ctx, env, "acl", "bootstrap")
		if err == nil {
			lines := strings.Split(strings.TrimSpace(out), "\n")
			c.Token = strings.TrimSpace(lines[len(lines)-1])
			if err := os.WriteFile(filepath.Join(c.Dir, "admin-token"), []byte(out), 0o600); err != nil {
				return err
			}
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("acl bootstrap: %w", err)
		}
		time.Sleep(time.Second)
	}
}

// Flotilla runs the cluster's flotilla binary on this host with env added
// to this process's environment, and returns its standard output; the
// error has its standard error.
func (c *Cluster) Flotilla(ctx context.Context, env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("flotilla %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out.String(), nil
}

// Down removes the containers and the network of the cluster name (by
// their label) and the state directory dir, if it holds a cluster's state
// (or nothing). It is not an error that some of them are gone already.
func Down(ctx context.Context, name, dir string) error {
	var errs []error
	out, err := docker(ctx, "ps", "-aq", "--filter", "label="+Label+"="+name)
	if err != nil {
		return err
	}
	if ids := strings.Fields(out); len(ids) > 0 {
		if _, err := docker(ctx, append([]string{"rm", "-f", "-v"}, ids...)...); err != nil {
			errs = append(errs, err)
		}
	}
	out, err = docker(ctx, "network", "ls", "-q", "--filter", "label="+Label+"="+name)
	if err != nil {
		errs = append(errs, err)
	}
	if ids := strings.Fields(out); len(ids) > 0 {
		if _, err := docker(ctx, append([]string{"network", "rm"}, ids...)...); err != nil {
			errs = append(errs, err)
		}
	}
	if dir != "" {
		if err := removeState(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeState removes dir if it holds a cluster's state or is empty, and
// refuses to remove any other directory.
func removeState(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(ents) > 0 {
		if _, err := os.Stat(filepath.Join(dir, stateFile)); err != nil {
			return fmt.Errorf("%s holds no %s: not a cluster's state directory, left alone", dir, stateFile)
		}
	}
	return os.RemoveAll(dir)
}

// Docker runs a docker command bounded by 3 minutes and returns its
// standard output; the error has its standard error.
func Docker(ctx context.Context, args ...string) (string, error) { return docker(ctx, args...) }

func docker(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", args...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return out.String(), fmt.Errorf("docker %s: no answer in time: %w", strings.Join(args, " "), ctx.Err())
		}
		return out.String(), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out.String(), nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, mode)
}
