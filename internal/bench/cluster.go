package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/freeport"
	"github.com/flotilla/flotilla/internal/profiling"
)

// cluster is the cluster of one run: an etcd process, engine processes,
// agent processes and, with added latency, the proxies in front of etcd
// and of each engine's gRPC server.
type cluster struct {
	cfg      *Config
	registry string
	dir      string
	prog     *progress

	etcd    *process
	engines []*process
	agents  []*process
	proxies []*Proxy

	tls       *runTLS  // nil without --tls
	etcdAddr  string   // etcd's client address (direct, for its metrics)
	engineAPI []string // each engine's API address
	leaderAPI string   // the leader's API address
}

// processes returns every child process.
func (c *cluster) processes() []*process {
	var ps []*process
	if c.etcd != nil {
		ps = append(ps, c.etcd)
	}
	ps = append(ps, c.engines...)
	return append(ps, c.agents...)
}

// failed returns an error if any child process has ended.
func (c *cluster) failed() error {
	for _, p := range c.processes() {
		if err := p.exited(); err != nil {
			return err
		}
	}
	return nil
}

// close stops the agents, then the engines, then etcd (each in parallel
// within its role, each given a grace period before it is killed), then
// the proxies.
func (c *cluster) close() {
	stopAll := func(ps []*process, grace time.Duration) {
		var wg sync.WaitGroup
		for _, p := range ps {
			wg.Add(1)
			go func() { defer wg.Done(); p.stop(grace) }()
		}
		wg.Wait()
	}
	stopAll(c.agents, 15*time.Second)
	stopAll(c.engines, 15*time.Second)
	if c.etcd != nil {
		stopAll([]*process{c.etcd}, 15*time.Second)
	}
	for _, p := range c.proxies {
		p.Close()
	}
}

// proxy returns the address to reach target at: target itself, or a new
// latency proxy in front of it.
func (c *cluster) proxy(target string) (string, error) {
	if c.cfg.Latency == 0 {
		return target, nil
	}
	p, err := NewProxy(target, c.cfg.Latency)
	if err != nil {
		return "", err
	}
	c.proxies = append(c.proxies, p)
	return p.Addr(), nil
}

