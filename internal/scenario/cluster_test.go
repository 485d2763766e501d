package scenario

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// Timings of every scenario: the shortest the daemon accepts
// (engine.MinAgentTTL(1s) is 5s), so that a scenario takes seconds.
// SCENARIO_DEFAULT_TIMINGS=1 runs them with the daemon's defaults (5s and
// 20s) instead, with FLOTILLA_SCENARIO_LONG, to measure as an operator
// would see it.
var (
	electionTTL = timing("1s", "5s")
	agentTTL    = timing("5s", "20s")
)

func timing(short, def string) string {
	if os.Getenv("SCENARIO_DEFAULT_TIMINGS") != "" {
		return def
	}
	return short
}

// Ports inside each node's namespace.
const (
	apiPort  = 7480
	grpcPort = 7481
	etcdPort = 2379
	peerPort = 2380
	etcdHost = 100 // etcd's address is 10.77.X.100
)

// proc is one process the scenario runs: a daemon (n1, n2...) or the
// external etcd, each in its own network namespace.
type proc struct {
	name string
	ip   string
	ns   string
	ino  uint64
	dir  string
	args []string
	logf string

	mu   sync.Mutex // guards cmd and done, replaced by each start
	cmd  *exec.Cmd
	done chan struct{}

	// Guarded by scenario.mu: set by commands and by background timers.
	frozen bool
	thaw   *time.Timer
	cutAll bool
	heal   *time.Timer
}

// current returns the process started last and its done channel.
func (p *proc) current() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

