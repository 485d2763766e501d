package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/flotilla/flotilla/internal/daemon"
	"github.com/flotilla/flotilla/internal/flagconfig"
	"github.com/flotilla/flotilla/internal/gctune"
	"github.com/flotilla/flotilla/internal/limits"
	"github.com/flotilla/flotilla/internal/machine"
	"github.com/flotilla/flotilla/internal/profiling"
	"github.com/flotilla/flotilla/internal/unit"
)

type daemonFlags struct {
	cfg         daemon.Config
	endpoints   string
	servers     string
	level       slog.Level
	config      string
	printConfig bool
	profileDir  string
	gcPercent   int
}

// Flags of daemon and dev that are not configuration: they cannot be keys
// of the configuration file.
var notConfig = []string{"config", "print-config", "profile-dir"}

func (f *daemonFlags) register(cmd *cobra.Command, full bool) {
	fs := cmd.Flags()
	fs.StringVar(&f.config, "config", "", "YAML configuration file whose keys are these flags' names (data-dir: /var/lib/flotilla); flags and $FLOTILLA_<FLAG> override it")
	fs.StringVar(&f.profileDir, "profile-dir", "", "keep CPU and heap profiles in this directory over the window SIGUSR1 (start) and SIGUSR2 (stop) mark (flotilla bench --profile)")
	fs.MarkHidden("profile-dir")
	fs.IntVar(&f.gcPercent, "gc-percent", 0, "the Go collector's GOGC for this process; 0 (default) keeps Go's 100 while the heap is small and then bounds its growth past what is live to 256 MiB, not under 50 (a GOGC variable in the environment wins)")
	fs.BoolVar(&f.printConfig, "print-config", false, "print the configuration merged from flags, environment, file and defaults as YAML (with where each value came from), then exit")
	fs.StringVar(&f.cfg.DataDir, "data-dir", "", "directory for the etcd member, unit logs and state")
	fs.StringVar(&f.cfg.APIAddr, "api-addr", "127.0.0.1:7480", "address the HTTP API listens on")
	fs.StringVar(&f.cfg.APISocket, "api-socket", "", "unix socket to serve the whole API on as well, mode 0600 (fleet's was /var/run/fleet.sock); sockets passed by systemd socket activation take the place of --api-addr and --api-socket")
	fs.StringVar(&f.cfg.APISocketGroup, "api-socket-group", "", "group (name or ID) whose members may use --api-socket too: mode 0660")
	fs.StringVar(&f.cfg.GRPCAddr, "grpc-addr", "127.0.0.1:0", "address the engine serves agents on (port 0: a free port)")
	fs.StringVar(&f.cfg.Name, "name", "", "machine name, used as its ID (default: the host name; \"dev\" for flotilla dev)")
	fs.Var(parsed(func(v string) (err error) {
		f.cfg.Metadata = nil
		if v != "" {
			f.cfg.Metadata, err = unit.ParseMetadata(v)
		}
		return err
	}), "metadata", "machine metadata, k=v,k2=v2")
	fs.StringVar(&f.cfg.PublicIP, "public-ip", "127.0.0.1", "the machine's IP, shown by list-machines")
	fs.DurationVar(&f.cfg.AgentTTL, "agent-ttl", machine.DefaultTTL, "default [X-Fleet] LostAfter=: how long a machine may go unheard before its units are started elsewhere (singleton units are killed on it first)")
	fs.DurationVar(&f.cfg.ElectionTTL, "election-ttl", 0, "engine leader lease TTL, whole seconds (default 4s; 2s for dev); must be under half the agent TTL")
	fs.Var(parsed(func(v string) error {
		if err := f.level.UnmarshalText([]byte(v)); err != nil {
			return errors.New("want debug, info, warn or error")
		}
		return nil
	}).init("info"), "log-level", "debug, info, warn or error")
	fs.StringVar(&f.cfg.Driver, "driver", "exec", "how units run: exec (supervised processes), systemd (the machine's systemd, over D-Bus), docker (containers), or several, comma-separated, in order of preference; sim (in memory) for benchmarks")
	fs.DurationVar(&f.cfg.SimStartDelay, "sim-start-delay", 0, "sim driver: how long a unit takes to start")
	fs.Float64Var(&f.cfg.SimFailureRate, "sim-failure-rate", 0, "sim driver: share of starts that fail, 0 to 1")
	fs.Var(parsed(func(v string) (err error) {
		f.cfg.Capacity.CPUPercent = 0
		if v != "" {
			f.cfg.Capacity.CPUPercent, err = machine.ParseCPUs(v)
		}
		return err
	}), "capacity-cpu", "CPUs this machine offers to units, e.g. 4 or 0.5 (default: detected)")
	fs.Var(parsed(func(v string) (err error) {
		f.cfg.Capacity.MemoryBytes = 0
		if v != "" {
			f.cfg.Capacity.MemoryBytes, err = unit.ParseSize(v)
		}
		return err
	}), "capacity-memory", "memory this machine offers to units, e.g. 8G (default: detected)")
	fs.Var(parsed(func(v string) (err error) {
		f.cfg.LogMaxSize, err = unit.ParseSize(v)
		return err
	}).init("16M"), "log-max-size", "size at which a unit's log file is rotated, e.g. 16M (at least 1K; a unit's [X-Fleet] LogMaxSize= overrides it)")
	fs.Var(parsed(func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > unit.MaxLogMaxFiles {
			return fmt.Errorf("want a whole number from 0 to %d", unit.MaxLogMaxFiles)
		}
		f.cfg.LogMaxFiles = n
		if n == 0 {
			f.cfg.LogMaxFiles = -1 // none kept
		}
		return nil
	}).init("1"), "log-max-files", "rotated log files kept per unit beside the current one, 0 to 100 (a unit's [X-Fleet] LogMaxFiles= overrides it)")
	fs.BoolVar(&f.cfg.LogJournald, "log-journald", false, "also send every line of every unit's log to the local journald (SYSLOG_IDENTIFIER=the unit, FLOTILLA_UNIT=, FLOTILLA_MACHINE=)")
	fs.StringVar(&f.cfg.TLS.CA, "tls-ca", "", "the cluster CA's certificate (flotilla tls ca create): with --tls-cert and --tls-key, every connection is mutual TLS")
	fs.StringVar(&f.cfg.TLS.Cert, "tls-cert", "", "this machine's certificate, signed by --tls-ca and naming --name (flotilla tls cert create)")
	fs.StringVar(&f.cfg.TLS.Key, "tls-key", "", "the key of --tls-cert")
	fs.BoolVar(&f.cfg.ACL, "acl", false, "require an API token with a role on every request (flotilla acl bootstrap makes the first)")
	fs.BoolVar(&f.cfg.MetricsPublic, "metrics-public", false, "with --acl, serve /metrics without a token")
	fs.Float64Var(&f.cfg.TokenWriteRate, "token-write-rate", limits.TokenWriteRate, "with --acl, the writes a second each API token may make on this daemon (429 beyond; negative: no limit)")
	fs.StringVar(&f.cfg.AuditLog, "audit-log", "", "record every write and every refused API request in this file, as JSON lines (rotated at 64 MiB, 5 kept; read with flotilla audit)")
	fs.IntVar(&f.cfg.TokenWriteBurst, "token-write-burst", limits.TokenWriteBurst, "with --acl, the writes an API token may make at once before --token-write-rate applies")
	fs.BoolVar(&f.cfg.Insecure, "insecure", false, "listen beyond loopback without TLS and --acl (warns at start and every hour)")
	fs.BoolVar(&f.cfg.StopUnitsOnExit, "stop-units-on-exit", false, "fleet's shutdown: on SIGTERM or SIGINT (Ctrl-C), stop this machine's units (each within its stop timeout) and its supervisor, and leave the cluster, so the leader places them elsewhere at once (default: units outlive the daemon, which logs how to stop them)")
	cmd.MarkFlagFilename("config", "yaml", "yml")
	cmd.MarkFlagDirname("data-dir")
	cmd.MarkFlagFilename("api-socket")
	completeValues(cmd, "log-level", "debug", "info", "warn", "error")
	completeValues(cmd, "driver", "exec", "systemd", "docker", "exec,docker", "systemd,docker", "sim")
	if !full {
		return
	}
	fs.BoolVar(&f.cfg.NoEngine, "no-engine", false, "run no engine candidate on this machine")
	fs.StringVar(&f.cfg.Registry, "registry", "grpc", "how agents and the engine coordinate: grpc (a stream per agent to the leader) or etcd (through etcd, as fleet did)")
	fs.StringVar(&f.cfg.GRPCAdvertiseAddr, "grpc-advertise-addr", "", "address agents dial for this engine, if not --grpc-addr (a proxy, a NAT address)")
	fs.BoolVar(&f.cfg.NoAgent, "no-agent", false, "run no agent (no units) on this machine")
	fs.StringVar(&f.endpoints, "etcd-endpoints", "", "client URLs of an external etcd cluster, URL,...")
	fs.StringVar(&f.servers, "servers", "", "a machine that only runs units: the servers' gRPC addresses (their --grpc-addr), HOST:PORT,...; no etcd, no engine (needed with an agent certificate, tls cert create --agent, but in the etcd registry: see docs/security.md)")
	fs.BoolVar(&f.cfg.EtcdEmbed, "etcd-embed", false, "run an etcd member in this process")
	fs.StringVar(&f.cfg.EtcdClientAddr, "etcd-client-addr", "127.0.0.1:2379", "embedded etcd member's client address")
	fs.StringVar(&f.cfg.EtcdPeerAddr, "etcd-peer-addr", "127.0.0.1:2380", "embedded etcd member's peer address")
	fs.StringVar(&f.cfg.EtcdInitialCluster, "etcd-initial-cluster", "", "embedded etcd's initial cluster, n1=http://ADDR1,n2=http://ADDR2,... (https:// with --tls-cert; default: this member alone)")
	fs.StringVar(&f.cfg.EtcdTLS.CA, "etcd-ca", "", "CA certificate of an external etcd's servers (default: --tls-ca)")
	fs.StringVar(&f.cfg.EtcdTLS.Cert, "etcd-cert", "", "client certificate for an external etcd (default: --tls-cert)")
	fs.StringVar(&f.cfg.EtcdTLS.Key, "etcd-key", "", "key of --etcd-cert (default: --tls-key)")
	fs.StringVar(&f.cfg.Prefix, "etcd-prefix", "/flotilla/", "etcd key prefix of the cluster's data")
	fs.IntVar(&f.cfg.MaxTxnOps, "etcd-max-txn-ops", 128, "most operations in one etcd transaction: an embedded member is started with it; an external etcd needs at least this --max-txn-ops")
	completeValues(cmd, "registry", "grpc", "etcd")
}