// start starts the cluster and waits until it is ready: a leader elected
// and every agent connected. On error the caller still closes c.
func (c *cluster) start(ctx context.Context) error {
	cfg := c.cfg
	addrs, err := freeport.Addrs(3 + 2*cfg.Engines)
	if err != nil {
		return err
	}
	c.etcdAddr = addrs[0]
	per := cfg.AgentsPerProcess
	nproc := (cfg.Agents + per - 1) / per
	width := len(strconv.Itoa(cfg.Agents))
	agentName := func(i int) string { return (&AgentsConfig{Prefix: "sim-", Width: width}).AgentName(i) }
	if cfg.TLS {
		c.prog.phase("making a CA and %d certificates", cfg.Agents+cfg.Engines+2)
		machines := []string{"etcd"}
		for i := range cfg.Engines {
			machines = append(machines, fmt.Sprintf("engine%d", i+1))
		}
		for i := 1; i <= cfg.Agents; i++ {
			machines = append(machines, agentName(i))
		}
		if c.tls, err = makeTLS(filepath.Join(c.dir, "tls"), machines); err != nil {
			return err
		}
	}
	c.prog.phase("starting etcd")
	c.etcd, err = startProcess("etcd", cfg.Binary, append([]string{"daemon", "--name", "etcd",
		"--etcd-embed", "--no-engine", "--no-agent", "--log-level", "error",
		"--etcd-client-addr", addrs[0], "--etcd-peer-addr", addrs[1], "--api-addr", addrs[2],
		"--data-dir", filepath.Join(c.dir, "etcd")}, c.tls.daemonFlags("etcd")...), filepath.Join(c.dir, "etcd.log"))
	if err != nil {
		return err
	}
	hc := c.tls.httpClient(5 * time.Second)
	if err := c.waitFor(ctx, 60*time.Second, "etcd to serve", func() error {
		return getOK(ctx, hc, c.tls.scheme()+"://"+c.etcdAddr+"/health")
	}); err != nil {
		return err
	}
	etcdVia, err := c.proxy(c.etcdAddr)
	if err != nil {
		return err
	}
	endpoints := c.tls.scheme() + "://" + etcdVia

	c.prog.phase("starting %d %s (%s registry)", cfg.Engines, plural(cfg.Engines, "engine", "engines"), c.registry)
	for i := range cfg.Engines {
		api, grpcAddr := addrs[3+2*i], addrs[4+2*i]
		advertised, err := c.proxy(grpcAddr)
		if err != nil {
			return err
		}
		name := fmt.Sprintf("engine%d", i+1)
		var profile []string
		if cfg.ProfileDir != "" {
			profile = []string{"--profile-dir", c.profileDir(name)}
		}
		p, err := startProcess(name, cfg.Binary, append(append([]string{"daemon", "--name", name,
			"--no-agent", "--registry", c.registry, "--log-level", "warn",
			"--etcd-endpoints", endpoints, "--api-addr", api,
			"--grpc-addr", grpcAddr, "--grpc-advertise-addr", advertised,
			"--agent-ttl", cfg.AgentTTL.String(),
			"--data-dir", filepath.Join(c.dir, name)}, profile...), c.tls.engineFlags(name)...), filepath.Join(c.dir, name+".log"), cfg.EngineEnv...)
		if err != nil {
			return err
		}
		c.engines = append(c.engines, p)
		c.engineAPI = append(c.engineAPI, api)
	}
	if c.tls != nil {
		// The engines run with --acl: the bench's requests carry the
		// admin token it bootstraps, as an operator's would.
		if err := c.waitFor(ctx, 60*time.Second, "the ACL bootstrap", func() error {
			cl, err := c.client(c.engineAPI[0], client.WithTimeout(5*time.Second))
			if err != nil {
				return err
			}
			t, err := cl.ACLBootstrap(ctx)
			if err != nil {
				return err
			}
			c.tls.token = t.Secret
			return nil
		}); err != nil {
			return err
		}
	}
	if err := c.waitFor(ctx, 60*time.Second, "an engine leader", func() error {
		api, err := c.findLeader(ctx)
		c.leaderAPI = api
		return err
	}); err != nil {
		return err
	}

	c.prog.phase("starting %s agents in %s", thousands(int64(cfg.Agents)), cfg.shape(nproc))
	for i := range nproc {
		first := 1 + i*per
		count := min(per, cfg.Agents-i*per)
		name := fmt.Sprintf("agents%d", i+1)
		args := []string{"bench-agents",
			"--count", strconv.Itoa(count), "--first", strconv.Itoa(first), "--width", strconv.Itoa(width),
			"--registry", c.registry, "--etcd-endpoints", endpoints,
			"--sim-start-delay", cfg.SimStartDelay.String(), "--agent-ttl", cfg.AgentTTL.String(),
			"--log-level", "warn"}
		if c.tls != nil {
			args = append(args, "--tls-dir", c.tls.dir)
		}
		if cfg.ProfileDir != "" {
			args = append(args, "--profile-dir", c.profileDir(name))
		}
		args = append(args, "--starts-file", c.startsFile(name))
		p, err := startProcess(name, cfg.Binary, args, filepath.Join(c.dir, name+".log"), "GOMAXPROCS="+strconv.Itoa(cfg.AgentGOMAXPROCS))
		if err != nil {
			return err
		}
		c.agents = append(c.agents, p)
	}
	api, err := c.client(c.leaderAPI)
	if err != nil {
		return err
	}
	return c.waitFor(ctx, 60*time.Second+time.Duration(cfg.Agents)*20*time.Millisecond, "every agent to connect", func() error {
		ms, err := api.Machines(ctx)
		if err != nil {
			return err
		}
		c.prog.status("agents connected: %s/%s", thousands(int64(len(ms.Machines))), thousands(int64(cfg.Agents)))
		if len(ms.Machines) < cfg.Agents {
			return fmt.Errorf("%d of %d agents connected", len(ms.Machines), cfg.Agents)
		}
		return nil
	})
}

