package main

import (
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/flotilla/flotilla/internal/bench"
	"github.com/flotilla/flotilla/internal/daemon"
	"github.com/flotilla/flotilla/internal/machine"
	"github.com/flotilla/flotilla/internal/profiling"
)

// benchAgentsCommand runs many simulated agents in one process, for
// flotilla bench (which starts it; hidden from help).
func benchAgentsCommand() *cobra.Command {
	var (
		cfg       bench.AgentsConfig
		endpoints string
		logLevel  string
		profile   string
		gcPercent int
	)
	cmd := &cobra.Command{
		Use:    "bench-agents --count M --etcd-endpoints URL,...",
		Short:  "Run M simulated agents (sim driver) in one process, for flotilla bench",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, e := range strings.Split(endpoints, ",") {
				if e = strings.TrimSpace(e); e != "" {
					cfg.EtcdEndpoints = append(cfg.EtcdEndpoints, e)
				}
			}
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level %q: want debug, info, warn or error", logLevel)
			}
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
			cfg.Version = daemon.Version
			if _, set := os.LookupEnv("GOGC"); !set {
				debug.SetGCPercent(gcPercent)
			}
			ctx, cancel := signalContext()
			defer cancel()
			if profile != "" {
				if err := profiling.OnSignals(ctx, profile, cfg.Logger); err != nil {
					return err
				}
			}
			return bench.RunAgents(ctx, cfg)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&cfg.Count, "count", 1, "agents to run")
	fs.IntVar(&cfg.First, "first", 1, "index of the first agent")
	fs.IntVar(&cfg.Width, "width", 0, "digits of an index, zero-padded (default: as many as the last index has)")
	fs.StringVar(&cfg.Prefix, "prefix", "sim-", "machine name prefix; an agent's name is the prefix and its index")
	fs.StringVar(&cfg.Registry, "registry", "grpc", "how agents coordinate with the engine: grpc or etcd")
	fs.StringVar(&endpoints, "etcd-endpoints", "", "etcd client URLs, URL,...")
	fs.DurationVar(&cfg.SimStartDelay, "sim-start-delay", 0, "how long a simulated unit takes to start")
	fs.Float64Var(&cfg.SimFailureRate, "sim-failure-rate", 0, "share of starts that fail, 0 to 1")
	fs.DurationVar(&cfg.TTL, "agent-ttl", machine.DefaultTTL, "agent TTL; must match the engines' --agent-ttl")
	fs.StringVar(&cfg.TLSDir, "tls-dir", "", "directory with the CA (ca.pem) and each agent's certificate (NAME.pem, NAME-key.pem): mutual TLS to the leader and etcd")
	fs.StringVar(&logLevel, "log-level", "warn", "debug, info, warn or error")
	fs.StringVar(&cfg.StartsFile, "starts-file", "", "keep this file holding how many units the simulated machines have started, ever (flotilla bench judges restarts by it)")
	// The collector lets the heap grow by GOGC percent of what is live
	// (and of the stacks) before it collects: the lower the percent, the
	// more often it runs for what a process allocates. This process
	// stands in for thousands of agents, each of which runs in its own
	// daemon with a small heap, where gctune keeps Go's default, 100: so
	// does this one. At 50 (sessions 7-24, for memory) each simulated
	// agent paid about twice a real one's collections, and the agents'
	// processes of a million-unit start used 17.8-18.0 CPU-s against
	// 15.8-16.0 at 100, for 1,645-1,677 MiB in all against 1,787
	// (docs/benchmarks.md, session 25). The engines and etcd run as a
	// user's would.
	fs.IntVar(&gcPercent, "gc-percent", 100, "the collector's GOGC for this process (the GOGC environment variable, if set, wins)")
	fs.StringVar(&profile, "profile-dir", "", "keep CPU and heap profiles in this directory over the window SIGUSR1 (start) and SIGUSR2 (stop) mark (flotilla bench --profile)")
	return cmd
}
