// Package daemon wires one Flotilla daemon: an embedded etcd member (or a
// client of an external etcd), an engine candidate, an agent with its
// driver, and the HTTP API. Only cmd/flotilla imports it.
package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/flotilla/flotilla/internal/agent"
	"github.com/flotilla/flotilla/internal/api"
	"github.com/flotilla/flotilla/internal/audit"
	"github.com/flotilla/flotilla/internal/auth"
	"github.com/flotilla/flotilla/internal/driver"
	execdriver "github.com/flotilla/flotilla/internal/driver/exec"
	"github.com/flotilla/flotilla/internal/election"
	"github.com/flotilla/flotilla/internal/engine"
	"github.com/flotilla/flotilla/internal/health"
	"github.com/flotilla/flotilla/internal/limits"
	"github.com/flotilla/flotilla/internal/machine"
	"github.com/flotilla/flotilla/internal/metrics"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/state"
	"github.com/flotilla/flotilla/internal/supervisor"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/unithide"
	"github.com/flotilla/flotilla/internal/version"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// Version is Flotilla's version, reported to the leader and by /v1/status.
var Version = version.Get().Version

// Config is one daemon's configuration. Addresses are host:port; a port of 0
// picks a free one.
type Config struct {
	// Name is the machine ID: letters, digits, '.', '_', '-' (default: the host name).
	Name string
	// DataDir holds the embedded etcd member and the units' logs and state. Required.
	DataDir string
	// APIAddr is where the HTTP API listens (default 127.0.0.1:7480).
	APIAddr string
	// APISocket, if set, is a unix socket the daemon also serves the whole
	// API on (--api-socket; fleet's was /var/run/fleet.sock): mode 0600,
	// or 0660 with APISocketGroup's group,
	// plain HTTP, any Host accepted, removed on exit. Sockets passed by
	// systemd (socket activation) take the place of APIAddr and APISocket
	// (docs/cluster.md).
	APISocket string
	// APISocketGroup, if set, is the group (name or ID) that may use
	// APISocket too (--api-socket-group): the socket gets it, mode 0660.
	APISocketGroup string
	// GRPCAddr is where the engine serves agents (default 127.0.0.1:0).
	GRPCAddr string
	// GRPCAdvertiseAddr, if set, is the address agents are told to dial for
	// this engine instead of GRPCAddr (a proxy, a NAT address).
	GRPCAdvertiseAddr string
	// Registry is how agents and the engine coordinate: "grpc" (default; one
	// stream per agent to the leader) or "etcd" (fleet's way: agents watch
	// their assignments in etcd and write states and presence there).
	Registry string
	// Driver runs units: "exec" (default; in the machine's supervisor
	// process, so they outlive the daemon), "systemd", "docker", or a
	// comma-separated list of them in order of preference; or "sim" (in
	// memory, for benchmarks).
	Driver string
	// SupervisorBinary is the program started as the supervisor
	// (`SupervisorBinary supervisor --dir DIR`); default: this executable.
	SupervisorBinary string
	// LogMaxSize is the size at which a unit's log is rotated
	// (--log-max-size; 0: 16 MiB, at least 1 KiB); LogMaxFiles how many
	// rotated files of it are kept (--log-max-files; 0: 1, negative: none,
	// at most 100); LogJournald also sends every line to the local journald
	// (--log-journald). A unit's [X-Fleet] LogMaxSize= and LogMaxFiles=
	// override the limits. They are given to the machine's supervisor each
	// time the daemon connects to it, so a daemon restarted with other
	// settings applies them to the units that kept running.
	LogMaxSize  int64
	LogMaxFiles int
	LogJournald bool
	// SimStartDelay and SimFailureRate configure the sim driver.
	SimStartDelay  time.Duration
	SimFailureRate float64
	// PublicIP is the machine's IP shown by list-machines and used to
	// advertise listeners bound to a wildcard address (default 127.0.0.1).
	PublicIP string
	// Metadata is the machine's metadata for MachineMetadata= constraints.
	Metadata map[string]string
	// Capacity offered to units; zero fields are detected from the host.
	Capacity machine.Capacity

	// EtcdEndpoints are the client URLs of an external etcd cluster.
	EtcdEndpoints []string
	// EtcdEmbed runs an etcd member in this process (exclusive with EtcdEndpoints).
	EtcdEmbed          bool
	EtcdClientAddr     string // default 127.0.0.1:2379
	EtcdPeerAddr       string // default 127.0.0.1:2380
	EtcdInitialCluster string // name=http://peer,...; default: this member alone
	// Prefix is the cluster's etcd key prefix (default /flotilla/).
	Prefix string
	// Servers, when set (--servers), make this daemon a machine that only
	// runs units: no etcd (it has no access to it), no engine; its agent
	// finds the leader by asking these engines (gRPC addresses, host:port)
	// who leads, and its API forwards every request but its own machine's
	// reads to the leader. A daemon with an agent certificate (`flotilla
	// tls cert create --agent`) needs them. Exclusive with EtcdEmbed and
	// EtcdEndpoints, and with the etcd registry.
	Servers []string

	NoEngine bool
	NoAgent  bool
	// StopUnitsOnExit is fleet's shutdown (--stop-units-on-exit): a daemon
	// stopped cleanly (its context done: SIGTERM, SIGINT) stops its units,
	// each gracefully within its stop timeout, and leaves the cluster at
	// once, its unit states purged; the leader places the units elsewhere
	// without waiting for their LostAfter=. The machine's supervisor ends
	// too. By default units outlive their daemon.
	StopUnitsOnExit bool
	// AgentTTL: see engine.Config.AgentTTL (default 20s).
	AgentTTL time.Duration
	// ElectionTTL: see engine.Config.ElectionTTL (default 4s).
	ElectionTTL time.Duration
	// MaxTxnOps bounds one etcd transaction (default 128, etcd's default
	// --max-txn-ops; at least 1, at most MaxTxnOpsLimit). An embedded member
	// is started with it; an external etcd must be run with at least as
	// much (its --max-txn-ops).
	MaxTxnOps int

	// TLS are the machine's credentials (--tls-ca, --tls-cert, --tls-key):
	// when set, every connection is mutual TLS: the API (HTTPS), the agents'
	// gRPC streams, forwarding between daemons, and the embedded etcd
	// member's client and peer URLs. The certificate must name this machine.
	TLS auth.Files
	// EtcdTLS are the credentials to dial an external etcd (--etcd-ca,
	// --etcd-cert, --etcd-key); each file left empty is TLS's.
	EtcdTLS auth.Files
	// ACL requires an API token with a role on every request (--acl).
	ACL bool
	// MetricsPublic serves /metrics without a token (--metrics-public).
	MetricsPublic bool
	// TokenWriteRate is the writes a second each API token may make
	// (--token-write-rate; 0: limits.TokenWriteRate, negative: no limit),
	// in bursts of TokenWriteBurst (--token-write-burst; 0:
	// limits.TokenWriteBurst).
	TokenWriteRate  float64
	TokenWriteBurst int
	// AuditLog is the file every write and every refused API request is
	// recorded in, as JSON lines, rotated at 64 MiB with 5 files kept
	// (--audit-log; "": none). The records also go to the log at
	// audit.Level.
	AuditLog string
	// Insecure lets a daemon listen beyond loopback without TLS and ACL
	// (--insecure); it then warns at start and every hour.
	Insecure bool

	// Reload, if set, delivers the daemon's requests to read its
	// certificate and key again (SIGHUP): see reloadCerts.
	Reload <-chan os.Signal

	Logger *slog.Logger
	// lock is the data dir's lock when the caller (Dev) holds it already;
	// Run takes it otherwise.
	lock *os.File
	// Ready, if set, is called once every listener is up with their addresses.
	Ready func(Addrs)
}

