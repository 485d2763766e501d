package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/limits"
	"github.com/flotilla/flotilla/internal/machine"
	"github.com/flotilla/flotilla/internal/unit"
)

// Config configures `flotilla bench`. Zero fields take the defaults named.
type Config struct {
	// Binary is the flotilla binary the daemons and agents run (default:
	// this process's executable).
	Binary string
	// Agents is the number of simulated agents (machines), 1 to MaxAgents.
	Agents int
	// Units is the number of units started, 1 to MaxUnits.
	Units int
	// Registries are the modes to run, in order: "grpc" and/or "etcd"
	// (default grpc alone).
	Registries []string
	// Engines is the number of engine daemons, 1 or 3 (default 1).
	Engines int
	// Latency is the one-way delay added to every connection between the
	// daemons (engines and agents) and etcd, and between the agents and the
	// leader; 0 (default) runs on bare loopback, at most MaxLatency.
	Latency time.Duration
	// StatePollers is the number of clients fetching StatePath during and
	// after the run (0 to MaxStatePollers; default 0).
	StatePollers int
	// StateConditional makes the pollers send If-None-Match with the last
	// ETag, as a well-behaved poller (and the dashboard) does; by default
	// they fetch the whole state every time, the worst case.
	StateConditional bool
	// StatePath is what the pollers fetch (default StatePath).
	StatePath string
	// StateAfter is how long the pollers go on once every unit is active
	// (default 3s).
	StateAfter time.Duration
	// Timeout bounds the wait for every unit to become active, per run
	// (default 10m).
	Timeout time.Duration
	// AgentsPerProcess is the most agents one helper process runs, at most
	// MaxAgentsPerProcess (default: chosen for the host, agentsPerProcess).
	AgentsPerProcess int
	// agentsPerProcessFlag is AgentsPerProcess as given, before
	// chooseShape chose one for the run's size (--scaling runs several
	// sizes).
	agentsPerProcessFlag int
	// AgentGOMAXPROCS is the GOMAXPROCS of each helper process of agents,
	// 1 to the host's CPUs (default: chosen for the host, agentGOMAXPROCS).
	AgentGOMAXPROCS int
	// agentGOMAXPROCSFlag is AgentGOMAXPROCS as given.
	agentGOMAXPROCSFlag int
	// Scaling runs the sizes of Config.ScalingUnits (by default the
	// package's ScalingUnits), each on a fresh cluster of scalingAgents
	// agents (Agents and Units are theirs), and prints, after their reports, each one's rate as a
	// share of the first: how far the cost of a unit stays flat as the
	// cluster grows.
	Scaling bool
	// ScalingUnits are the sizes --scaling runs (default ScalingUnits).
	ScalingUnits []int
	// SimStartDelay is how long a simulated unit takes to start (default 0).
	SimStartDelay time.Duration
	// AgentTTL is the engines' and agents' agent TTL (default 20s).
	AgentTTL time.Duration
	// TLS runs the cluster with mutual TLS on every connection: a CA and
	// certificates made for the run (as `flotilla tls` makes them) for
	// etcd, the engines, every agent and the bench's own requests; the
	// engines run with --acl, and the bench's requests carry the admin
	// token it bootstraps.
	TLS bool
	// ProfileDir, if set, keeps CPU and heap profiles of each engine over
	// the measured window (the start request until every unit is active):
	// DIR/<registry>-<engine>-cpu.pprof and -heap.pprof.
	ProfileDir string
	// EngineEnv are environment variables (KEY=VALUE) given to the engine
	// daemons alone: GOGC=50 or GOMEMLIMIT=1300MiB measure what the
	// collector's settings trade between the engine's memory and its CPU,
	// while the simulated agents and etcd keep theirs.
	EngineEnv []string
	// DistinctFiles starts N units with a file each (differing by their
	// description), sent in batches of up to limits.BatchUnits, as the
	// bench did before ranges; by default it submits one template and
	// starts N of its instances in one request (bench@{1..N}.service).
	DistinctFiles bool
	// Stop, once every unit is active, stops them all in one request per
	// start batch (desired state loaded) and measures the request and the
	// time until the leader counts none active (Report.Stop).
	Stop bool
	// Failover, once every unit is active, kills the leading engine and
	// measures the new leader's way back to the whole cluster
	// (Report.Failover). It needs Engines 3.
	Failover bool
	// JSON prints each run's report as one JSON object on one line.
	JSON bool
	// Out receives the reports (default os.Stdout); Progress the progress
	// (default os.Stderr).
	Out, Progress io.Writer
}