func (p *proc) running() bool {
	cmd, done := p.current()
	if cmd == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

func (p *proc) start() error {
	log, err := os.OpenFile(p.logf, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "==== %s: flotilla %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(p.args, " "))
	// ip netns exec execs the program: the process is the daemon itself.
	cmd := exec.Command("ip", append([]string{"netns", "exec", p.ns, flotillaBin}, p.args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = daemonEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	go func() { cmd.Wait(); log.Close(); close(done) }()
	return nil
}

func (p *proc) signal(sig syscall.Signal) error {
	if !p.running() {
		return fmt.Errorf("%s is not running", p.name)
	}
	cmd, _ := p.current()
	return cmd.Process.Signal(sig)
}

// wait waits up to d for the process to end.
func (p *proc) wait(d time.Duration) bool {
	cmd, done := p.current()
	if cmd == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

func (p *proc) client(timeout time.Duration) *client.Client {
	c, err := client.New(fmt.Sprintf("http://%s:%d", p.ip, apiPort), client.WithTimeout(timeout), client.WithUserAgent("flotilla-scenario"))
	if err != nil {
		panic(err) // the URL is ours
	}
	return c
}

// scenario is one script's run: its network, processes, units, sampler
// and what the checks compare against.
type scenario struct {
	t      *testing.T
	name   string
	marker string // SCENARIO=<marker> in every unit's environment; the namespaces' prefix
	dir    string
	net    *network
	tl     *timeline
	smp    *sampler

	mu       sync.Mutex // guards procs' frozen/cut state and timers
	etcd     *proc
	nodes    []*proc
	registry string
	embedded bool
	agentTTL string // the daemons' --agent-ttl when start-daemons set one
	aliases  map[string]*proc

	units     []string // launched by "start", sorted
	singleton map[string]bool
	pids      map[string]unitCopy        // recorded by record-pids
	templates map[string]startedTemplate // by start, for replace
	writer    *writer
}

func newScenario(t *testing.T, name string) *scenario {
	marker := fmt.Sprintf("%s%d-%d", nsPrefix, os.Getpid(), scenarioSeq.Add(1))
	start := time.Now()
	s := &scenario{t: t, name: strings.TrimSuffix(name, ".txt"), marker: marker, dir: t.TempDir(),
		tl: &timeline{start: start}, aliases: map[string]*proc{}, singleton: map[string]bool{}, templates: map[string]startedTemplate{}}
	var err error
	s.net, err = newNetwork(marker)
	if err != nil {
		t.Fatalf("network for %s: %v", name, err)
	}
	t.Cleanup(s.close)
	s.smp = newSampler(marker, s.nodeOfInode, s.tl)
	return s
}

// nodeOfInode names the process whose namespace has inode ino.
func (s *scenario) nodeOfInode(ino uint64) string {
	for _, p := range s.procs() {
		if p.ino == ino {
			return p.name
		}
	}
	return "elsewhere"
}

func (s *scenario) procs() []*proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := append([]*proc(nil), s.nodes...)
	if s.etcd != nil {
		ps = append(ps, s.etcd)
	}
	return ps
}

// close ends everything the scenario started, on every exit path: the
// writer, the sampler, pending timers, every process in its namespaces, the
// namespaces. It logs the figures, and the daemons' logs if the test failed.
func (s *scenario) close() {
	if s.writer != nil {
		s.writer.close()
	}
	s.smp.close()
	s.mu.Lock()
	for _, p := range append(append([]*proc(nil), s.nodes...), s.etcd) {
		if p == nil {
			continue
		}
		if p.thaw != nil {
			p.thaw.Stop()
		}
		if p.heal != nil {
			p.heal.Stop()
		}
	}
	s.mu.Unlock()
	s.writeFigures()
	if err := s.net.close(); err != nil {
		s.t.Errorf("cleaning up: %v", err)
	}
	for _, p := range s.procs() {
		p.wait(10 * time.Second)
	}
	if s.t.Failed() {
		for _, p := range s.procs() {
			b, _ := os.ReadFile(p.logf)
			s.t.Logf("---- log of %s (%s) ----\n%s", p.name, p.logf, tail(string(b), 60))
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// writeFigures logs what was measured and writes it to
// $SCENARIO_FIGURES/<scenario>.txt when that is set.
func (s *scenario) writeFigures() {
	var b strings.Builder
	fmt.Fprintf(&b, "scenario %s (registry %s, %s etcd; election TTL %s, agent TTL %s)\n", s.name, s.registry,
		map[bool]string{true: "embedded", false: "external"}[s.embedded], electionTTL, s.ttl())
	for _, u := range s.units {
		f := s.smp.figures(u)
		fmt.Fprintf(&b, "  %-18s max copies %d %v, two or more for %.2fs, longest with none %.2fs\n",
			u, f.max, f.maxNodes, f.overlap.Seconds(), f.nowhere.Seconds())
	}
	if s.writer != nil {
		fmt.Fprintf(&b, "  writer: %s\n", s.writer.summary())
	}
	b.WriteString("timeline:\n")
	b.WriteString(s.tl.String())
	b.WriteString("\n")
	s.t.Logf("figures:\n%s", b.String())
	if dir := os.Getenv("SCENARIO_FIGURES"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err == nil {
			os.WriteFile(filepath.Join(dir, s.name+".txt"), []byte(b.String()), 0o644)
		}
	}
}

// addProc makes a namespace for a new process.
func (s *scenario) addProc(name string, host int) (*proc, error) {
	ns, err := s.net.addNode(name, host)
	if err != nil {
		return nil, err
	}
	ino, err := nsInode(filepath.Join("/run/netns", ns))
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(s.dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &proc{name: name, ip: s.net.ip(host), ns: ns, ino: ino, dir: dir, logf: filepath.Join(s.dir, name+".log")}, nil
}

// startEtcd starts the external etcd: a daemon running only an etcd member.
func (s *scenario) startEtcd() error {
	p, err := s.addProc("etcd", etcdHost)
	if err != nil {
		return err
	}
	// The test's own namespaces are the network: --insecure (no TLS, no
	// tokens) is what lets a daemon listen beyond loopback there.
	p.args = []string{"daemon", "--name", "etcd", "--etcd-embed", "--no-engine", "--no-agent", "--log-level", "warn", "--insecure",
		"--etcd-client-addr", fmt.Sprintf("%s:%d", p.ip, etcdPort), "--etcd-peer-addr", fmt.Sprintf("%s:%d", p.ip, peerPort),
		"--api-addr", fmt.Sprintf("%s:%d", p.ip, apiPort), "--data-dir", p.dir}
	s.mu.Lock()
	s.etcd = p
	s.mu.Unlock()
	if err := p.start(); err != nil {
		return err
	}
	return s.waitEtcd(60 * time.Second)
}

func (s *scenario) waitEtcd(within time.Duration) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	url := fmt.Sprintf("http://%s:%d/health", s.etcd.ip, etcdPort)
	return waitfor.Poll(within, func() error {
		if !s.etcd.running() {
			return errors.New("etcd exited")
		}
		resp, err := hc.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("etcd /health: %s", resp.Status)
		}
		return nil
	})
}

// startDaemons makes and starts n daemons.
// daemonsConfig is what start-daemons varies: each daemon is an agent;
// the first engines of them (all when 0) are engine candidates too, the
// rest run --no-engine; agentTTL replaces the scenarios' agent TTL.
type daemonsConfig struct {
	n        int
	registry string
	embedded bool
	metadata string
	engines  int
	agentTTL string
}

// ttl is the daemons' agent TTL.
func (s *scenario) ttl() string {
	if s.agentTTL != "" {
		return s.agentTTL
	}
	return agentTTL
}

func (s *scenario) startDaemons(dc daemonsConfig) error {
	n, registry, embedded, metadata := dc.n, dc.registry, dc.embedded, dc.metadata
	if !embedded && s.etcd == nil {
		return errors.New("no etcd: start-etcd first, or start-daemons N etcd=embedded")
	}
	s.registry, s.embedded = registry, embedded
	if dc.agentTTL != "" {
		s.agentTTL = dc.agentTTL
	}
	var ps []*proc
	var initial []string
	for i := 1; i <= n; i++ {
		p, err := s.addProc(fmt.Sprintf("n%d", i), i)
		if err != nil {
			return err
		}
		ps = append(ps, p)
		initial = append(initial, fmt.Sprintf("%s=http://%s:%d", p.name, p.ip, peerPort))
	}
	for i, p := range ps {
		p.args = []string{"daemon", "--name", p.name, "--data-dir", p.dir,
			"--api-addr", fmt.Sprintf("%s:%d", p.ip, apiPort), "--grpc-addr", fmt.Sprintf("%s:%d", p.ip, grpcPort),
			"--public-ip", p.ip, "--registry", registry, "--agent-ttl", s.ttl(), "--election-ttl", electionTTL,
			"--log-level", "debug", "--insecure"}
		if dc.engines > 0 && i >= dc.engines {
			p.args = append(p.args, "--no-engine")
		}
		if embedded {
			p.args = append(p.args, "--etcd-embed", "--etcd-client-addr", fmt.Sprintf("%s:%d", p.ip, etcdPort),
				"--etcd-peer-addr", fmt.Sprintf("%s:%d", p.ip, peerPort), "--etcd-initial-cluster", strings.Join(initial, ","))
		} else {
			p.args = append(p.args, "--etcd-endpoints", fmt.Sprintf("http://%s:%d", s.etcd.ip, etcdPort))
		}
		if metadata != "" {
			p.args = append(p.args, "--metadata", metadata)
		}
	}
	s.mu.Lock()
	s.nodes = append(s.nodes, ps...)
	s.mu.Unlock()
	if !embedded {
		// n1 alone first, so that it leads: scripts may say "kill n1".
		if err := ps[0].start(); err != nil {
			return err
		}
		if err := waitfor.Poll(60*time.Second, func() error { return isLeader(ps[0]) }); err != nil {
			return fmt.Errorf("n1 did not lead: %w", err)
		}
		ps = ps[1:]
	}
	for _, p := range ps {
		if err := p.start(); err != nil {
			return err
		}
	}
	return waitfor.Poll(90*time.Second, func() error {
		for _, p := range s.nodes {
			if !p.running() {
				return fmt.Errorf("%s exited", p.name)
			}
		}
		if l := s.leader(); l == nil {
			return errors.New("no leader")
		}
		var ms int
		err := s.ask(func(c *client.Client) error {
			l, err := c.Machines(context.Background())
			if err == nil {
				ms = len(l.Machines)
			}
			return err
		})
		if err != nil {
			return err
		}
		if ms < len(s.nodes) {
			return fmt.Errorf("%d of %d machines connected", ms, len(s.nodes))
		}
		return nil
	})
}

func isLeader(p *proc) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := p.client(2 * time.Second).Status(ctx)
	if err != nil {
		return err
	}
	if !st.IsLeader {
		return fmt.Errorf("%s does not lead (leader %q)", p.name, st.Leader)
	}
	return nil
}

// live returns the daemons that can answer now: running and not frozen.
func (s *scenario) live() []*proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ps []*proc
	for _, p := range s.nodes {
		if p.running() && !p.frozen && !p.cutAll {
			ps = append(ps, p)
		}
	}
	return ps
}

// leader returns the daemon that says it leads, or nil.
func (s *scenario) leader() *proc {
	return s.leaderExcept(nil)
}

func (s *scenario) leaderExcept(not *proc) *proc {
	for _, p := range s.live() {
		if p != not && isLeader(p) == nil {
			return p
		}
	}
	return nil
}

// ask calls f with a client of each live daemon in turn until one answers
// (f returns nil, or an error that is not about reaching the cluster).
func (s *scenario) ask(f func(*client.Client) error) error {
	var errs []error
	for _, p := range s.live() {
		err := f(p.client(5 * time.Second))
		var ae *client.APIError
		if err == nil || errors.As(err, &ae) && !client.IsUnavailable(err) {
			return err
		}
		errs = append(errs, fmt.Errorf("%s: %w", p.name, err))
	}
	if len(errs) == 0 {
		return errors.New("no daemon is running")
	}
	return errors.Join(errs...)
}

// node resolves a script's name for a process: n1..nN, etcd, an alias
// bound by "as=", or "leader" (whoever leads now).
func (s *scenario) node(name string) (*proc, error) {
	s.mu.Lock()
	if p, ok := s.aliases[name]; ok {
		s.mu.Unlock()
		return p, nil
	}
	for _, p := range s.nodes {
		if p.name == name {
			s.mu.Unlock()
			return p, nil
		}
	}
	if name == "etcd" && s.etcd != nil {
		s.mu.Unlock()
		return s.etcd, nil
	}
	s.mu.Unlock()
	if name == "leader" {
		if l := s.leader(); l != nil {
			return l, nil
		}
		return nil, errors.New("no daemon leads now")
	}
	return nil, fmt.Errorf("no node %q (nodes: n1..n%d, etcd, leader, or an alias bound with as=)", name, len(s.nodes))
}

// freeze sends SIGSTOP, and SIGCONT after d when d > 0.
func (s *scenario) freeze(p *proc, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	p.frozen = true
	if p.thaw != nil {
		p.thaw.Stop()
	}
	if d > 0 {
		p.thaw = time.AfterFunc(d, func() { s.thaw(p) })
	}
	return nil
}

func (s *scenario) thaw(p *proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.thaw != nil {
		p.thaw.Stop()
		p.thaw = nil
	}
	if p.frozen {
		p.signal(syscall.SIGCONT)
		p.frozen = false
		s.tl.add("%s thawed (SIGCONT)", p.name)
	}
}

func (s *scenario) isFrozen(p *proc) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return p.frozen
}

// partition drops, inside p's namespace, its traffic with the addresses
// given (all of its traffic when all is set), or with their etcd peer port
// only when peerOnly is set; heal after d when d > 0.
func (s *scenario) partition(p *proc, ips []string, all, peerOnly bool, d time.Duration) error {
	var rules [][]string
	switch {
	case all:
		rules = [][]string{{"INPUT", "-i", "eth0"}, {"OUTPUT", "-o", "eth0"}}
	case peerOnly:
		for _, ip := range ips {
			for _, dir := range []string{"--dport", "--sport"} {
				port := fmt.Sprint(peerPort)
				rules = append(rules, []string{"INPUT", "-s", ip, "-p", "tcp", dir, port}, []string{"OUTPUT", "-d", ip, "-p", "tcp", dir, port})
			}
		}
	default:
		for _, ip := range ips {
			rules = append(rules, []string{"INPUT", "-s", ip}, []string{"OUTPUT", "-d", ip})
		}
	}
	for _, r := range rules {
		if err := inNS(p.ns, append(append([]string{"iptables", "-A"}, r...), "-j", "DROP")...); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p.cutAll = p.cutAll || all
	if p.heal != nil {
		p.heal.Stop()
	}
	if d > 0 {
		p.heal = time.AfterFunc(d, func() { s.heal(p) })
	}
	return nil
}

func (s *scenario) heal(p *proc) error {
	s.mu.Lock()
	if p.heal != nil {
		p.heal.Stop()
		p.heal = nil
	}
	p.cutAll = false
	s.mu.Unlock()
	for _, chain := range []string{"INPUT", "OUTPUT"} {
		if err := inNS(p.ns, "iptables", "-F", chain); err != nil {
			return err
		}
	}
	s.tl.add("%s healed", p.name)
	return nil
}

// launched returns the launched units matching glob.
func (s *scenario) launched(glob string) []string {
	return matchUnits(s.units, glob)
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// daemonEnv is the test's environment without its own FLOTILLA_
// variables (FLOTILLA_SCENARIOS, FLOTILLA_CAPS, ...), which a daemon would
// take for flags of its own and warn about.
func daemonEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLOTILLA_") {
			env = append(env, kv)
		}
	}
	return env
}