// MaxTxnOpsLimit is the largest --etcd-max-txn-ops accepted: a transaction
// of that many ops is also bounded by etcd's --max-request-bytes (1.5 MiB),
// which the engine keeps each transaction under (1 MiB).
const MaxTxnOpsLimit = 1 << 16

// Addrs are the addresses a running daemon listens on.
type Addrs struct {
	API, GRPC, EtcdClient string
	// APISocket are the unix sockets the API is served on.
	APISocket []string
}

// leaveTimeout bounds a --stop-units-on-exit shutdown: stopping the units
// (each within its TimeoutStopSec=) and the leader's taking the Leave.
const leaveTimeout = 2 * time.Minute

// insecureWarningEvery is how often a daemon run with --insecure beyond
// loopback says so again.
const insecureWarningEvery = time.Hour

func (c *Config) validate() error {
	if c.Name == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--name is not set and the host name is unknown: %w", err)
		}
		c.Name = h
	}
	if err := machine.ValidateName(c.Name); err != nil {
		return fmt.Errorf("--name: %w", err)
	}
	if err := checkMetadata("--metadata", c.Metadata); err != nil {
		return err
	}
	if c.DataDir == "" {
		return errors.New("--data-dir is required")
	}
	if c.APIAddr == "" {
		c.APIAddr = "127.0.0.1:7480"
	}
	if c.GRPCAddr == "" {
		c.GRPCAddr = "127.0.0.1:0"
	}
	mode, err := registry.ParseMode(c.Registry)
	if err != nil {
		return fmt.Errorf("--registry %w", err)
	}
	c.Registry = mode
	if c.Driver == "" {
		c.Driver = "exec"
	}
	if _, err := parseDrivers(c.Driver); err != nil {
		return err
	}
	c.Driver = strings.Join(splitDrivers(c.Driver), ",")
	et, at := c.ElectionTTL, c.AgentTTL
	if et == 0 {
		et = 5 * time.Second
	}
	if at == 0 {
		at = machine.DefaultTTL
	}
	if et < time.Second {
		return fmt.Errorf("--election-ttl %v: etcd leases are whole seconds; use at least 1s", et)
	}
	if min := engine.MinAgentTTL(et); at < min {
		return fmt.Errorf("--agent-ttl %v is too short for --election-ttl %v: a leader failover can take up to %v, so use at least %v", at, et, min-engine.FailoverMargin, min)
	}
	if c.MaxTxnOps == 0 {
		c.MaxTxnOps = 128
	}
	if c.MaxTxnOps < 1 || c.MaxTxnOps > MaxTxnOpsLimit {
		return fmt.Errorf("--etcd-max-txn-ops %d: want 1 to %d (etcd's --max-txn-ops; 128 by default)", c.MaxTxnOps, MaxTxnOpsLimit)
	}
	if c.LogMaxSize == 0 {
		c.LogMaxSize = execdriver.DefaultMaxLogBytes
	}
	switch {
	case c.LogMaxFiles == 0:
		c.LogMaxFiles = execdriver.DefaultMaxLogFiles
	case c.LogMaxFiles < 0:
		c.LogMaxFiles = 0
	}
	if c.LogMaxSize < unit.MinLogMaxSize {
		return fmt.Errorf("--log-max-size %d bytes is below the minimum of 1K (%d bytes)", c.LogMaxSize, unit.MinLogMaxSize)
	}
	if c.LogMaxFiles > unit.MaxLogMaxFiles {
		return fmt.Errorf("--log-max-files %d: want 0 to %d rotated files", c.LogMaxFiles, unit.MaxLogMaxFiles)
	}
	if c.SimFailureRate < 0 || c.SimFailureRate > 1 {
		return fmt.Errorf("--sim-failure-rate %v: want a share between 0 and 1", c.SimFailureRate)
	}
	if c.PublicIP == "" {
		c.PublicIP = "127.0.0.1"
	}
	if net.ParseIP(c.PublicIP) == nil {
		return fmt.Errorf("--public-ip %q is not an IP address", c.PublicIP)
	}
	for flag, a := range map[string]string{"--api-addr": c.APIAddr, "--grpc-addr": c.GRPCAddr} {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("%s %q: %w", flag, a, err)
		}
	}
	if c.EtcdEmbed && len(c.EtcdEndpoints) > 0 {
		return errors.New("--etcd-embed and --etcd-endpoints exclude each other: run an etcd member here, or use an external cluster")
	}
	if len(c.Servers) > 0 {
		if err := c.validateAgentOnly(); err != nil {
			return err
		}
	} else if !c.EtcdEmbed && len(c.EtcdEndpoints) == 0 {
		return errors.New("no etcd: give --etcd-endpoints URL,... or --etcd-embed (a server), or --servers ADDR,... (a machine that only runs units)")
	}
	if c.EtcdEmbed {
		if c.EtcdClientAddr == "" {
			c.EtcdClientAddr = "127.0.0.1:2379"
		}
		if c.EtcdPeerAddr == "" {
			c.EtcdPeerAddr = "127.0.0.1:2380"
		}
		if c.EtcdInitialCluster != "" {
			if err := parseInitialCluster(c.EtcdInitialCluster, c.Name); err != nil {
				return err
			}
		}
	}
	if c.NoEngine && c.NoAgent {
		c.Logger.Warn("--no-engine and --no-agent: this daemon only serves the API")
	}
	if err := c.boundCapacity(machine.Detect()); err != nil {
		return err
	}
	if c.Prefix == "" {
		c.Prefix = registry.DefaultPrefix
	}
	return nil
}