// Limits of Config.
const (
	MaxAgents       = 10_000
	MaxUnits        = 1_000_000
	MaxStatePollers = 64
	MaxLatency      = 10 * time.Second
)

// engineElectionTTL is the engines' election TTL (the daemon's default,
// engine.DefaultElectionTTL).
const engineElectionTTL = 4 * time.Second

// ErrNotAllActive is returned by Run, after every report is printed, when
// some run did not see every unit active: the timeout passed, or the start
// request failed.
var ErrNotAllActive = errors.New("bench: not every unit became active (see the report)")

func (c *Config) validate() error {
	if c.Agents < 1 || c.Agents > MaxAgents {
		return fmt.Errorf("--agents %d: want 1 to %d", c.Agents, MaxAgents)
	}
	if c.Units < 1 || c.Units > MaxUnits {
		return fmt.Errorf("--units %d: want 1 to %d", c.Units, MaxUnits)
	}
	if len(c.Registries) == 0 {
		c.Registries = []string{"grpc"}
	}
	for _, r := range c.Registries {
		switch r {
		case "grpc", "etcd":
		default:
			return fmt.Errorf("--registry %q: want grpc, etcd or both", r)
		}
	}
	if c.Engines == 0 {
		c.Engines = 1
	}
	if c.Engines != 1 && c.Engines != 3 {
		return fmt.Errorf("--engines %d: want 1 or 3", c.Engines)
	}
	if c.Failover && c.Engines != 3 {
		return fmt.Errorf("--failover kills the leading engine: it needs --engines 3, not %d", c.Engines)
	}
	if c.Latency < 0 || c.Latency > MaxLatency {
		return fmt.Errorf("--latency %v: want 0 to %v (one way)", c.Latency, MaxLatency)
	}
	if c.StatePollers < 0 || c.StatePollers > MaxStatePollers {
		return fmt.Errorf("--state-pollers %d: want 0 to %d", c.StatePollers, MaxStatePollers)
	}
	if c.StatePath == "" {
		c.StatePath = StatePath
	}
	if c.StateAfter == 0 {
		c.StateAfter = 3 * time.Second
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Minute
	}
	if c.Timeout < 0 {
		return fmt.Errorf("--timeout %v: want a positive duration", c.Timeout)
	}
	c.agentsPerProcessFlag, c.agentGOMAXPROCSFlag = c.AgentsPerProcess, c.AgentGOMAXPROCS
	if err := c.chooseShape(); err != nil {
		return err
	}
	if c.SimStartDelay < 0 {
		return fmt.Errorf("--sim-start-delay %v: want 0 or more", c.SimStartDelay)
	}
	if c.AgentTTL == 0 {
		c.AgentTTL = machine.DefaultTTL
	}
	if c.AgentTTL <= 2*engineElectionTTL {
		return fmt.Errorf("--agent-ttl %v: want more than %v, twice the engines' election TTL", c.AgentTTL, 2*engineElectionTTL)
	}
	for _, kv := range c.EngineEnv {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.ContainsAny(k, " \t") {
			return fmt.Errorf("--engine-env %q: want KEY=VALUE", kv)
		}
	}
	if c.ProfileDir != "" {
		dir, err := filepath.Abs(c.ProfileDir)
		if err != nil {
			return fmt.Errorf("--profile %q: %w", c.ProfileDir, err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("--profile: %w", err)
		}
		c.ProfileDir = dir
	}
	if c.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find the flotilla binary to run daemons with: %w", err)
		}
		c.Binary = exe
	}
	if c.Out == nil {
		c.Out = os.Stdout
	}
	if c.Progress == nil {
		c.Progress = os.Stderr
	}
	return nil
}

