package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/flotilla/flotilla/internal/daemon"
	"github.com/flotilla/flotilla/internal/machine"
	"github.com/flotilla/flotilla/internal/unit"
)

type daemonFlags struct {
	cfg                 daemon.Config
	metadata, endpoints string
	cpus, memory        string
	logLevel            string
}

func (f *daemonFlags) register(cmd *cobra.Command, full bool) {
	fs := cmd.Flags()
	fs.StringVar(&f.cfg.DataDir, "data-dir", "", "directory for the etcd member, unit logs and state")
	fs.StringVar(&f.cfg.APIAddr, "api-addr", "127.0.0.1:7480", "address the HTTP API listens on")
	fs.StringVar(&f.cfg.GRPCAddr, "grpc-addr", "127.0.0.1:0", "address the engine serves agents on (port 0: a free port)")
	fs.StringVar(&f.cfg.Name, "name", "", "machine name, used as its ID (default: the host name; \"dev\" for flotilla dev)")
	fs.StringVar(&f.metadata, "metadata", "", "machine metadata, k=v,k2=v2")
	fs.StringVar(&f.cfg.PublicIP, "public-ip", "127.0.0.1", "the machine's IP, shown by list-machines")
	fs.DurationVar(&f.cfg.AgentTTL, "agent-ttl", 20*time.Second, "how long a machine may go unheard before its units move (and its agent stops them)")
	fs.DurationVar(&f.cfg.ElectionTTL, "election-ttl", 0, "engine leader lease TTL, whole seconds (default 5s; 2s for dev); must be under half the agent TTL")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.cfg.Driver, "driver", "exec", "how units run: exec (processes) or sim (in memory, for benchmarks)")
	fs.DurationVar(&f.cfg.SimStartDelay, "sim-start-delay", 0, "sim driver: how long a unit takes to start")
	fs.Float64Var(&f.cfg.SimFailureRate, "sim-failure-rate", 0, "sim driver: share of starts that fail, 0 to 1")
	fs.StringVar(&f.cpus, "capacity-cpu", "", "CPUs this machine offers to units, e.g. 4 or 0.5 (default: detected)")
	fs.StringVar(&f.memory, "capacity-memory", "", "memory this machine offers to units, e.g. 8G (default: detected)")
	fs.StringVar(&f.cfg.TLS.CA, "tls-ca", "", "the cluster CA's certificate (flotilla tls ca create): with --tls-cert and --tls-key, every connection is mutual TLS")
	fs.StringVar(&f.cfg.TLS.Cert, "tls-cert", "", "this machine's certificate, signed by --tls-ca and naming --name (flotilla tls cert create)")
	fs.StringVar(&f.cfg.TLS.Key, "tls-key", "", "the key of --tls-cert")
	fs.BoolVar(&f.cfg.ACL, "acl", false, "require an API token with a role on every request (flotilla acl bootstrap makes the first)")
	fs.BoolVar(&f.cfg.MetricsPublic, "metrics-public", false, "with --acl, serve /metrics without a token")
	fs.BoolVar(&f.cfg.Insecure, "insecure", false, "listen beyond loopback without TLS and --acl (warns at start and every hour)")
	if !full {
		return
	}
	fs.BoolVar(&f.cfg.NoEngine, "no-engine", false, "run no engine candidate on this machine")
	fs.StringVar(&f.cfg.Registry, "registry", "grpc", "how agents and the engine coordinate: grpc (a stream per agent to the leader) or etcd (through etcd, as fleet did)")
	fs.StringVar(&f.cfg.GRPCAdvertiseAddr, "grpc-advertise-addr", "", "address agents dial for this engine, if not --grpc-addr (a proxy, a NAT address)")
	fs.BoolVar(&f.cfg.NoAgent, "no-agent", false, "run no agent (no units) on this machine")
	fs.StringVar(&f.endpoints, "etcd-endpoints", "", "client URLs of an external etcd cluster, URL,...")
	fs.BoolVar(&f.cfg.EtcdEmbed, "etcd-embed", false, "run an etcd member in this process")
	fs.StringVar(&f.cfg.EtcdClientAddr, "etcd-client-addr", "127.0.0.1:2379", "embedded etcd member's client address")
	fs.StringVar(&f.cfg.EtcdPeerAddr, "etcd-peer-addr", "127.0.0.1:2380", "embedded etcd member's peer address")
	fs.StringVar(&f.cfg.EtcdInitialCluster, "etcd-initial-cluster", "", "embedded etcd's initial cluster, n1=http://ADDR1,n2=http://ADDR2,... (https:// with --tls-cert; default: this member alone)")
	fs.StringVar(&f.cfg.EtcdTLS.CA, "etcd-ca", "", "CA certificate of an external etcd's servers (default: --tls-ca)")
	fs.StringVar(&f.cfg.EtcdTLS.Cert, "etcd-cert", "", "client certificate for an external etcd (default: --tls-cert)")
	fs.StringVar(&f.cfg.EtcdTLS.Key, "etcd-key", "", "key of --etcd-cert (default: --tls-key)")
	fs.StringVar(&f.cfg.Prefix, "etcd-prefix", "/flotilla/", "etcd key prefix of the cluster's data")
	fs.IntVar(&f.cfg.MaxTxnOps, "etcd-max-txn-ops", 128, "most operations in one etcd transaction: an embedded member is started with it; an external etcd needs at least this --max-txn-ops")
}

func (f *daemonFlags) finish() error {
	if f.metadata != "" {
		md, err := unit.ParseMetadata(f.metadata)
		if err != nil {
			return fmt.Errorf("--metadata: %w", err)
		}
		f.cfg.Metadata = md
	}
	if f.endpoints != "" {
		for _, e := range strings.Split(f.endpoints, ",") {
			if e = strings.TrimSpace(e); e != "" {
				f.cfg.EtcdEndpoints = append(f.cfg.EtcdEndpoints, e)
			}
		}
	}
	if f.cpus != "" {
		c, err := machine.ParseCPUs(f.cpus)
		if err != nil {
			return fmt.Errorf("--capacity-cpu: %w", err)
		}
		f.cfg.Capacity.CPUPercent = c
	}
	if f.memory != "" {
		m, err := unit.ParseSize(f.memory)
		if err != nil {
			return fmt.Errorf("--capacity-memory: %w", err)
		}
		f.cfg.Capacity.MemoryBytes = m
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	f.cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	return nil
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func devCommand() *cobra.Command {
	var f daemonFlags
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a one-machine cluster: embedded etcd, engine, agent and API in one process",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.finish(); err != nil {
				return err
			}
			if f.cfg.DataDir == "" {
				f.cfg.DataDir = "flotilla-dev"
			}
			ctx, cancel := signalContext()
			defer cancel()
			return daemon.Dev(ctx, daemon.DevConfig{Config: f.cfg})
		},
	}
	f.register(cmd, false)
	cmd.Flags().Lookup("data-dir").DefValue = "flotilla-dev"
	return cmd
}

func daemonCommand() *cobra.Command {
	var f daemonFlags
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Run one machine of a cluster: engine candidate, agent and API",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.finish(); err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			return daemon.Run(ctx, f.cfg)
		},
	}
	f.register(cmd, true)
	return cmd
}