// validateAgentOnly checks the configuration of a machine that only runs
// units (--servers).
func (c *Config) validateAgentOnly() error {
	switch {
	case c.EtcdEmbed || len(c.EtcdEndpoints) > 0:
		return errors.New("--servers and --etcd-embed or --etcd-endpoints exclude each other: a machine given --servers only runs units and reaches no etcd")
	case c.Registry == registry.ModeEtcd:
		return errors.New("--servers and --registry etcd exclude each other: in the etcd registry every agent works through etcd (see docs/security.md)")
	case c.NoAgent:
		return errors.New("--servers and --no-agent exclude each other: a machine given --servers only runs units")
	}
	c.NoEngine = true
	for _, a := range c.Servers {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("--servers %q: want the gRPC addresses (--grpc-addr) of servers, host:port,...: %w", a, err)
		}
	}
	return nil
}

// boundCapacity fills the capacity not set with what the host has, and
// refuses to offer more than it has: a machine's capacity claims are
// bounded by what its agent can show, the host's CPUs (Go's NumCPU: those
// the process may run on) and its memory (/proc/meminfo's MemTotal). The
// sim driver's units use nothing, so it may offer any.
func (c *Config) boundCapacity(host machine.Capacity) error {
	if c.Capacity.CPUPercent == 0 {
		c.Capacity.CPUPercent = host.CPUPercent
	}
	if c.Capacity.MemoryBytes == 0 {
		c.Capacity.MemoryBytes = host.MemoryBytes
	}
	if c.Driver == "sim" {
		return nil
	}
	if host.CPUPercent > 0 && c.Capacity.CPUPercent > host.CPUPercent {
		return fmt.Errorf("--capacity-cpu %s: this host has %s CPUs; a machine offers at most what it has", cpus(c.Capacity.CPUPercent), cpus(host.CPUPercent))
	}
	if host.MemoryBytes > 0 && c.Capacity.MemoryBytes > host.MemoryBytes {
		return fmt.Errorf("--capacity-memory %d bytes: this host has %d bytes of memory; a machine offers at most what it has", c.Capacity.MemoryBytes, host.MemoryBytes)
	}
	return nil
}