// load merges the configuration file (if --config names one) into the
// flags, and prints the result if --print-config asks; done tells that the
// command has nothing more to do.
func (f *daemonFlags) load(cmd *cobra.Command, src *flagconfig.Sources) (done bool, err error) {
	if f.config != "" {
		if err := src.LoadFile(cmd.LocalFlags(), f.config, notConfig...); err != nil {
			return false, err
		}
	}
	if f.printConfig {
		return true, src.Print(cmd.OutOrStdout(), cmd.LocalFlags(), notConfig...)
	}
	return false, nil
}

// profile keeps profiles on signals if --profile-dir asks.
// process sets up what belongs to the process, not the daemon: the
// collector's percent and the profiling signals.
func (f *daemonFlags) process(ctx context.Context) error {
	if f.gcPercent < 0 {
		return fmt.Errorf("--gc-percent %d: want 0 (bounded) or a positive percent", f.gcPercent)
	}
	gctune.Run(ctx, f.gcPercent, f.cfg.Logger)
	if f.profileDir == "" {
		return nil
	}
	return profiling.OnSignals(ctx, f.profileDir, f.cfg.Logger)
}

func (f *daemonFlags) finish() {
	f.cfg.EtcdEndpoints = append(f.cfg.EtcdEndpoints, splitList(f.endpoints)...)
	f.cfg.Servers = append(f.cfg.Servers, splitList(f.servers)...)
	f.cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: f.level}))
}