// Run runs the benchmark once per registry mode, each on a cluster of its
// own, and prints each report as its run ends. Every process and
// directory a run made is removed when it ends, also when ctx is
// cancelled (Ctrl-C). It returns ErrNotAllActive when a run timed out.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Scaling {
		for _, u := range cfg.ScalingUnits {
			if u < 1 || u > MaxUnits {
				return fmt.Errorf("--scaling-units: %d units: want 1 to %d", u, MaxUnits)
			}
		}
		cfg.Units = cfg.scalingUnits()[0]
		cfg.Agents = scalingAgents(cfg.Units)
	} else if len(cfg.ScalingUnits) > 0 {
		return errors.New("--scaling-units: the sizes of --scaling; add --scaling")
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	if cfg.Scaling {
		return runScaling(ctx, cfg, runSize)
	}
	_, err := runSize(ctx, cfg)
	return err
}

// runSize runs cfg (validated) once per registry mode and returns the
// reports, printed as each run ended.
func runSize(ctx context.Context, cfg Config) ([]*Report, error) {
	raiseFileLimit()
	prog := newProgress(cfg.Progress)
	var (
		grpc     *Report
		timedOut bool
		reports  []*Report
	)
	for _, reg := range cfg.Registries {
		prog.prefix = reg + ": "
		r, err := runOne(ctx, &cfg, reg, prog)
		prog.done()
		if err != nil {
			if ctx.Err() != nil {
				return reports, fmt.Errorf("%s run interrupted; every process and directory it made is removed", reg)
			}
			return reports, fmt.Errorf("%s run: %w", reg, err)
		}
		reports = append(reports, r)
		if reg == "grpc" {
			grpc = r
		} else if grpc != nil {
			r.VsGRPC = compare(r, grpc)
		}
		timedOut = timedOut || !r.AllActive
		if err := printReport(cfg.Out, r, cfg.JSON); err != nil {
			return reports, err
		}
	}
	if timedOut {
		return reports, ErrNotAllActive
	}
	return reports, nil
}

func printReport(w io.Writer, r *Report, asJSON bool) error {
	if asJSON {
		return printJSONLine(w, r)
	}
	r.WriteText(w)
	_, err := fmt.Fprintln(w)
	return err
}