// cpus writes CPU percent as a count of CPUs, as --capacity-cpu takes it.
func cpus(percent int64) string { return strconv.FormatFloat(float64(percent)/100, 'g', -1, 64) }

// exposed returns the first listener address that is not on loopback.
func (c *Config) exposed() (flag, addr string) {
	ls := [][2]string{{"--api-addr", c.APIAddr}}
	if len(c.Servers) == 0 {
		ls = append(ls, [2]string{"--grpc-addr", c.GRPCAddr})
	}
	if c.EtcdEmbed {
		ls = append(ls, [2]string{"--etcd-client-addr", c.EtcdClientAddr}, [2]string{"--etcd-peer-addr", c.EtcdPeerAddr})
	}
	for _, l := range ls {
		if !auth.Loopback(l[1]) {
			return l[0], l[1]
		}
	}
	return "", ""
}

// credentials loads the machine's TLS credentials (nil without --tls-*)
// and refuses to listen beyond loopback without TLS and ACL unless
// --insecure.
func (c *Config) credentials() (*auth.Credentials, error) {
	var creds *auth.Credentials
	if c.TLS.Set() {
		var err error
		if creds, err = auth.Load(c.TLS, "--tls", c.Name); err != nil {
			return nil, err
		}
		etcdAgent := c.Registry == registry.ModeEtcd && len(c.EtcdEndpoints) > 0
		if creds.Kind() == auth.KindAgent && len(c.Servers) == 0 && !etcdAgent {
			return nil, fmt.Errorf("--tls-cert %s is an agent certificate: this machine only runs units and runs no engine nor etcd member; give --servers with the servers' gRPC addresses, or --registry etcd with --etcd-endpoints of the servers' etcd (see docs/security.md), or use a server certificate, made without --agent", c.TLS.Cert)
		}
	}
	if len(c.Servers) > 0 && c.ACL && creds == nil {
		return nil, errors.New("--servers with --acl needs --tls-ca, --tls-cert and --tls-key: a machine that only runs units cannot check API tokens, and takes the servers' reads of its units by their certificates")
	}
	if flag, addr := c.exposed(); flag != "" && (creds == nil || !c.ACL) && !c.Insecure {
		return nil, fmt.Errorf("%s %s listens beyond loopback, where anyone who reaches it could run commands as root on every machine: "+
			"give --tls-ca, --tls-cert, --tls-key and --acl (see docs/security.md), or --insecure to run open anyway", flag, addr)
	}
	if c.EtcdEmbed && c.EtcdInitialCluster != "" {
		want := "http://"
		if creds != nil {
			want = "https://"
		}
		for _, part := range strings.Split(c.EtcdInitialCluster, ",") {
			if _, u, _ := strings.Cut(part, "="); !strings.HasPrefix(u, want) {
				return nil, fmt.Errorf("--etcd-initial-cluster: %q: with%s --tls-cert the peer URLs are %s...", part, map[bool]string{true: "", false: "out"}[creds != nil], want)
			}
		}
	}
	return creds, nil
}

// etcdClientTLS is the TLS configuration to dial etcd: nil for plain
// http, the machine's for the embedded member, --etcd-* (falling back to
// --tls-*) for an external cluster.
func (c *Config) etcdClientTLS(creds *auth.Credentials) (*tls.Config, error) {
	if c.EtcdEmbed {
		if creds == nil {
			return nil, nil
		}
		return creds.ClientConfig(), nil
	}
	f := c.EtcdTLS
	if f.CA == "" {
		f.CA = c.TLS.CA
	}
	if f.Cert == "" && f.Key == "" {
		f.Cert, f.Key = c.TLS.Cert, c.TLS.Key
	}
	if !f.Set() {
		return nil, nil
	}
	tc, err := auth.ClientConfig(f)
	if err != nil {
		return nil, fmt.Errorf("--etcd-ca, --etcd-cert, --etcd-key: %w", err)
	}
	return tc, nil
}