// profileDir is where an engine or an agents' process keeps its profiles
// (--profile-dir) in a profiled run.
func (c *cluster) profileDir(engine string) string {
	return filepath.Join(c.dir, "profile-"+engine)
}

// profiled are the processes a profiled run keeps profiles of: the
// engines and the simulated agents' processes.
func (c *cluster) profiled() []*process {
	return append(append([]*process(nil), c.engines...), c.agents...)
}

// profileStart has every engine and agents' process start its CPU profile
// (SIGUSR1, see package profiling); nothing without --profile.
func (c *cluster) profileStart() { c.profileStartOf(c.profiled()) }

// profileStartOf has processes ps start their CPU profiles, their profiles
// of an earlier window removed.
func (c *cluster) profileStartOf(ps []*process) {
	if c.cfg.ProfileDir == "" {
		return
	}
	for _, p := range ps {
		for _, f := range []string{profiling.CPUFile, profiling.HeapFile, profiling.GoroutineFile, profiling.MemoryFile} {
			os.Remove(filepath.Join(c.profileDir(p.name), f))
		}
		p.cmd.Process.Signal(syscall.SIGUSR1)
	}
}

// profileStop has every profiled process stop its CPU profile and write
// its heap profile (SIGUSR2), waits for the files and copies them to
// --profile as <registry>-<process>-cpu.pprof and -heap.pprof (engine1,
// agents1, ...).
func (c *cluster) profileStop(ctx context.Context) error {
	return c.profileStopOf(ctx, c.profiled(), "")
}

// profileStopOf is profileStop for processes ps, whose files are named
// <registry>-<window>-<process>-... when window is not "".
func (c *cluster) profileStopOf(ctx context.Context, ps []*process, window string) error {
	if c.cfg.ProfileDir == "" {
		return nil
	}
	for _, p := range ps {
		p.cmd.Process.Signal(syscall.SIGUSR2)
	}
	prefix := c.registry
	if window != "" {
		prefix += "-" + window
	}
	for _, p := range ps {
		src := c.profileDir(p.name)
		if err := c.waitFor(ctx, 2*time.Minute, p.name+"'s heap profile", func() error {
			_, err := os.Stat(filepath.Join(src, profiling.HeapFile))
			return err
		}); err != nil {
			return err
		}
		for _, f := range []struct{ from, to string }{{profiling.CPUFile, "cpu.pprof"}, {profiling.HeapFile, "heap.pprof"},
			{profiling.GoroutineFile, "goroutine.pprof"}, {profiling.MemoryFile, "memory.txt"}} {
			b, err := os.ReadFile(filepath.Join(src, f.from))
			if err != nil {
				return fmt.Errorf("profile of %s: %w", p.name, err)
			}
			dst := filepath.Join(c.cfg.ProfileDir, fmt.Sprintf("%s-%s-%s", prefix, p.name, f.to))
			if err := os.WriteFile(dst, b, 0o644); err != nil {
				return fmt.Errorf("--profile: %w", err)
			}
		}
	}
	c.prog.phase("profiles written to %s", c.cfg.ProfileDir)
	return nil
}

