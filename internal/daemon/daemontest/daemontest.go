// Package daemontest runs real Flotilla clusters in the test process: each
// machine is a daemon (daemon.Run) on loopback, the first with an embedded
// etcd member and the engine, the others agents on that etcd. Tests of the
// client and the CLI use it to speak to the real API, engine and agents.
//
// A test binary whose machines use the exec driver must call
// supervisortest.Main from its TestMain.
package daemontest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/daemon"
	"github.com/flotilla/flotilla/internal/supervisor"
	"github.com/flotilla/flotilla/internal/supervisor/supervisortest"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// Machine describes one machine of a test cluster.
type Machine struct {
	ID       string            // the machine ID (--name); required
	IP       string            // shown by list-machines (default 127.0.0.1)
	Metadata map[string]string // for MachineMetadata=
	// Exec runs units as real processes (the exec driver); otherwise they
	// run in memory (the sim driver, which starts every unit at once).
	Exec bool
	// StartDelay is how long the sim driver takes to start a unit; the
	// unit is activating meanwhile.
	StartDelay time.Duration
	// NoAgent runs the daemon without an agent: it is not a machine of the
	// cluster (the first machine then leads a cluster of the others).
	NoAgent bool
	// Driver, when set, is the daemon's --driver (Exec is then ignored).
	Driver string
	// StopUnitsOnExit is the daemon's --stop-units-on-exit.
	StopUnitsOnExit bool
	// Registry is the daemon's --registry (default grpc); every machine of
	// a cluster must have the same.
	Registry string
}

// Cluster is a running test cluster.
type Cluster struct {
	// URL is the API of the first machine, which leads.
	URL string
	// URLs are the APIs of all machines, in the order given.
	URLs []string
	// Socket is the unix socket the first machine also serves its API on
	// (--api-socket).
	Socket string

	unitDirs []string // by machine: the exec driver's directory, "" for sim
	procs    []*proc  // by machine
	etcd     string   // the embedded etcd's client URL
}

// proc is one daemon of the cluster.
type proc struct {
	name   string
	cfg    daemon.Config
	cancel context.CancelFunc
	done   chan error // Run's result, once
	err    error
	ended  bool
}

// wait returns Run's result once it has ended, or false after timeout.
func (p *proc) wait(timeout time.Duration) (error, bool) {
	if p.ended {
		return p.err, true
	}
	select {
	case p.err = <-p.done:
		p.ended = true
		return p.err, true
	case <-time.After(timeout):
		return nil, false
	}
}

// Stop stops machine i's daemon as SIGTERM does (its context ends) and
// returns what it returned. Its units outlive it unless it was run with
// StopUnitsOnExit.
func (c *Cluster) Stop(t testing.TB, i int) error {
	t.Helper()
	p := c.procs[i]
	p.cancel()
	err, ok := p.wait(3 * time.Minute)
	if !ok {
		t.Fatalf("daemontest: daemon %s did not stop within 3m", p.name)
	}
	return err
}

// Add starts one more daemon, an agent on the cluster's etcd (no engine),
// and returns its index once it serves its API. It does not wait for the
// leader to hear from it.
func (c *Cluster) Add(t testing.TB, m Machine) int {
	t.Helper()
	cfg := daemon.Config{Name: m.ID, PublicIP: m.IP, Metadata: m.Metadata, Driver: "sim", SimStartDelay: m.StartDelay,
		ElectionTTL: time.Second, AgentTTL: 5 * time.Second, NoAgent: m.NoAgent, StopUnitsOnExit: m.StopUnitsOnExit, Registry: m.Registry,
		EtcdEndpoints: []string{c.etcd}, NoEngine: true}
	if m.Exec {
		cfg.Driver = "exec"
	}
	p, a, dir := run(t, cfg)
	c.procs = append(c.procs, p)
	if m.Exec {
		c.unitDirs = append(c.unitDirs, dir)
	} else {
		c.unitDirs = append(c.unitDirs, "")
	}
	c.URLs = append(c.URLs, "http://"+a.API)
	return len(c.procs) - 1
}