// Run runs the daemon until ctx is done, then shuts down in order: API,
// engine (resigning leadership at once), agent and its units, etcd.
func Run(ctx context.Context, cfg Config) (err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	log := cfg.Logger.With("machine", cfg.Name)
	creds, err := cfg.credentials()
	if err != nil {
		return err
	}
	etcdTLS, err := cfg.etcdClientTLS(creds)
	if err != nil {
		return err
	}
	if err := privateDir(cfg.DataDir); err != nil {
		return err
	}
	if cfg.lock == nil {
		lock, err := lockDataDir(cfg.DataDir)
		if err != nil {
			return err
		}
		defer lock.Close() // last: once the supervisor is detached
	}
	instance, err := machine.Instance(cfg.DataDir)
	if err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	var cleanups []func()
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()

	// The API's listeners first: a socket in use is refused before
	// anything starts.
	apiLns, err := listenAPI(&cfg)
	if err != nil {
		return err
	}
	cleanups = append(cleanups, apiLns.close)
	if apiLns.activated > 0 {
		// A socket systemd passed may listen beyond loopback.
		if _, err := cfg.credentials(); err != nil {
			return fmt.Errorf("socket activation: %w", err)
		}
	}

	endpoints := cfg.EtcdEndpoints
	var etcdClientAddr string
	// In the etcd registry mode with TLS the embedded etcd admits agent
	// certificates too, and its own authentication confines each machine
	// to its keys (etcdauth.go). In the grpc registry only servers pass its
	// TLS, and each would be etcd's root anyway.
	etcdAuth := cfg.EtcdEmbed && creds != nil && cfg.Registry == registry.ModeEtcd
	if cfg.EtcdEmbed {
		e, err := startEtcd(etcdMember{Name: cfg.Name, Dir: cfg.DataDir, ClientAddr: cfg.EtcdClientAddr,
			PeerAddr: cfg.EtcdPeerAddr, InitialCluster: cfg.EtcdInitialCluster, TLS: creds, MaxTxnOps: uint(cfg.MaxTxnOps),
			AdmitAgents: etcdAuth}, 60*time.Second)
		if err != nil {
			return err
		}
		cleanups = append(cleanups, func() { closeEtcd(e) })
		go resetStalePeerStreams(e, cfg.Name, cfg.EtcdPeerAddr, cfg.EtcdInitialCluster, log)
		etcdClientAddr = e.Clients[0].Addr().String()
		endpoints = []string{scheme(creds) + "://" + etcdClientAddr}
		log.Info("embedded etcd member ready", "client", etcdClientAddr, "peer", cfg.EtcdPeerAddr)
	}
	ms := metrics.New()
	// A machine that only runs units (--servers) has no etcd client: its
	// agent asks the servers who leads. One with an agent certificate in
	// the etcd registry mode (etcdAgent) has one, which etcd's
	// authentication confines to its own keys once it is enrolled
	// (etcdauth.go); it runs no engine, and its API forwards as the
	// former's does (forwardsAll).
	agentOnly := len(cfg.Servers) > 0
	etcdAgent := creds != nil && creds.Kind() == auth.KindAgent && !agentOnly
	forwardsAll := agentOnly || etcdAgent
	if etcdAgent {
		cfg.NoEngine = true
	}
	var cli, electionCli *clientv3.Client
	var grpcLn net.Listener
	addrs := Addrs{API: advertise(apiLns.tcp[0].Addr(), cfg.PublicIP), EtcdClient: etcdClientAddr}
	if !agentOnly {
		etcdCfg := clientv3.Config{
			Endpoints: endpoints, DialTimeout: 5 * time.Second, DialOptions: append(ms.EtcdDialOptions(), etcdReconnect),
			DialKeepAliveTime: 5 * time.Second, DialKeepAliveTimeout: 5 * time.Second,
			Logger: zap.NewNop(), MaxCallSendMsgSize: 64 << 20, MaxCallRecvMsgSize: 1 << 30,
			TLS: etcdTLS,
		}
		if cli, err = clientv3.New(etcdCfg); err != nil {
			return fmt.Errorf("etcd client for %s: %w", strings.Join(endpoints, ","), err)
		}
		cleanups = append(cleanups, func() { cli.Close() })
		// The engine's election (campaign, lease renewals, probes) has a
		// connection of its own: the leader's large writes and watches on cli
		// cannot hold a renewal back past the lease's TTL.
		if electionCli, err = clientv3.New(etcdCfg); err != nil {
			return fmt.Errorf("etcd client for %s: %w", strings.Join(endpoints, ","), err)
		}
		cleanups = append(cleanups, func() { electionCli.Close() })
		if etcdAuth {
			if err := startEtcdAuth(ctx, cli, cfg.Name, cfg.EtcdInitialCluster); err != nil {
				return err
			}
			log.Info("etcd authentication on: certificates' names are its users")
		}
	}
	if !forwardsAll {
		if grpcLn, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
			return listenError("--grpc-addr", cfg.GRPCAddr, err)
		}
		if creds == nil {
			// No certificates to tell machines apart: on loopback, agents
			// of this daemon's own user (or root) alone.
			grpcLn = ownerListener{Listener: grpcLn, o: currentOwner()}
		}
		addrs.GRPC = advertise(grpcLn.Addr(), cfg.PublicIP)
	}
	for _, ln := range apiLns.unix {
		addrs.APISocket = append(addrs.APISocket, ln.Addr().String())
	}
	grpcAdvertised := addrs.GRPC
	if cfg.GRPCAdvertiseAddr != "" {
		grpcAdvertised = cfg.GRPCAdvertiseAddr
	}
	keys := registry.Keys{Prefix: cfg.Prefix}

	var (
		wg  sync.WaitGroup
		eng *engine.Engine
	)
	// The daemon's parts run until the shutdown below stops them; with
	// --stop-units-on-exit the agent (and the engine, which may be the
	// leader that takes its Leave) must outlive ctx while the units stop.
	parent := ctx
	if cfg.StopUnitsOnExit {
		parent = context.WithoutCancel(ctx)
	}
	runCtx, stop := context.WithCancel(parent)
	defer stop()

	// The current leader, for forwarding API requests and for agents that ask
	// the engine (when etcd cannot tell them).
	var (
		lmu    sync.Mutex
		leader election.Info
	)
	var leaders func(ctx context.Context) <-chan election.Info // nil: the agent asks the servers
	if !agentOnly {
		leaders = func(ctx context.Context) <-chan election.Info { return election.Observe(ctx, cli, keys.Election()) }
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if agentOnly {
			return // the agent learns the leader from the servers
		}
		for in := range leaders(runCtx) {
			lmu.Lock()
			changed := leader.Rev != in.Rev
			leader = in
			lmu.Unlock()
			if changed && in.Machine != "" {
				ms.LeaderChanges.Inc()
			}
			if in.Machine != "" {
				log.Info("engine leader", "leader", in.Machine, "leader_rev", in.Rev)
			}
		}
	}()
	var ag *agent.Agent
	currentLeader := func() (election.Info, bool) {
		if agentOnly {
			return ag.Leader()
		}
		lmu.Lock()
		defer lmu.Unlock()
		return leader, leader.Machine != ""
	}

	conns := newConnLimit(log)
	if grpcLn != nil {
		grpcLn = conns.wrap(grpcLn, true, creds == nil)
	}
	gopts := []grpc.ServerOption{
		grpc.ConnectionTimeout(limits.GRPCHandshakeTimeout),
		grpc.MaxRecvMsgSize(limits.EngineRecvBytes),
		grpc.MaxConcurrentStreams(limits.GRPCStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
		// A stream's liveness is the agent's heartbeats (the leader stops
		// speaking to an agent silent for two intervals, and places its
		// units elsewhere after their LostAfter=, or later when many
		// machines fall silent at once: engine/doubt.go); the transport's
		// pings only find dead TCP peers, and must not be quicker than the
		// leader's judgement. Answered within 5 s, they cut healthy agents
		// off a leader whose host was busy: at 10,000 agents reconnecting
		// to a new leader, thousands of streams dropped and reconnected in
		// waves. After 30 s of silence (10 s, then 20 s unanswered) they
		// still closed streams of agents that had fallen behind on a
		// starved host during a million-unit start (agents read EOF from
		// the leader 1,667 times, 30 s after they fell silent): each
		// then dialled again through the leader's listen queue, full of
		// others doing the same (dial timeouts, backoff up to 15 s), and
		// machines stayed away for minutes. A dead peer now holds its
		// stream for 2 min.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 90 * time.Second}),
	}
	gopts = append(gopts, agentpb.ServerTransport()...)
	var authorizeAgent func(ctx context.Context, machine, ip, apiAddr string) error
	if creds != nil {
		gopts = append(gopts, grpc.Creds(handshakeCreds{credentials.NewTLS(creds.ServerConfig())}))
		authorizeAgent = auth.CheckAgent
	}
	gsrv := grpc.NewServer(gopts...)
	if !cfg.NoEngine {
		eng, err = engine.New(engine.Config{Machine: cfg.Name, Client: cli, ElectionClient: electionCli, Keys: keys, ElectionTTL: cfg.ElectionTTL,
			AgentTTL: cfg.AgentTTL, Registry: cfg.Registry, LeaderInfo: currentLeader, GRPCAddr: grpcAdvertised, APIAddr: addrs.API, MaxTxnOps: cfg.MaxTxnOps, Logger: cfg.Logger, Metrics: ms,
			AuthorizeAgent: authorizeAgent})
		if err != nil {
			grpcLn.Close()
			return err
		}
		agentpb.RegisterEngineServer(gsrv, eng)
	}
	if grpcLn != nil {
		go gsrv.Serve(grpcLn)
		cleanups = append(cleanups, gsrv.Stop)
	}

	var drv driver.Driver
	var sup *supervisor.Client // the exec driver's, if it runs
	refused := &refusal{machine: cfg.Name, log: log}
	if !cfg.NoAgent {
		var dial []grpc.DialOption
		if creds != nil {
			// Only a server leads: an agent streams to no other machine.
			dial = []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(creds.ServerClientConfig()))}
		}
		var probeRun health.CommandRunner
		if sp := probeSpawner(cfg); sp != nil {
			defer sp.Close() // after the agent, which Run waits for
			probeRun = sp.Run
		}
		ag, err = agent.New(agent.Config{
			DialOptions: dial,
			Machine: agent.Machine{ID: cfg.Name, IP: cfg.PublicIP, Metadata: cfg.Metadata, APIAddr: addrs.API, Version: version.Get().Short(),
				CPUPercent: cfg.Capacity.CPUPercent, MemoryBytes: cfg.Capacity.MemoryBytes, Drivers: driverSet(cfg.Driver), Instance: instance},
			Leaders: leaders, Servers: cfg.Servers, TTL: agentTTL(cfg), Logger: cfg.Logger,
			Registry: cfg.Registry, Etcd: cli, Keys: keys, OnRefused: refused.set,
			ProbeCommand: func(f *unit.File, c unit.Command) (*exec.Cmd, error) {
				return execdriver.ProbeCommand(f, c, cfg.secretPaths()...)
			},
			ProbeRunner: probeRun,
		})
		if err != nil {
			return err
		}
		drv, sup, err = newDriver(cfg, ag.Notify)
		if err != nil {
			return err
		}
		ag.SetDriver(drv)
	}

	acfg := api.Config{Machine: cfg.Name, Engine: eng, Leader: currentLeader, Driver: drv, Metrics: ms,
		Version: Version, Registry: cfg.Registry, Logger: cfg.Logger, MetricsPublic: cfg.MetricsPublic, ServerNames: []string{cfg.Name},
		ACL: cfg.ACL, AgentOnly: forwardsAll, WriteRate: cfg.TokenWriteRate, WriteBurst: cfg.TokenWriteBurst}
	if etcdAuth {
		acfg.EnrolMachine = func(ctx context.Context, id string, server bool) error {
			return enrolMachine(ctx, cli, keys, id, server)
		}
	}
	if !forwardsAll {
		acfg.Durable = func(ctx context.Context) (*state.Snapshot, error) { return engine.DurableState(ctx, cli, keys) }
	}
	if h, err := os.Hostname(); err == nil {
		acfg.ServerNames = append(acfg.ServerNames, h)
	}
	if cfg.AuditLog != "" {
		al, err := audit.Open(audit.Config{Path: cfg.AuditLog, Logger: log})
		if err != nil {
			return fmt.Errorf("--audit-log: %w", err)
		}
		cleanups = append(cleanups, func() { al.Close() })
		acfg.Audit = al
	}
	if cfg.ACL && !forwardsAll {
		acfg.Tokens = auth.NewTokens(cli, cfg.Prefix, cfg.Logger)
		wg.Add(1)
		go func() { defer wg.Done(); acfg.Tokens.Run(runCtx) }()
	}
	srv := &http.Server{ReadHeaderTimeout: limits.HTTPReadHeaderTimeout, ReadTimeout: limits.HTTPReadTimeout,
		WriteTimeout: limits.HTTPWriteTimeout, IdleTimeout: limits.HTTPIdleTimeout,
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: limits.HTTP2Streams}}
	if creds != nil {
		acfg.ServerNames = append(acfg.ServerNames, creds.Names()...)
		acfg.ForwardScheme = "https"
		// Requests go on, with the person's token, to the leader alone,
		// which must hold a server certificate; a read of one machine's
		// units goes with this daemon's identity only (api.Config).
		acfg.Forward = &http.Transport{TLSClientConfig: creds.ServerClientConfig(), ForceAttemptHTTP2: true,
			MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: 10 * time.Second}
		acfg.ForwardMachine = machineTransport(creds)
		srv.TLSConfig = creds.ServerConfig()
	}
	srv.Handler = refused.gate(api.New(acfg))
	if !cfg.ACL {
		// No tokens to tell people apart: on loopback, this daemon's own
		// user (and root) alone.
		o := currentOwner()
		o.metricsPublic = cfg.MetricsPublic
		srv.ConnContext = o.connContext
		srv.Handler = o.handler(srv.Handler)
	}
	for i, ln := range apiLns.tcp {
		ln = conns.wrap(ln, false, false)
		apiLns.tcp[i] = ln
		if creds != nil {
			go srv.ServeTLS(ln, "", "")
		} else {
			go srv.Serve(ln)
		}
	}
	// The unix socket speaks plain HTTP: its file mode is its guard.
	usrv := &http.Server{Handler: srv.Handler, ReadHeaderTimeout: srv.ReadHeaderTimeout, ReadTimeout: srv.ReadTimeout,
		WriteTimeout: srv.WriteTimeout, IdleTimeout: srv.IdleTimeout}
	for _, ln := range apiLns.unix {
		go usrv.Serve(conns.wrap(ln, false, false))
	}
	wg.Add(1)
	go func() { defer wg.Done(); reloadCerts(runCtx, log, creds, ms, cfg.Reload) }()
	if flag, addr := cfg.exposed(); flag != "" && (creds == nil || !cfg.ACL) {
		wg.Add(1)
		go func() { defer wg.Done(); warnInsecure(runCtx, log, flag, addr, creds != nil, cfg.ACL) }()
	}

	if eng != nil {
		wg.Add(1)
		go func() { defer wg.Done(); eng.Run(runCtx) }()
	}
	agentDone := make(chan struct{})
	var agentErr error // set before agentDone closes
	if ag != nil {
		go func() { defer close(agentDone); agentErr = ag.Run(runCtx) }()
	} else {
		close(agentDone)
	}
	log.Info("daemon running", "api", scheme(creds)+"://"+addrs.API, "api_socket", addrs.APISocket, "socket_activated", apiLns.activated, "grpc", addrs.GRPC, "engine", eng != nil, "agent", ag != nil,
		"servers", cfg.Servers, "tls", creds != nil, "acl", cfg.ACL)
	if cfg.Ready != nil {
		cfg.Ready(addrs)
	}
	notifySystemd(log, sddaemon.SdNotifyReady)

	select {
	case <-ctx.Done():
	case <-agentDone:
		// The agent ends by itself only on an error it cannot retry (a
		// refused machine name is retried: refusal).
		if agentErr == nil {
			<-ctx.Done()
		}
	}
	log.Info("shutting down")
	notifySystemd(log, sddaemon.SdNotifyStopping)
	// A daemon refused its machine name never speaks for that machine: it
	// does not leave in its name.
	joined := refused.current() == nil
	leave := cfg.StopUnitsOnExit && ag != nil && joined
	if leave {
		// fleet's shutdown: the units stop here, then the leader places
		// them elsewhere at once.
		lctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
		if err := ag.Leave(lctx); err != nil {
			log.Error("--stop-units-on-exit: leaving the cluster", "err", err)
		} else {
			log.Info("--stop-units-on-exit: units stopped; the machine left the cluster")
		}
		cancel()
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	srv.Shutdown(sctx)
	usrv.Shutdown(sctx)
	cancel()
	stop()
	wg.Wait() // the engine has resigned
	<-agentDone
	if drv != nil {
		// The supervisor's units keep running for the next daemon on this
		// data dir to adopt; the sim driver's units end with the process.
		// A daemon that left (its units stopped), or that was refused
		// before it ran any unit, ends the supervisor too.
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if det, ok := drv.(driver.Detacher); ok && !leave && (joined || len(drv.States()) > 0) {
			sayLeftRunning(log, cfg.DataDir, drv, sup)
			det.Detach(cctx)
		} else {
			drv.Close(cctx)
		}
		cancel()
	}
	return agentErr
}