// printJSONLine prints v as one JSON object on a line of its own.
func printJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// runOne starts a cluster, starts the units and measures, then removes
// everything it made.
func runOne(ctx context.Context, cfg *Config, registry string, prog *progress) (*Report, error) {
	dir, err := os.MkdirTemp("", "flotilla-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	c := &cluster{cfg: cfg, registry: registry, dir: dir, prog: prog}
	defer func() {
		prog.phase("stopping the cluster")
		c.close()
	}()
	if err := c.start(ctx); err != nil {
		return nil, err
	}
	prog.done()

	base := c.tls.scheme() + "://" + c.leaderAPI
	api, err := c.client(c.leaderAPI, client.WithTimeout(cfg.Timeout))
	if err != nil {
		return nil, err
	}
	// The units: by default instances of one template, started by one
	// request naming their range; with DistinctFiles, a file each, in
	// batches of up to limits.BatchUnits.
	var batches []apiv1.Batch
	names := make([]string, cfg.Units)
	width := len(fmt.Sprint(cfg.Units))
	if cfg.DistinctFiles {
		for i := range names {
			names[i] = fmt.Sprintf("%s%0*d.service", unitPrefix, width, i+1)
		}
		for i := 0; i < len(names); i += limits.BatchUnits {
			b := apiv1.Batch{}
			for j := i; j < min(i+limits.BatchUnits, len(names)); j++ {
				b.Units = append(b.Units, apiv1.UnitChange{Name: names[j], DesiredState: "launched",
					File: fmt.Sprintf("[Unit]\nDescription=flotilla bench unit %d\n\n[Service]\nExecStart=/bin/sleep infinity\n", j+1)})
			}
			batches = append(batches, b)
		}
	} else {
		tmpl, r, _, err := unit.ParseRange(fmt.Sprintf("%s@{%0*d..%d}.service", benchTemplate, width, 1, cfg.Units))
		if err != nil {
			return nil, err
		}
		for i := range names {
			names[i] = unit.RangeName(tmpl, r, i)
		}
		if _, err := api.Batch(ctx, apiv1.Batch{Units: []apiv1.UnitChange{{Name: tmpl,
			File: "[Unit]\nDescription=flotilla bench unit\n\n[Service]\nExecStart=/bin/sleep infinity\n"}}}); err != nil {
			return nil, fmt.Errorf("submit the template %s: %w", tmpl, err)
		}
		batches = []apiv1.Batch{{Units: []apiv1.UnitChange{{Name: fmt.Sprintf("%s@%s.service", benchTemplate, r), DesiredState: "launched"}}}}
	}
	hc := c.tls.httpClient(30 * time.Second)
	etcdURL := c.tls.scheme() + "://" + c.etcdAddr
	etcdBefore, err := scrapeEtcd(ctx, hc, etcdURL)
	if err != nil {
		return nil, err
	}
	statsBefore, err := c.stats()
	if err != nil {
		return nil, err
	}
	termsBefore, err := scrapeCounter(ctx, hc, base, leaderChangesMetric, "")
	if err != nil {
		return nil, err
	}
	var pollers *statePollers
	if cfg.StatePollers > 0 {
		pollers = startStatePollers(ctx, cfg.StatePollers, base+cfg.StatePath, cfg.StateConditional, c.tls)
		defer pollers.stop() // on an early return; stopping twice is harmless
	}

	c.profileStart()
	if cfg.DistinctFiles {
		prog.phase("starting %s units (batch requests of up to %s units to the leader's API)", thousands(int64(cfg.Units)), thousands(limits.BatchUnits))
	} else {
		prog.phase("starting %s units (one request: %s)", thousands(int64(cfg.Units)), batches[0].Units[0].Name)
	}
	t0 := time.Now()
	var startErr error
	for _, b := range batches {
		if _, startErr = api.Batch(ctx, b); startErr != nil {
			break
		}
	}
	submitted := time.Since(t0)
	var observed map[string]time.Time
	if startErr != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// The API refused the units (or failed to write them all): none
		// is the leader's to start. The run ends here, reporting why.
		startErr = fmt.Errorf("start request: %w", startErr)
		prog.phase("the start request failed after %.3f s: %v", submitted.Seconds(), startErr)
	} else {
		prog.phase("the start request was answered in %.3f s", submitted.Seconds())
		if observed, err = waitActive(ctx, c, base, t0, names, prog); err != nil {
			return nil, err
		}
	}
	waited := time.Since(t0)
	if err := c.profileStop(ctx); err != nil {
		return nil, err
	}
	if pollers != nil && len(observed) == len(names) {
		pollers.allActive()
	}
	statsAfter, err := c.stats()
	if err != nil {
		return nil, err
	}
	etcdAfter, err := scrapeEtcd(ctx, hc, etcdURL)
	if err != nil {
		return nil, err
	}
	termsAfter, err := scrapeCounter(ctx, hc, base, leaderChangesMetric, "")
	if err != nil {
		return nil, err
	}

	r := &Report{
		Registry: registry, Engines: cfg.Engines, Agents: cfg.Agents, AgentProcesses: len(c.agents),
		AgentsPerProcess: cfg.AgentsPerProcess, AgentGOMAXPROCS: cfg.AgentGOMAXPROCS, ShapeChosen: cfg.shapeChosen(),
		Units: cfg.Units, LatencyMS: float64(cfg.Latency.Microseconds()) / 1000, TLS: cfg.TLS, ACL: cfg.TLS, EngineEnv: cfg.EngineEnv,
		SubmitSeconds:    round6(submitted.Seconds()),
		EtcdRequests:     etcdAfter.Sub(etcdBefore),
		EngineCPUSeconds: round3((statsAfter.engineCPU - statsBefore.engineCPU).Seconds()),
		AgentCPUSeconds:  round3((statsAfter.agentCPU - statsBefore.agentCPU).Seconds()),
		EtcdCPUSeconds:   round3((statsAfter.etcdCPU - statsBefore.etcdCPU).Seconds()),
		BenchCPUSeconds:  round3((statsAfter.benchCPU - statsBefore.benchCPU).Seconds()),
		HostCPUs:         runtime.NumCPU(),
		LeaderChanges:    termsAfter[""] - termsBefore[""],
	}
	if r.LeaderChanges > 0 {
		prog.phase("the leader's term changed %d %s during the run: these figures include a new term's load", r.LeaderChanges, plural(int(r.LeaderChanges), "time", "times"))
		for _, p := range c.engines {
			prog.phase("the end of %s's log (warnings and errors):\n%s", p.name, p.tail(40))
		}
	}
	ours := (statsAfter.engineCPU + statsAfter.agentCPU + statsAfter.etcdCPU + statsAfter.benchCPU) -
		(statsBefore.engineCPU + statsBefore.agentCPU + statsBefore.etcdCPU + statsBefore.benchCPU)
	r.OtherCPUSeconds = round3(max(statsAfter.hostBusy-statsBefore.hostBusy-ours, 0).Seconds())
	lat := make([]time.Duration, 0, len(observed))
	for _, at := range observed {
		lat = append(lat, at.Sub(t0))
	}
	r.setLatencies(lat, waited)
	if startErr != nil {
		r.Error = startErr.Error()
	}

	if pollers != nil {
		prog.phase("polling %s for %v more", cfg.StatePath, cfg.StateAfter)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(cfg.StateAfter):
		}
		r.State = pollers.stop()
	}
	end, err := c.stats()
	if err != nil {
		return nil, err
	}
	r.EnginePeakRSSBytes, r.AgentPeakRSSBytes, r.EtcdPeakRSSBytes = end.enginePeak, end.agentPeak, end.etcdPeak
	if cfg.Failover && r.AllActive {
		if r.Failover, err = measureFailover(ctx, c, prog); err != nil {
			return nil, err
		}
		base = c.tls.scheme() + "://" + c.leaderAPI
		if api, err = c.client(c.leaderAPI, client.WithTimeout(cfg.Timeout)); err != nil {
			return nil, err
		}
	}
	if cfg.Stop && r.AllActive {
		if r.Stop, err = measureStop(ctx, c, api, base, batches, prog); err != nil {
			return nil, err
		}
	}
	// The database is measured last: defragmenting blocks etcd, for
	// seconds at a million units, and a leader whose lease renewals it
	// held up lost its lease just before --failover killed it (the
	// engine killed was then no longer the leader).
	if r.AllActive {
		prog.phase("compacting and defragmenting etcd to measure its database")
		if r.EtcdDBBytes, err = c.etcdDBSize(ctx); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// unitState is the part of /v1/unit-states the bench reads.
type unitState struct {
	Name       string `json:"name"`
	Active     string `json:"active"`
	ObservedAt string `json:"observedAt"`
}

// unitPrefix starts the name of every unit the bench starts with
// DistinctFiles; benchTemplate is the prefix of the template otherwise
// (bench@.service).
const (
	unitPrefix    = "bench-"
	benchTemplate = "bench"
)

// waitActive waits until the leader has seen every unit of batch active,
// or cfg.Timeout has passed since t0, and returns when the leader saw each
// unit that became active (from /v1/unit-states' observedAt, the leader's
// own clock, so the figures do not depend on when the bench looks).
//
// While waiting it reads the leader's count of units become active where
// it placed them (its /metrics, scrapeActivated), or, when that count is
// not to be had or stalls, counts active units in its published state
// (/v1/state?state=active&limit=1: a count, not the list, but of a state
// the poll may have the leader build again); /v1/unit-states, a list built
// for each request, is read once the count says every unit is active. The
// pause between polls grows with the time a poll takes (8×), keeping the
// bench's load on the engine small.
func waitActive(ctx context.Context, c *cluster, base string, t0 time.Time, names []string, prog *progress) (map[string]time.Time, error) {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	hc := c.tls.httpClient(2 * time.Minute)
	deadline := t0.Add(c.cfg.Timeout)
	countURL := base + "/v1/state?" + url.Values{"unit": {unitPrefix + "*"}, "state": {"active"}, "limit": {"1"}}.Encode()
	if !c.cfg.DistinctFiles {
		countURL = base + "/v1/state?" + url.Values{"unit": {benchTemplate + "@*"}, "state": {"active"}, "limit": {"1"}}.Encode()
	}
	var (
		observed map[string]time.Time
		lastErr  error
		// activated is the leader's count of units become active where
		// it placed them (scrapeActivated), while it is trusted: a poll
		// uses it when it grew since the last, and counts the state's
		// active units otherwise (a count that stalls, or a new leader's,
		// which did not place the units). Counting the state had the
		// leader build it again for each poll: at a million units, a
		// tenth of its CPU in the run went to the bench's polls.
		activated      int64 = -1
		trustActivated       = true
	)
	for {
		start := time.Now()
		var (
			n       int
			err     error
			counted bool // n is the leader's count of activations
		)
		if trustActivated {
			if a, aerr := scrapeActivated(ctx, hc, base); aerr == nil && a > activated {
				activated, n, counted = a, int(a), true
			}
		}
		if !counted {
			n, err = countActive(ctx, hc, countURL)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			lastErr = err
		}
		timedOut := time.Now().After(deadline)
		if err != nil || n >= len(want) || timedOut {
			// Without the count, or once it says done: read every state.
			observed, err = activeSince(ctx, hc, base, c.agentNames(), want)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				lastErr = err
			}
			if counted && err == nil && len(observed) < len(want) {
				// Activations counted twice (a unit that failed and came
				// back): the state is counted from now on.
				trustActivated = false
			}
			n = len(observed)
		}
		took := time.Since(start)
		prog.status("%s/%s units active (%.1f%%) after %.1f s", thousands(int64(n)), thousands(int64(len(want))),
			float64(n)*100/float64(len(want)), time.Since(t0).Seconds())
		if len(observed) == len(want) {
			return observed, nil
		}
		if err := c.failed(); err != nil {
			return nil, err
		}
		if timedOut {
			prog.phase("gave up after %v: %d of %d units active (last poll error: %v)", c.cfg.Timeout, len(observed), len(want), lastErr)
			for _, p := range c.engines {
				prog.phase("the end of %s's log (warnings and errors):\n%s", p.name, p.tail(40))
			}
			return observed, nil
		}
		// A count of the state's active units is a filtered read of a
		// state the read may have had rebuilt. A microsecond a unit
		// between polls (a second at a million) keeps them out of the
		// leader's way; the figures come from the leader's own times, not
		// from the polls.
		pause := min(max(8*took, 50*time.Millisecond, time.Duration(len(want))*time.Microsecond), 5*time.Second)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pause):
		}
	}
}

