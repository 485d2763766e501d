package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/flotilla/flotilla/internal/agent"
	"github.com/flotilla/flotilla/internal/auth"
	"github.com/flotilla/flotilla/internal/driver/sim"
	"github.com/flotilla/flotilla/internal/election"
	"github.com/flotilla/flotilla/internal/machine"
	"github.com/flotilla/flotilla/internal/registry"
)

// AgentsConfig configures a process of simulated agents (flotilla
// bench-agents): Count agents with the sim driver, named Prefix followed by
// their index, zero-padded to Width digits.
type AgentsConfig struct {
	// Count is how many agents to run (1 to MaxAgentsPerProcess).
	Count int
	// First is the index of the first agent (default 1).
	First int
	// Width is the number of digits of an index (default: as many as
	// First+Count-1 has).
	Width int
	// Prefix starts every machine name (default "sim-").
	Prefix string
	// Registry is "grpc" (default) or "etcd".
	Registry string
	// EtcdEndpoints are the etcd client URLs. Required.
	EtcdEndpoints []string
	// EtcdPrefix is the cluster's etcd key prefix (default registry.DefaultPrefix).
	EtcdPrefix string
	// SimStartDelay and SimFailureRate configure every agent's sim driver.
	SimStartDelay  time.Duration
	SimFailureRate float64
	// TTL is the agent TTL (default 20s); it must match the engines'.
	TTL time.Duration
	// TLSDir, if set, holds the cluster's CA (ca.pem) and each agent's
	// machine certificate (NAME.pem, NAME-key.pem, as `flotilla tls`
	// writes them): every agent then speaks mutual TLS to the leader and
	// to etcd.
	TLSDir string
	// Version is reported to the leader by every agent.
	Version string
	// Logger receives the agents' logs (default: discarded).
	Logger *slog.Logger
	// StartsFile, if set, is kept holding how many units the process's
	// simulated machines have started, ever (rewritten every 200 ms while
	// it changes): the bench judges restarts by it, not by the API.
	StartsFile string
}

// MaxAgentsPerProcess bounds AgentsConfig.Count.
const MaxAgentsPerProcess = 5000

func (c *AgentsConfig) validate() error {
	if c.Count < 1 || c.Count > MaxAgentsPerProcess {
		return fmt.Errorf("--count %d: want 1 to %d agents in one process", c.Count, MaxAgentsPerProcess)
	}
	if c.First == 0 {
		c.First = 1
	}
	if c.First < 0 {
		return fmt.Errorf("--first %d: want an index of 0 or more", c.First)
	}
	if w := len(fmt.Sprint(c.First + c.Count - 1)); c.Width < w {
		c.Width = w
	}
	if c.Prefix == "" {
		c.Prefix = "sim-"
	}
	mode, err := registry.ParseMode(c.Registry)
	if err != nil {
		return fmt.Errorf("--registry %w", err)
	}
	c.Registry = mode
	if len(c.EtcdEndpoints) == 0 {
		return errors.New("--etcd-endpoints is required")
	}
	if c.EtcdPrefix == "" {
		c.EtcdPrefix = registry.DefaultPrefix
	}
	if c.SimFailureRate < 0 || c.SimFailureRate > 1 {
		return fmt.Errorf("--sim-failure-rate %v: want a share between 0 and 1", c.SimFailureRate)
	}
	if c.SimStartDelay < 0 {
		return fmt.Errorf("--sim-start-delay %v: want 0 or more", c.SimStartDelay)
	}
	if c.TTL == 0 {
		c.TTL = machine.DefaultTTL
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}

// AgentName is the machine name of the agent with index i.
func (c *AgentsConfig) AgentName(i int) string {
	return fmt.Sprintf("%s%0*d", c.Prefix, c.Width, i)
}

// RunAgents runs the agents until ctx is done, then stops them and their
// simulated units. In grpc mode the agents share one etcd client and one
// observation of the election, fanned out to all; each agent still dials
// its own gRPC connection to the leader. In etcd mode every agent has its
// own etcd client, as every fleet agent had.
func RunAgents(ctx context.Context, cfg AgentsConfig) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	keys := registry.Keys{Prefix: cfg.EtcdPrefix}
	creds := func(name string) (*auth.Credentials, error) {
		if cfg.TLSDir == "" {
			return nil, nil
		}
		return auth.Load(auth.Files{CA: filepath.Join(cfg.TLSDir, auth.CAFile),
			Cert: filepath.Join(cfg.TLSDir, name+".pem"), Key: filepath.Join(cfg.TLSDir, name+"-key.pem")}, "--tls-dir", name)
	}
	newClient := func(c *auth.Credentials) (*clientv3.Client, error) {
		var tc *tls.Config
		if c != nil {
			tc = c.ClientConfig()
		}
		cli, err := clientv3.New(clientv3.Config{
			Endpoints: cfg.EtcdEndpoints, DialTimeout: 5 * time.Second,
			DialKeepAliveTime: 5 * time.Second, DialKeepAliveTimeout: 5 * time.Second,
			Logger: zap.NewNop(), TLS: tc,
		})
		if err != nil {
			return nil, fmt.Errorf("etcd client for %s: %w", strings.Join(cfg.EtcdEndpoints, ","), err)
		}
		return cli, nil
	}
	var clients []*clientv3.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var feed *leaderFeed
	if cfg.Registry == "grpc" {
		c, err := creds(cfg.AgentName(cfg.First))
		if err != nil {
			return err
		}
		cli, err := newClient(c)
		if err != nil {
			return err
		}
		clients = append(clients, cli)
		feed = newLeaderFeed(runCtx, election.Observe(runCtx, cli, keys.Election()))
	}

	type simAgent struct {
		a *agent.Agent
		d *sim.Driver
	}
	agents := make([]simAgent, 0, cfg.Count)
	for i := cfg.First; i < cfg.First+cfg.Count; i++ {
		name := cfg.AgentName(i)
		acfg := agent.Config{
			Machine: agent.Machine{ID: name, IP: "127.0.0.1", Version: cfg.Version},
			TTL:     cfg.TTL,
			Logger:  cfg.Logger,
		}
		c, err := creds(name)
		if err != nil {
			return err
		}
		if c != nil {
			acfg.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(c.ClientConfig()))}
		}
		if feed != nil {
			acfg.Leaders = feed.subscribe
		} else {
			cli, err := newClient(c)
			if err != nil {
				return err
			}
			clients = append(clients, cli)
			acfg.Registry, acfg.Etcd, acfg.Keys = "etcd", cli, keys
		}
		a, err := agent.New(acfg)
		if err != nil {
			return fmt.Errorf("agent %s: %w", name, err)
		}
		d, err := sim.New(sim.Config{Machine: name, Notify: a.Notify, StartDelay: cfg.SimStartDelay, FailureRate: cfg.SimFailureRate})
		if err != nil {
			return fmt.Errorf("agent %s: %w", name, err)
		}
		a.SetDriver(d)
		agents = append(agents, simAgent{a, d})
	}
	var wg sync.WaitGroup
	for _, sa := range agents {
		wg.Add(1)
		go func() { defer wg.Done(); sa.a.Run(runCtx) }()
	}
	if cfg.StartsFile != "" {
		drivers := make([]*sim.Driver, len(agents))
		for i, sa := range agents {
			drivers[i] = sa.d
		}
		wg.Add(1)
		go func() { defer wg.Done(); keepStartsFile(runCtx, cfg.StartsFile, drivers, cfg.Logger) }()
	}
	cfg.Logger.Info("agents running", "count", cfg.Count, "first", cfg.AgentName(cfg.First), "registry", cfg.Registry)
	<-ctx.Done()
	stop()
	wg.Wait()
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, sa := range agents {
		sa.d.Close(cctx)
	}
	return nil
}