// machineTransport returns the transport of reads forwarded to one
// machine (its units' journals): the machine's certificate must name it,
// and this daemon presents its own, never a person's token.
func machineTransport(creds *auth.Credentials) func(machine string) http.RoundTripper {
	var mu sync.Mutex
	ts := map[string]*http.Transport{}
	return func(machine string) http.RoundTripper {
		mu.Lock()
		defer mu.Unlock()
		t := ts[machine]
		if t == nil {
			t = &http.Transport{TLSClientConfig: creds.MachineClientConfig(machine), ForceAttemptHTTP2: true,
				MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second, TLSHandshakeTimeout: 10 * time.Second}
			ts[machine] = t
		}
		return t
	}
}

// sayLeftRunning logs, as the daemon exits, what keeps running after it
// and how to stop it.
func sayLeftRunning(log *slog.Logger, dataDir string, drv driver.Driver, sup *supervisor.Client) {
	running := func(sts []unit.Status) int {
		n := 0
		for _, st := range sts {
			if st.Running() {
				n++
			}
		}
		return n
	}
	all := running(drv.States())
	if sup == nil {
		if all > 0 {
			log.Info(keepRunning(all)+" after this daemon, in their driver; a daemon restarted on this data dir adopts them", "units", all)
		}
		return
	}
	n := running(sup.States())
	stop := "flotilla supervisor stop --data-dir " + dataDir
	msg := fmt.Sprintf("%s under the supervisor (pid %d); a daemon restarted on this data dir adopts them, and `%s` stops them and it", keepRunning(n), sup.PID(), stop)
	if n == 0 {
		msg = fmt.Sprintf("no unit runs; the supervisor (pid %d) ends by itself after %v without a daemon, or at once with `%s`", sup.PID(), supervisor.DefaultIdleExit, stop)
	}
	if others := all - n; others > 0 {
		msg += fmt.Sprintf("; %d more in their driver", others)
	}
	log.Info(msg, "units", n, "supervisor_pid", sup.PID(), "stop", stop)
}