// etcdDBSize compacts etcd to its current revision, defragments it and
// returns the size of its database.
func (c *cluster) etcdDBSize(ctx context.Context) (int64, error) {
	ep := c.tls.scheme() + "://" + c.etcdAddr
	cfg := clientv3.Config{Endpoints: []string{ep}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()}
	if c.tls != nil {
		cfg.TLS = c.tls.client.Clone()
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return 0, fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	st, err := cli.Status(ctx, ep)
	if err != nil {
		return 0, fmt.Errorf("etcd status: %w", err)
	}
	if _, err := cli.Compact(ctx, st.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		return 0, fmt.Errorf("etcd compact: %w", err)
	}
	if _, err := cli.Defragment(ctx, ep); err != nil {
		return 0, fmt.Errorf("etcd defragment: %w", err)
	}
	if st, err = cli.Status(ctx, ep); err != nil {
		return 0, fmt.Errorf("etcd status: %w", err)
	}
	return st.DbSize, nil
}

// agentNames returns the machine names of the simulated agents.
func (c *cluster) agentNames() []string {
	width := len(strconv.Itoa(c.cfg.Agents))
	names := make([]string, c.cfg.Agents)
	for i := range names {
		names[i] = (&AgentsConfig{Prefix: "sim-", Width: width}).AgentName(i + 1)
	}
	return names
}

// client returns an API client of the daemon at addr.
func (c *cluster) client(addr string, opts ...client.Option) (*client.Client, error) {
	opts = append(opts, client.WithUserAgent("flotilla-bench"))
	if c.tls != nil {
		opts = append(opts, client.WithTLS(c.tls.client))
		if c.tls.token != "" {
			opts = append(opts, client.WithToken(c.tls.token))
		}
	}
	return client.New(c.tls.scheme()+"://"+addr, opts...)
}

// findLeader asks every engine who leads and returns the leader's API address.
func (c *cluster) findLeader(ctx context.Context) (string, error) {
	var errs []error
	for _, a := range c.engineAPI {
		cl, err := c.client(a, client.WithTimeout(5*time.Second))
		if err != nil {
			return "", err
		}
		st, err := cl.Status(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st.IsLeader {
			return a, nil
		}
	}
	if len(errs) > 0 {
		return "", errors.Join(errs...)
	}
	return "", errors.New("no engine leads yet")
}

// waitFor polls cond every 100 ms until it returns nil, and fails when a
// child process ends, ctx is done, or timeout passes.
func (c *cluster) waitFor(ctx context.Context, timeout time.Duration, what string, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if ferr := c.failed(); ferr != nil {
			return ferr
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for %s: not within %v: %w", what, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// clusterStats are the CPU times and peak memory of the run's processes.
type clusterStats struct {
	engineCPU, agentCPU, etcdCPU, benchCPU time.Duration
	hostBusy                               time.Duration // every process of the host
	enginePeak, agentPeak, etcdPeak        int64
}

// stats reads the CPU time and peak memory of every process of the run,
// and the host's busy time.
func (c *cluster) stats() (clusterStats, error) {
	var s clusterStats
	for _, p := range c.engines {
		if p.killed {
			continue // its CPU and memory until it was killed are lost
		}
		ps, err := readProcStats(p.pid())
		if err != nil {
			return s, fmt.Errorf("%s: %w", p.name, err)
		}
		s.engineCPU += ps.CPU
		s.enginePeak = max(s.enginePeak, ps.PeakRSS)
	}
	for _, p := range c.agents {
		ps, err := readProcStats(p.pid())
		if err != nil {
			return s, fmt.Errorf("%s: %w", p.name, err)
		}
		s.agentCPU += ps.CPU
		s.agentPeak += ps.PeakRSS
	}
	ps, err := readProcStats(c.etcd.pid())
	if err != nil {
		return s, fmt.Errorf("etcd: %w", err)
	}
	s.etcdCPU, s.etcdPeak = ps.CPU, ps.PeakRSS
	self, err := readProcStats(os.Getpid())
	if err != nil {
		return s, fmt.Errorf("bench: %w", err)
	}
	s.benchCPU = self.CPU
	if s.hostBusy, err = readHostBusy(); err != nil {
		return s, err
	}
	return s, nil
}

func getOK(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// startsFile is where an agents' process keeps its count of units started.
func (c *cluster) startsFile(agents string) string {
	return filepath.Join(c.dir, agents+".starts")
}

// started returns how many units the simulated machines have started,
// ever, as their processes last wrote it (every 200 ms).
func (c *cluster) started() (int64, error) {
	var n int64
	for _, p := range c.agents {
		k, err := readStarts(c.startsFile(p.name))
		if err != nil {
			return 0, fmt.Errorf("%s's count of units started: %w", p.name, err)
		}
		n += k
	}
	return n, nil
}