// Restart stops machine i's daemon (not the first, which holds the etcd
// member) and starts it again on the same data dir, as a daemon restarted
// on its machine is; it returns once the new one serves its API.
func (c *Cluster) Restart(t testing.TB, i int) {
	t.Helper()
	if i == 0 {
		t.Fatal("daemontest: Restart of the first machine, which holds the etcd member")
	}
	if err := c.Stop(t, i); err != nil {
		t.Fatalf("daemontest: daemon %s stopped with %v", c.procs[i].name, err)
	}
	cfg := c.procs[i].cfg
	cfg.Ready = nil
	p, a, _ := run(t, cfg)
	c.procs[i] = p
	c.URLs[i] = "http://" + a.API
}

// Ended waits up to timeout for machine i's daemon to end by itself (a
// daemon refused by the cluster) and returns what it returned; ok is
// false if it still runs.
func (c *Cluster) Ended(t testing.TB, i int, timeout time.Duration) (err error, ok bool) {
	t.Helper()
	return c.procs[i].wait(timeout)
}

// UnitDir is machine i's exec driver directory ("" for the sim driver).
func (c *Cluster) UnitDir(i int) string { return c.unitDirs[i] }

// Freeze stops (SIGSTOP) the supervisor of machine i, which must run the
// exec driver, until the test ends: the machine stays in the cluster and
// its agent takes orders, but cannot carry out a start or stop, as on a
// host stuck in I/O. The leader goes on showing the units as they were.
func (c *Cluster) Freeze(t testing.TB, i int) {
	t.Helper()
	if i < 0 || i >= len(c.unitDirs) || c.unitDirs[i] == "" {
		t.Fatalf("daemontest: machine %d does not run the exec driver", i)
	}
	b, err := os.ReadFile(filepath.Join(c.unitDirs[i], supervisor.PIDFile))
	if err != nil {
		t.Fatalf("daemontest: supervisor of machine %d: %v", i, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		t.Fatalf("daemontest: %s holds %q, not a PID", supervisor.PIDFile, b)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("daemontest: freeze supervisor %d: %v", pid, err)
	}
	// Registered after the daemon's own cleanup, so it runs first: the
	// supervisor resumes before it is stopped.
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
}

// timeout bounds each daemon's start and the wait for the cluster.
const timeout = 60 * time.Second

// Start runs a cluster of the machines and returns once the first leads
// and every machine is up. It is stopped when the test ends.
func Start(t testing.TB, machines ...Machine) *Cluster {
	t.Helper()
	if len(machines) == 0 {
		t.Fatal("daemontest.Start: no machines")
	}
	c := &Cluster{}
	var etcd string
	agents := 0
	for i, m := range machines {
		cfg := daemon.Config{Name: m.ID, PublicIP: m.IP, Metadata: m.Metadata, Driver: "sim", SimStartDelay: m.StartDelay,
			ElectionTTL: time.Second, AgentTTL: 5 * time.Second, NoAgent: m.NoAgent, StopUnitsOnExit: m.StopUnitsOnExit, Registry: m.Registry}
		if m.Exec {
			cfg.Driver = "exec"
		}
		if m.Driver != "" {
			cfg.Driver = m.Driver
		}
		if i == 0 {
			cfg.EtcdEmbed, cfg.EtcdClientAddr, cfg.EtcdPeerAddr = true, "127.0.0.1:0", "127.0.0.1:0"
			// Not in t.TempDir(): a socket's path must fit in 108 bytes.
			dir, err := os.MkdirTemp("", "fl")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			cfg.APISocket = filepath.Join(dir, "api.sock")
			c.Socket = cfg.APISocket
		} else {
			cfg.EtcdEndpoints, cfg.NoEngine = []string{etcd}, true
		}
		p, a, dir := run(t, cfg)
		c.procs = append(c.procs, p)
		if strings.Contains(cfg.Driver, "exec") {
			c.unitDirs = append(c.unitDirs, dir)
		} else {
			c.unitDirs = append(c.unitDirs, "")
		}
		if !m.NoAgent {
			agents++
		}
		if i == 0 {
			etcd = "http://" + a.EtcdClient
			c.etcd = etcd
			c.URL = "http://" + a.API
		}
		c.URLs = append(c.URLs, "http://"+a.API)
	}
	cl, err := client.New(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, timeout, fmt.Sprintf("daemontest: a leader with %d machines up", agents), func() error {
		st, err := cl.Status(context.Background())
		switch {
		case err != nil:
			return err
		case st.Leader != machines[0].ID:
			return fmt.Errorf("leader %q, want %s", st.Leader, machines[0].ID)
		}
		ml, err := cl.Machines(context.Background())
		switch {
		case err != nil:
			return err
		case len(ml.Machines) != agents:
			return fmt.Errorf("%d machines", len(ml.Machines))
		case !c.allKnowLeader(machines[0].ID):
			return errors.New("not every daemon knows the leader")
		}
		return nil
	})
	return c
}

// allKnowLeader reports whether every daemon of the cluster says id leads:
// each learns it from its own watch of the election, and one that has not
// yet forwards nothing.
func (c *Cluster) allKnowLeader(id string) bool {
	for _, u := range c.URLs {
		cl, err := client.New(u)
		if err != nil {
			return false
		}
		if st, err := cl.Status(context.Background()); err != nil || st.Leader != id {
			return false
		}
	}
	return true
}

// StartNoLeader runs one daemon with neither engine nor agent: its API
// answers, but its cluster never has a leader. It returns the API URL.
func StartNoLeader(t testing.TB) string {
	t.Helper()
	_, a, _ := run(t, daemon.Config{Name: "noleader", EtcdEmbed: true, EtcdClientAddr: "127.0.0.1:0", EtcdPeerAddr: "127.0.0.1:0",
		ElectionTTL: time.Second, NoEngine: true, NoAgent: true})
	return "http://" + a.API
}

// run starts one daemon with cfg (in a new data directory, API on a free
// loopback port) and returns it with its addresses once it serves, and the
// directory of its units (the exec driver's). It is stopped when the test
// ends; an error it returns fails the test unless the test collected it
// (Cluster.Stop, Cluster.Ended).
func run(t testing.TB, cfg daemon.Config) (*proc, daemon.Addrs, string) {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	cfg.APIAddr = "127.0.0.1:0"
	cfg.Logger = slog.New(slog.DiscardHandler)
	ready := make(chan daemon.Addrs, 1)
	cfg.Ready = func(a daemon.Addrs) { ready <- a }
	ctx, cancel := context.WithCancel(context.Background())
	p := &proc{name: cfg.Name, cfg: cfg, cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- daemon.Run(ctx, cfg) }()
	units := filepath.Join(cfg.DataDir, "units")
	t.Cleanup(func() {
		collected := p.ended
		cancel()
		if err, _ := p.wait(3 * time.Minute); err != nil && !collected {
			t.Errorf("daemon %s: %v", cfg.Name, err)
		}
		if strings.Contains(cfg.Driver, "exec") {
			supervisortest.Stop(t, units)
		}
	})
	select {
	case a := <-ready:
		return p, a, units
	case err := <-p.done:
		p.ended, p.err = true, err
		t.Fatalf("daemon %s ended before it was ready: %v", cfg.Name, err)
	case <-time.After(timeout):
		t.Fatalf("daemon %s not ready within %v", cfg.Name, timeout)
	}
	panic(fmt.Sprintf("daemon %s: unreachable", cfg.Name))
}

// WaitUnit polls the unit through c until ok(unit) and returns it, or
// fails the test after 30s: the cluster places and starts units after a
// write returns.
func WaitUnit(t testing.TB, c *client.Client, name string, ok func(*api.Unit) bool) *api.Unit {
	t.Helper()
	var u *api.Unit
	waitfor.Until(t, 30*time.Second, "unit "+name+" as wanted", func() error {
		var err error
		switch u, err = c.Unit(context.Background(), name); {
		case err != nil:
			return err
		case !ok(u):
			return fmt.Errorf("unit %+v", u)
		}
		return nil
	})
	return u
}