// leaderFeed fans one observation of the election out to many agents:
// each subscriber gets the current leader at once and every change after,
// skipping values it had no time to read (only the latest matters).
type leaderFeed struct {
	mu     sync.Mutex
	cur    election.Info
	have   bool
	closed bool
	subs   map[chan election.Info]struct{}
}

// newLeaderFeed forwards src until it is closed or ctx is done; then every
// subscriber's channel is closed.
func newLeaderFeed(ctx context.Context, src <-chan election.Info) *leaderFeed {
	f := &leaderFeed{subs: map[chan election.Info]struct{}{}}
	go func() {
		defer f.close()
		for {
			select {
			case in, ok := <-src:
				if !ok {
					return
				}
				f.publish(in)
			case <-ctx.Done():
				return
			}
		}
	}()
	return f
}

func (f *leaderFeed) publish(in election.Info) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cur, f.have = in, true
	for ch := range f.subs {
		replace(ch, in)
	}
}

// replace puts in into ch (capacity 1), dropping a value not read yet.
// Callers hold f.mu: only they send, so the send cannot block.
func replace(ch chan election.Info, in election.Info) {
	select {
	case <-ch:
	default:
	}
	ch <- in
}

func (f *leaderFeed) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for ch := range f.subs {
		close(ch)
		delete(f.subs, ch)
	}
}

// subscribe returns a channel of the leader, closed when ctx is done or
// the feed ends. It has agent.Config.Leaders' signature.
func (f *leaderFeed) subscribe(ctx context.Context) <-chan election.Info {
	ch := make(chan election.Info, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		close(ch)
		return ch
	}
	if f.have {
		ch <- f.cur
	}
	f.subs[ch] = struct{}{}
	// No goroutine waits for ctx: 10,000 of them idle cost 80 MB of stacks.
	context.AfterFunc(ctx, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.subs[ch]; ok {
			delete(f.subs, ch)
			close(ch)
		}
	})
	return ch
}

// keepStartsFile keeps path holding the number of units the drivers have
// started, until ctx is done. The file is replaced whole (renamed into
// place), so a reader never sees half a number.
func keepStartsFile(ctx context.Context, path string, drivers []*sim.Driver, log *slog.Logger) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	last := int64(-1)
	for {
		var n int64
		for _, d := range drivers {
			n += d.Started()
		}
		if n != last {
			if err := writeFileAtomic(path, []byte(strconv.FormatInt(n, 10)+"\n")); err != nil {
				log.Error("cannot write the starts file", "path", path, "err", err)
			} else {
				last = n
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// readStarts reads a starts file (keepStartsFile).
func readStarts(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}
