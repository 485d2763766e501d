// Package integration runs real Flotilla daemons (the built binary) on
// loopback and drives them with the real CLI, as a user would.
package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/freeport"
	"github.com/flotilla/flotilla/internal/supervisor/supervisortest"
	"github.com/flotilla/flotilla/internal/waitfor"
)

var flotillaBin string

func TestMain(m *testing.M) {
	if addr := os.Getenv(healthServerEnv); addr != "" {
		serveHealth(addr) // this binary run as a unit (health_test.go)
		return
	}
	dir, err := os.MkdirTemp("", "flotilla-it-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	flotillaBin = filepath.Join(dir, "flotilla")
	build := exec.Command("go", "build", "-o", flotillaBin, "github.com/flotilla/flotilla/cmd/flotilla")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building flotilla:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Timings short enough for tests, in the same proportions as the defaults.
const (
	electionTTL = 2 * time.Second
	agentTTL    = 8 * time.Second
)

type node struct {
	name, dir             string
	api, etcdClient, peer string
	args                  []string
	bin                   string // the binary it runs; "" is flotillaBin
	cmd                   *exec.Cmd
	done                  chan struct{}
	log                   *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// freeAddr returns a loopback address for a daemon to listen on, never
// one given before in this process (freeport).
func freeAddr(t *testing.T) string {
	t.Helper()
	addrs, err := freeport.Addrs(1)
	if err != nil {
		t.Fatal(err)
	}
	return addrs[0]
}

// start runs the node's daemon process.
func (n *node) start(t *testing.T) {
	t.Helper()
	n.log = &lockedBuffer{}
	bin := n.bin
	if bin == "" {
		bin = flotillaBin
	}
	n.cmd = exec.Command(bin, n.args...)
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", n.name, err)
	}
	n.done = make(chan struct{})
	go func() { n.cmd.Wait(); close(n.done) }()
}

func (n *node) running() bool {
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL to the daemon process alone, as a crash would.
func (n *node) kill() {
	if n.running() {
		n.cmd.Process.Signal(syscall.SIGKILL)
		<-n.done
	}
}

// stop asks the daemon to shut down and waits for it.
func (n *node) stop(t *testing.T) {
	if !n.running() {
		return
	}
	n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(30 * time.Second):
		t.Errorf("%s did not stop within 30s of SIGTERM; killing it", n.name)
		n.kill()
	}
}

// stopSupervisor ends the machine's supervisor, which the daemon started
// and which outlives it, with its units.
func (n *node) stopSupervisor(t *testing.T) {
	supervisortest.Stop(t, filepath.Join(n.dir, "units"))
}

// shutdown stops the daemon, then its supervisor and units: what a test's
// cleanup does, so that nothing it started outlives it.
func (n *node) shutdown(t *testing.T) {
	n.stop(t)
	n.stopSupervisor(t)
}

type cluster struct {
	t     *testing.T
	nodes []*node
}

// newCluster starts n daemons, each with an embedded etcd member.
func newCluster(t *testing.T, n int, extra func(i int) []string) *cluster {
	t.Helper()
	return newClusterOn(t, n, "", extra)
}

// newClusterOn starts n daemons of the flotilla binary bin ("": the one
// under test).
// newLeadingNode starts a one-node cluster (newCluster's extra flags) and
// returns its node once it leads.
func newLeadingNode(t *testing.T, extra func(i int) []string) *node {
	c := newCluster(t, 1, extra)
	n1 := c.nodes[0]
	waitfor.Until(t, 60*time.Second, "a leader", func() error { _, err := leaderOf(t, n1); return err })
	return n1
}

func newClusterOn(t *testing.T, n int, bin string, extra func(i int) []string) *cluster {
	t.Helper()
	c := &cluster{t: t}
	var initial []string
	for i := range n {
		nd := &node{bin: bin, name: fmt.Sprintf("n%d", i+1), dir: t.TempDir(), api: freeAddr(t), etcdClient: freeAddr(t), peer: freeAddr(t)}
		initial = append(initial, nd.name+"=http://"+nd.peer)
		c.nodes = append(c.nodes, nd)
	}
	for i, nd := range c.nodes {
		nd.args = []string{"daemon", "--name", nd.name, "--data-dir", nd.dir, "--api-addr", nd.api,
			"--etcd-embed", "--etcd-client-addr", nd.etcdClient, "--etcd-peer-addr", nd.peer,
			"--etcd-initial-cluster", strings.Join(initial, ","),
			"--agent-ttl", agentTTL.String(), "--election-ttl", electionTTL.String(), "--log-level", "debug"}
		if extra != nil {
			nd.args = append(nd.args, extra(i)...)
		}
		nd.start(t)
	}
	t.Cleanup(func() {
		for _, nd := range c.nodes {
			nd.shutdown(t)
		}
		if t.Failed() {
			for _, nd := range c.nodes {
				t.Logf("---- log of %s ----\n%s", nd.name, tail(nd.log.String(), 80))
			}
		}
	})
	return c
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// cli runs a flotilla CLI command against node nd's API.
func cli(t *testing.T, nd *node, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, flotillaBin, append([]string{"--endpoint", "http://" + nd.api}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String() + errb.String(), fmt.Errorf("flotilla %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

func mustCLI(t *testing.T, nd *node, args ...string) string {
	t.Helper()
	out, err := cli(t, nd, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// jsonCLI runs a list command with --output json and decodes its answer.
func jsonCLI[T any](t *testing.T, nd *node, args ...string) (T, error) {
	t.Helper()
	var v T
	out, err := cli(t, nd, append(args, "--output", "json")...)
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return v, fmt.Errorf("decoding %q: %w", out, err)
	}
	return v, nil
}

type unitRow struct {
	Unit, Machine, Load, Active, Sub, Hash string
}

type fileRow struct {
	Unit, Hash, Dstate, State, Tmachine, Desc string
}

type machineRow struct {
	Machine  string            `json:"machine"`
	IP       string            `json:"ip"`
	Metadata map[string]string `json:"metadata"`
	Leader   bool              `json:"leader"`
}

func writeUnit(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// alive reports whether pid is a live process (not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] != 'Z'
}