// countActive returns how many units the state at url counts (its total).
func countActive(ctx context.Context, hc *http.Client, url string) (int, error) {
	var st struct {
		Total *int `json:"total"`
	}
	if err := getJSON(ctx, hc, url, &st); err != nil {
		return 0, err
	}
	if st.Total == nil {
		return 0, fmt.Errorf("GET %s: the answer has no total", url)
	}
	return *st.Total, nil
}

// activeSince returns when the leader saw each unit of want active, for
// those that are. It reads /v1/unit-states a machine at a time
// (?machine=), four at once, so that no answer is large: one answer for a
// million units would make the leader hold hundreds of MB at once, and
// count in its peak memory.
func activeSince(ctx context.Context, hc *http.Client, base string, machines []string, want map[string]bool) (map[string]time.Time, error) {
	type answer struct {
		states []unitState
		err    error
	}
	next := make(chan string)
	answers := make(chan answer)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range next {
				var l struct {
					States []unitState `json:"states"`
				}
				err := getJSON(ctx, hc, base+"/v1/unit-states?"+url.Values{"machine": {m}}.Encode(), &l)
				answers <- answer{l.States, err}
			}
		}()
	}
	go func() {
		defer close(next)
		for _, m := range machines {
			select {
			case next <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() { wg.Wait(); close(answers) }()
	observed := make(map[string]time.Time, len(want))
	var firstErr error
	for a := range answers {
		if a.err != nil {
			firstErr = cmp.Or(firstErr, a.err)
			continue
		}
		for _, s := range a.states {
			if s.Active != "active" || !want[s.Name] {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, s.ObservedAt)
			if err != nil {
				firstErr = cmp.Or(firstErr, fmt.Errorf("/v1/unit-states: unit %s: observedAt %q: %w", s.Name, s.ObservedAt, err))
				continue
			}
			observed[s.Name] = at
		}
	}
	if firstErr != nil {
		return nil, firstErr
	}
	return observed, nil
}

func getJSON(ctx context.Context, hc *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: decode: %w", url, err)
	}
	return nil
}