func keepRunning(n int) string {
	if n == 1 {
		return "1 unit keeps running"
	}
	return fmt.Sprintf("%d units keep running", n)
}

func scheme(creds *auth.Credentials) string {
	if creds != nil {
		return "https"
	}
	return "http"
}

// warnInsecure says, at once and every hour, that the daemon listens
// beyond loopback without the credentials it should require.
func warnInsecure(ctx context.Context, log *slog.Logger, flag, addr string, tls, acl bool) {
	t := time.NewTicker(insecureWarningEvery)
	defer t.Stop()
	for {
		log.Warn("--insecure: listening beyond loopback without TLS and API tokens; anyone who reaches this daemon can run commands on every machine",
			"listener", flag, "addr", addr, "tls", tls, "acl", acl)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func agentTTL(cfg Config) time.Duration {
	if cfg.AgentTTL != 0 {
		return cfg.AgentTTL
	}
	return machine.DefaultTTL
}

// advertise turns a listener address into one others can dial.
func advertise(a net.Addr, publicIP string) string {
	host, port, _ := net.SplitHostPort(a.String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = publicIP
	}
	return net.JoinHostPort(host, port)
}

func closeEtcd(e *embed.Etcd) {
	done := make(chan struct{})
	go func() { e.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// checkMetadata checks a machine's metadata against the limits on pairs
// and their lengths.
func checkMetadata(flag string, md map[string]string) error {
	if err := machine.CheckMetadataCount(len(md)); err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	for k, v := range md {
		if err := machine.CheckMetadataPair(k, v); err != nil {
			return fmt.Errorf("%s: %w", flag, err)
		}
	}
	return nil
}

// privateDir makes the data directory, or tightens one that exists, to
// mode 0700: it holds the etcd member, the supervisor's socket and the
// local token, none of which anyone but the daemon's user may read.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	return nil
}

// probeSpawner is what runs the agent's [X-Check] Exec= probes as root,
// with paths to hide from units: one mount namespace made for them all
// (unithide.Spawner), instead of one made by an execution of this binary
// per probe; nil otherwise, each probe started and waited for. The
// spawner's process dies with the daemon's.
func probeSpawner(cfg Config) *unithide.Spawner {
	paths := cfg.secretPaths()
	if os.Geteuid() != 0 || len(paths) == 0 {
		return nil
	}
	return unithide.NewSpawner(paths)
}
