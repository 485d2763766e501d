package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/flotilla/flotilla/internal/bench"
	"github.com/flotilla/flotilla/internal/machine"
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
agents in helper processes), submits one template and starts N of its instances
through the API in one request (bench@{1..N}.service), and
reports how long each unit took until the leader saw it active (a histogram and
percentiles), units per second, etcd requests by kind, and the CPU time and peak
memory of the engine, the agents and etcd. Everything it starts and every
directory it makes is removed when it ends, also on Ctrl-C. Progress goes to
stderr; reports to stdout. See docs/benchmarks.md.`,
		Example: `  flotilla bench --agents 100 --units 3000
  flotilla bench --agents 100 --units 3000 --registry both --json
  flotilla bench --agents 100 --units 20000 --latency 25ms --state-pollers 4
  flotilla bench --scaling
  flotilla bench --scaling-units 2000,10000,40000`,
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
			cfg.Scaling = cfg.Scaling || cmd.Flags().Changed("scaling-units")
			if cfg.Scaling {
				for _, f := range []string{"agents", "units"} {
					if cmd.Flags().Changed(f) {
						return fmt.Errorf("--scaling runs its own sizes (--scaling-units, each on an agent per %d units); drop --%s", bench.UnitsPerAgent, f)
					}
				}
			}
			cfg.Out, cfg.Progress = cmd.OutOrStdout(), cmd.ErrOrStderr()
			ctx, cancel := signalContext()
			defer cancel()
			return bench.Run(ctx, cfg)
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&cfg.Scaling, "scaling", false, "run 20,000, 100,000, 400,000 and 1,000,000 units, each on a fresh cluster with an agent per 100 units (200 to 10,000; sizes up to 100,000 three times, their median rate counting), then print each rate as a share of the first (the linearity figure)")
	fs.IntSliceVar(&cfg.ScalingUnits, "scaling-units", nil, "the sizes --scaling runs, in units, comma-separated (implies --scaling; default 20000,100000,400000,1000000)")
	fs.IntVar(&cfg.Agents, "agents", 100, "simulated agents (machines), 1 to 10000")
	fs.IntVar(&cfg.Units, "units", 3000, "units to start, 1 to 1000000")
	fs.StringVar(&registry, "registry", "grpc", "coordination mode: grpc, etcd, or both (grpc then etcd, with their ratio)")
	fs.IntVar(&cfg.Engines, "engines", 1, "engine daemons, 1 or 3 (one leads)")
	fs.DurationVar(&cfg.Latency, "latency", 0, "one-way delay added between daemons and etcd and between agents and the leader (25ms: a 50ms round trip)")
	fs.IntVar(&cfg.StatePollers, "state-pollers", 0, "clients polling the full cluster state (/v1/state) during and after the run")
	fs.StringVar(&cfg.StatePath, "state-path", bench.StatePath, "what the state pollers fetch: /v1/state?limit=1000 measures a page of 1,000 units")
	fs.BoolVar(&cfg.StateConditional, "state-conditional", false, "state pollers send If-None-Match with the last ETag (304 when nothing changed), as well-behaved pollers do")
	fs.BoolVar(&cfg.TLS, "tls", false, "run the cluster with mutual TLS on every connection (a CA and certificates made for the run) and API tokens (--acl; the bench bootstraps one)")
	fs.StringVar(&cfg.ProfileDir, "profile", "", "keep CPU and heap profiles of each engine and agents' process over the measured window in this directory (<registry>-<engine>-cpu.pprof, -heap.pprof, -goroutine.pprof, and -memory.txt, the runtime's memory classes and how long goroutines waited for a CPU; read them with go tool pprof), with --failover of the surviving engines and the agents from the kill until the cluster is whole (<registry>-failover-<process>-...), and with --stop of every process from the stop request until none is active (<registry>-stop-<process>-...)")
	fs.StringArrayVar(&cfg.EngineEnv, "engine-env", nil, "an environment variable KEY=VALUE for the engine daemons alone, e.g. GOMEMLIMIT=1300MiB or GOGC=50 (repeat for several): the collector's trade between the engine's memory and CPU")
	fs.BoolVar(&cfg.DistinctFiles, "distinct-files", false, "start N units with a file each, in batches of 100,000, instead of N instances of one template in one request (bench@{1..N}.service)")
	fs.BoolVar(&cfg.Stop, "stop", false, "once every unit is active, stop them all with one request (desired state loaded, as flotilla stop with the range) and measure it and the time until none is active")
	fs.BoolVar(&cfg.Failover, "failover", false, "once every unit is active, kill the leading engine (needs --engines 3) and measure until another leads, every agent is back and every unit is active in its state; units started meanwhile are counted in the agents' processes")
	fs.BoolVar(&cfg.JSON, "json", false, "print each run's report as one JSON object per line")
	fs.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "how long a run waits for every unit to become active")
	fs.IntVar(&cfg.AgentsPerProcess, "agents-per-process", 0, "most simulated agents in one helper process (default: chosen for the host: a process per 500 agents, no more processes than CPUs, at most 5,000 agents each)")
	fs.IntVar(&cfg.AgentGOMAXPROCS, "agent-gomaxprocs", 0, "GOMAXPROCS of each helper process of agents, 1 to the host's CPUs (default: chosen for the host)")
	fs.DurationVar(&cfg.SimStartDelay, "sim-start-delay", 0, "how long a simulated unit takes to start")
	fs.DurationVar(&cfg.AgentTTL, "agent-ttl", machine.DefaultTTL, "agent TTL of the engines and agents")
	cmd.AddCommand(benchDriverCommand())
	return cmd
}

func benchDriverCommand() *cobra.Command {
	var (
		cfg      bench.DriverConfig
		unitFile string
	)
	cmd := &cobra.Command{
		Use:   "driver --driver NAME --units N",
		Short: "Measure how fast one real daemon starts, then stops, N units with a driver",
		Long: `Starts one daemon on this host (embedded etcd, engine and agent in one process,
as flotilla dev) with --driver NAME, in a temporary directory; starts N units
through its API (desired state launched, in batch requests) and measures the
time until the daemon saw every unit active; then stops them all (desired
state loaded) and measures the time until it saw every unit inactive (or
failed), both by the units' observedAt. It reports both, with the CPU time
the daemon and the supervisor it started spent on each. The units run /bin/sleep infinity
unless --unit-file gives another unit (a container for a container driver).