// completeValues makes shells complete flag with values.
func completeValues(cmd *cobra.Command, flag string, values ...string) {
	cmd.RegisterFlagCompletionFunc(flag, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
}

// parsedValue is a string flag parsed when it is set, so that a bad value
// is refused naming where it came from: the flag, $FLOTILLA_<FLAG>, or the
// configuration file's line.
type parsedValue struct {
	s     string
	parse func(string) error
}

func parsed(parse func(string) error) *parsedValue { return &parsedValue{parse: parse} }

// init sets the default value v, which must parse.
func (p *parsedValue) init(v string) *parsedValue {
	if err := p.Set(v); err != nil {
		panic(err)
	}
	return p
}

func (p *parsedValue) String() string { return p.s }
func (p *parsedValue) Type() string   { return "string" }
func (p *parsedValue) Set(v string) error {
	if err := p.parse(v); err != nil {
		return err
	}
	p.s = v
	return nil
}

// cannotRun is the error of a daemon that could not run, or stopped
// running: exit code 1 whatever the cause (docs/cli.md). The network
// errors inside (a listener in use) are not a cluster the CLI could not
// reach (4).
func cannotRun(err error) error {
	if err == nil {
		return nil
	}
	return errors.New(err.Error())
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func devCommand(src *flagconfig.Sources) *cobra.Command {
	var f daemonFlags
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a one-machine cluster: embedded etcd, engine, agent and API in one process",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if done, err := f.load(cmd, src); done || err != nil {
				return err
			}
			f.finish()
			if f.cfg.DataDir == "" {
				f.cfg.DataDir = "flotilla-dev"
			}
			ctx, cancel := signalContext()
			defer cancel()
			if err := f.process(ctx); err != nil {
				return err
			}
			return cannotRun(daemon.Dev(ctx, daemon.DevConfig{Config: f.cfg}))
		},
	}
	f.register(cmd, false)
	f.cfg.DataDir = "flotilla-dev"
	cmd.Flags().Lookup("data-dir").DefValue = f.cfg.DataDir
	return cmd
}

