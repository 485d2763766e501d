package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/flotilla/flotilla/internal/bench"
)

func benchCommand() *cobra.Command {
	var (
		cfg      bench.Config
		registry string
	)
	cmd := &cobra.Command{
		Use:   "bench --agents M --units N",
		Short: "Measure how fast a real cluster on this host starts N units on M simulated agents",
		Long: `Starts a cluster on this host (an etcd process, engine daemons, and M simulated
agents in helper processes), starts N units through the API in one request (one per 100,000 units), and
reports how long each unit took until the leader saw it active (a histogram and
percentiles), units per second, etcd requests by kind, and the CPU time and peak
memory of the engine, the agents and etcd. Everything it starts and every
directory it makes is removed when it ends, also on Ctrl-C. Progress goes to
stderr; reports to stdout. See docs/benchmarks.md.`,
		Example: `  flotilla bench --agents 100 --units 3000
  flotilla bench --agents 100 --units 3000 --registry both --json
  flotilla bench --agents 100 --units 20000 --latency 25ms --state-pollers 4`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch registry {
			case "grpc", "etcd":
				cfg.Registries = []string{registry}
			case "both":
				cfg.Registries = []string{"grpc", "etcd"}
			default:
				return fmt.Errorf("--registry %q: want grpc, etcd or both", registry)
			}
			cfg.Out, cfg.Progress = cmd.OutOrStdout(), cmd.ErrOrStderr()
			ctx, cancel := signalContext()
			defer cancel()
			return bench.Run(ctx, cfg)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&cfg.Agents, "agents", 100, "simulated agents (machines), 1 to 10000")
	fs.IntVar(&cfg.Units, "units", 3000, "units to start, 1 to 1000000")
	fs.StringVar(&registry, "registry", "grpc", "coordination mode: grpc, etcd, or both (grpc then etcd, with their ratio)")
	fs.IntVar(&cfg.Engines, "engines", 1, "engine daemons, 1 or 3 (one leads)")
	fs.DurationVar(&cfg.Latency, "latency", 0, "one-way delay added between daemons and etcd and between agents and the leader (25ms: a 50ms round trip)")
	fs.IntVar(&cfg.StatePollers, "state-pollers", 0, "clients polling the full cluster state (/v1/state) during and after the run")
	fs.BoolVar(&cfg.StateConditional, "state-conditional", false, "state pollers send If-None-Match with the last ETag (304 when nothing changed), as well-behaved pollers do")
	fs.BoolVar(&cfg.TLS, "tls", false, "run the cluster with mutual TLS on every connection (a CA and certificates made for the run)")
	fs.BoolVar(&cfg.JSON, "json", false, "print each run's report as one JSON object per line")
	fs.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "how long a run waits for every unit to become active")
	fs.IntVar(&cfg.AgentsPerProcess, "agents-per-process", 500, "most simulated agents in one helper process")
	fs.DurationVar(&cfg.SimStartDelay, "sim-start-delay", 0, "how long a simulated unit takes to start")
	fs.DurationVar(&cfg.AgentTTL, "agent-ttl", 20*time.Second, "agent TTL of the engines and agents")
	return cmd
}