--check tcp|http|exec gives every unit an [X-Check] run every --check-interval
(TCP= to a listener of the bench's, HTTP= GET of it, or Exec=/bin/true), and --hold D
measures, once every unit is active and an interval has passed, the CPU the
daemon, the supervisor (which runs the exec driver's checks), their probe
processes and the listener spend over D,
as a share of one core.

--baseline exec also times a plain loop starting and then stopping N
/bin/sleep infinity processes from the bench itself; --baseline command times
--baseline-start and then --baseline-stop run once per unit, one after
another, with {} replaced by the unit's name (a plain systemd-run or docker
run loop). Everything the run made is removed when it ends, also on Ctrl-C.
See docs/benchmarks.md.`,
		Example: `  flotilla bench driver --driver exec --units 1000 --baseline exec
  flotilla bench driver --driver exec --units 1000 --check tcp --hold 60s
  flotilla bench driver --driver systemd --units 1000 --baseline command \
    --baseline-start 'systemd-run --unit {} /bin/sleep infinity' --baseline-stop 'systemctl stop {}'
  flotilla bench driver --driver docker --units 1000 --unit-file sleeper.service --baseline command \
    --baseline-start 'docker run -d --name {} sleeper' --baseline-stop 'docker rm -f {}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if unitFile != "" {
				b, err := os.ReadFile(unitFile)
				if err != nil {
					return fmt.Errorf("--unit-file: %w", err)
				}
				cfg.UnitFile = string(b)
			}
			cfg.Out, cfg.Progress = cmd.OutOrStdout(), cmd.ErrOrStderr()
			ctx, cancel := signalContext()
			defer cancel()
			return bench.RunDriver(ctx, cfg)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&cfg.Driver, "driver", "exec", "the daemon's --driver")
	fs.IntVar(&cfg.Units, "units", 1000, "units to start then stop, 1 to 100000")
	fs.StringVar(&unitFile, "unit-file", "", "unit file every unit runs (default: a service running /bin/sleep infinity)")
	fs.StringVar(&cfg.Baseline, "baseline", "", "also time a plain loop: exec (processes started by the bench) or command (--baseline-start/--baseline-stop)")
	fs.StringVar(&cfg.BaselineStart, "baseline-start", "", "command starting one unit in the plain loop; {} is the unit's name")
	fs.StringVar(&cfg.BaselineStop, "baseline-stop", "", "command stopping one unit in the plain loop; {} is the unit's name")
	fs.DurationVar(&cfg.Timeout, "timeout", 5*time.Minute, "how long each of the start and the stop may take")
	fs.StringVar(&cfg.Check, "check", "", "give every unit an [X-Check]: tcp (TCP= to a listener of the bench's), http (HTTP= GET of it, answering 200) or exec (Exec=/bin/true)")
	fs.DurationVar(&cfg.CheckInterval, "check-interval", 5*time.Second, "the checks' Interval=")
	fs.DurationVar(&cfg.Hold, "hold", 0, "once every unit is active, measure the CPU the checks cost for this long")
	fs.StringVar(&cfg.ProfileDir, "profile-dir", "", "with --hold: keep the daemon's CPU and heap profiles of the hold in this directory")
	fs.BoolVar(&cfg.JSON, "json", false, "print the report as one JSON object")
	return cmd
}