func daemonCommand(src *flagconfig.Sources) *cobra.Command {
	var f daemonFlags
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Run one machine of a cluster: engine candidate, agent and API",
		Long: `Run one machine of a cluster: an engine candidate, an agent that runs units,
and the HTTP API (docs/cluster.md).

Every flag can also be set by the environment variable FLOTILLA_<FLAG>
(FLOTILLA_DATA_DIR for --data-dir) and by the key of the same name in the
YAML file --config names (data-dir: /var/lib/flotilla), as etcd's
--config-file. A flag on the command line wins over its variable, which wins
over the file. --print-config shows the result (docs/operations.md).

Under systemd (contrib/systemd/flotilla.service), the daemon tells systemd
it is ready (Type=notify) once its API serves.`,
		Example: `  flotilla daemon --config /etc/flotilla/flotilla.yaml
  flotilla daemon --config /etc/flotilla/flotilla.yaml --print-config
  FLOTILLA_LOG_LEVEL=debug flotilla daemon --data-dir /var/lib/flotilla --etcd-embed`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if done, err := f.load(cmd, src); done || err != nil {
				return err
			}
			f.finish()
			ctx, cancel := signalContext()
			defer cancel()
			if err := f.process(ctx); err != nil {
				return err
			}
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			f.cfg.Reload = hup
			return cannotRun(daemon.Run(ctx, f.cfg))
		},
	}
	f.register(cmd, true)
	return cmd
}
