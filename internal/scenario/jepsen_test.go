package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// jepsenByDefault says whether TestJepsen runs without FLOTILLA_JEPSEN=1:
// it does, in every run of the suite (one seed, each fault once, about
// 90 s), since the fixes of issue 24; FLOTILLA_JEPSEN=0 skips it.
const jepsenByDefault = true

// The run's shape. The clients send 2 requests at a time (by default) to
// each daemon, each with jepsenTimeout, over jepsenKeys units.
const (
	jepsenTimeout = 3 * time.Second
	// jepsenResume bounds how long after the start and the end of a fault
	// that leaves a majority connected a write must be acknowledged again.
	jepsenResume = 12 * time.Second
	jepsenInit   = "inactive"
)

var (
	jepsenKeys   = []string{"jp-a.service", "jp-b.service", "jp-c.service"}
	jepsenStates = []string{"inactive", "loaded", "launched"}
	// nemeses are the faults, each once per round in an order the seed
	// shuffles.
	nemeses = []string{"partition-leader", "partition-random", "partition-leader-etcd", "partition-ring",
		"partition-bridge", "kill", "pause"}
)

// jepsenConfig is what the environment asks of TestJepsen.
type jepsenConfig struct {
	seeds    []int64
	duration time.Duration // per seed; 0: one round of every nemesis
	clients  int           // per daemon
	nemeses  []string
	out      string // where to keep histories and visualizations, "" for a new temporary directory
}

func readJepsenConfig() (jepsenConfig, error) {
	c := jepsenConfig{seeds: []int64{1}, clients: 2, nemeses: nemeses, out: os.Getenv("SCENARIO_FIGURES")}
	if v := os.Getenv("FLOTILLA_JEPSEN_CLIENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 50 {
			return c, fmt.Errorf("FLOTILLA_JEPSEN_CLIENTS=%s: want the number of clients per daemon, 1 to 50", v)
		}
		c.clients = n
	}
	if v := os.Getenv("FLOTILLA_JEPSEN_SEEDS"); v != "" {
		c.seeds = nil
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
			if err != nil {
				return c, fmt.Errorf("FLOTILLA_JEPSEN_SEEDS=%s: want integers separated by commas, as 1,2,3", v)
			}
			c.seeds = append(c.seeds, n)
		}
	}
	if v := os.Getenv("FLOTILLA_JEPSEN_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return c, fmt.Errorf("FLOTILLA_JEPSEN_DURATION=%s: want a duration such as 2m", v)
		}
		c.duration = d
	}
	if v := os.Getenv("FLOTILLA_JEPSEN_NEMESES"); v != "" {
		c.nemeses = nil
		for f := range strings.SplitSeq(v, ",") {
			f = strings.TrimSpace(f)
			if !slices.Contains(nemeses, f) {
				return c, fmt.Errorf("FLOTILLA_JEPSEN_NEMESES: unknown nemesis %q; known: %s", f, strings.Join(nemeses, ","))
			}
			c.nemeses = append(c.nemeses, f)
		}
	}
	return c, nil
}

// TestJepsen is a Jepsen-style test of the API's reads and writes of units'
// desired state: clients against every daemon, a nemesis of partitions,
// kills and pauses, and a linearizability check of the history with
// porcupine. See the package doc (# Jepsen).
func TestJepsen(t *testing.T) {
	if testing.Short() {
		t.Skip("the Jepsen test runs whole clusters; skipped with -short")
	}
	switch v := os.Getenv("FLOTILLA_JEPSEN"); {
	case v == "0", v == "" && !jepsenByDefault:
		t.Skip("set FLOTILLA_JEPSEN=1 to run it: today's daemons fail it (issue 24); see jepsenByDefault")
	}
	needNamespaces(t)
	cfg, err := readJepsenConfig()
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range cfg.seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runJepsen(t, cfg, seed) })
	}
}

// needNamespaces skips the test, or fails it with CI=true, when this
// process cannot make network namespaces.
func needNamespaces(t *testing.T) {
	if err := canMakeNamespaces(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("scenarios need network namespaces and iptables (root): %v", err)
		}
		t.Skipf("scenarios need network namespaces and iptables (root): %v", err)
	}
}

func runJepsen(t *testing.T, cfg jepsenConfig, seed int64) {
	s := newScenario(t, fmt.Sprintf("jepsen-seed-%d", seed))
	if err := s.startDaemons(daemonsConfig{n: 3, registry: "grpc", embedded: true}); err != nil {
		t.Fatalf("starting daemons: %v", err)
	}
	var b apiv1.Batch
	for _, k := range jepsenKeys {
		b.Units = append(b.Units, apiv1.UnitChange{Name: k, DesiredState: jepsenInit,
			File: "[Unit]\nDescription=jepsen register %n\n\n[Service]\nExecStart=/bin/sleep infinity\n"})
	}
	if err := s.ask(func(c *client.Client) error { _, err := c.Batch(context.Background(), b); return err }); err != nil {
		t.Fatalf("creating the units: %v", err)
	}
	h := &history{start: s.tl.start}
	cl := startClients(h, s.nodes, cfg.clients, seed)
	t.Cleanup(cl.stop) // before the scenario's own cleanup, which runs later
	nem := &nemesis{s: s, h: h, rng: rand.New(rand.NewSource(seed))}
	nem.run(t, cfg)
	cl.stop()
	stopped := h.now()

	if err := finalReads(s, h); err != nil {
		t.Errorf("acknowledged writes do not agree across the daemons and etcd: %v", err)
	}
	ops, evs := h.snapshot()
	t.Logf("seed %d: %s", seed, summarize(ops, nem.faults))
	for i, f := range nem.faults {
		until := stopped
		if i+1 < len(nem.faults) {
			until = nem.faults[i+1].start
		}
		f.measure(h, ops, until)
		t.Logf("  %s", f)
		if f.majority && !f.resumed() {
			t.Errorf("writes did not resume within %s of the start or the end of %s", jepsenResume, f.short())
		}
	}
	dir := ""
	for _, k := range jepsenKeys {
		v := checkKey(ops, k, jepsenInit)
		switch v.result {
		case porcupine.Ok:
			t.Logf("%s: linearizable (%d operations checked)", k, v.ops)
		case porcupine.Unknown:
			t.Errorf("%s: the linearizability check did not finish within %s (%d operations)", k, checkTimeout, v.ops)
		default:
			msg := describeWindow(v, evs)
			var err error
			if dir == "" {
				dir, err = outDir(cfg, seed)
			}
			if err == nil {
				var vis, hist string
				if vis, err = writeVisualization(dir, fmt.Sprintf("seed-%d-%s", seed, k), v, jepsenInit, evs); err == nil {
					hist, err = writeHistory(dir, seed, ops, evs)
				}
				msg += fmt.Sprintf("  porcupine's view of the window: %s\n  the whole history: %s\n", vis, hist)
			}
			if err != nil {
				msg += fmt.Sprintf("  (could not keep the files: %v)\n", err)
			}
			t.Errorf("seed %d: %s", seed, msg)
		}
	}
}

// outDir is where a failing run keeps its files: $SCENARIO_FIGURES, or a
// new directory under the system's temporary one (kept for the reader).
func outDir(cfg jepsenConfig, seed int64) (string, error) {
	if cfg.out != "" {
		return cfg.out, nil
	}
	return os.MkdirTemp("", fmt.Sprintf("flotilla-jepsen-seed-%d-", seed))
}

func writeHistory(dir string, seed int64, ops []*jop, evs []event) (string, error) {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "%8.3fs  NEMESIS %s\n", e.at.Seconds(), e.what)
	}
	for _, o := range ops {
		fmt.Fprintf(&b, "%s\n", o)
	}
	p := filepath.Join(dir, fmt.Sprintf("seed-%d-history.txt", seed))
	return p, os.WriteFile(p, []byte(b.String()), 0o644)
}

// summarize counts the history's operations.
func summarize(ops []*jop, faults []*fault) string {
	var reads, writes, tagged, info, fail int
	for _, o := range ops {
		if o.write {
			writes++
		} else {
			reads++
		}
		switch {
		case o.tagged:
			tagged++
		case o.status == opInfo:
			info++
		case o.status == opFail:
			fail++
		}
	}
	return fmt.Sprintf("%d faults; %d reads, %d writes; %d answers tagged %s (reads set aside), %d indeterminate, %d failed",
		len(faults), reads, writes, tagged, apiv1.EtcdUnreachableHeader, info, fail)
}

// clients are the workers sending reads and writes, a few to each daemon.
type clients struct {
	h        *history
	stopOnce sync.Once
	quit     chan struct{}
	wg       sync.WaitGroup
}

func startClients(h *history, nodes []*proc, perNode int, seed int64) *clients {
	c := &clients{h: h, quit: make(chan struct{})}
	n := len(nodes) * perNode
	for w := range n {
		p := nodes[w%len(nodes)]
		c.wg.Add(1)
		go c.work(w, n, p, rand.New(rand.NewSource(seed*1000+int64(w))))
	}
	return c
}

func (c *clients) stop() {
	c.stopOnce.Do(func() { close(c.quit) })
	c.wg.Wait()
}

// work sends one request at a time to p until stopped: a read or a write of
// a random unit, a random desired state. After an indeterminate answer it
// goes on as a new process, as Jepsen's clients do.
func (c *clients) work(w, n int, p *proc, rng *rand.Rand) {
	defer c.wg.Done()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer hc.CloseIdleConnections()
	process := w
	for {
		select {
		case <-c.quit:
			return
		case <-time.After(time.Duration(10+rng.Intn(40)) * time.Millisecond):
		}
		o := &jop{worker: w, process: process, node: p.name, key: jepsenKeys[rng.Intn(len(jepsenKeys))]}
		if rng.Intn(2) == 0 {
			o.write, o.value = true, jepsenStates[rng.Intn(len(jepsenStates))]
		}
		c.h.invoke(o)
		st, val, tagged, answer := request(hc, p, o)
		c.h.complete(o, st, val, tagged, answer)
		if st == opInfo {
			process += n
		}
	}
}

// request sends o to p and says how it ended: a write certainly failed
// only when refused as a bad request (4xx), when p's port refused the
// connection, or when the answer says nothing was changed; any other
// failure leaves it indeterminate.
func request(hc *http.Client, p *proc, o *jop) (st opStatus, value string, tagged bool, answer string) {
	ctx, cancel := context.WithTimeout(context.Background(), jepsenTimeout)
	defer cancel()
	url := fmt.Sprintf("http://%s:%d/v1/units/%s", p.ip, apiPort, o.key)
	var req *http.Request
	if o.write {
		body, _ := json.Marshal(apiv1.UnitChange{DesiredState: o.value})
		req, _ = http.NewRequestWithContext(ctx, http.MethodPut, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
	} else {
		req, _ = http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	}
	resp, err := hc.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return opFail, "", false, "connection refused"
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return opInfo, "", false, "no answer within " + jepsenTimeout.String()
		}
		return opInfo, "", false, err.Error()
	}
	defer resp.Body.Close()
	tagged = resp.Header.Get(apiv1.EtcdUnreachableHeader) != ""
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return opInfo, "", tagged, fmt.Sprintf("%s, reading the body: %v", resp.Status, err)
	}
	if resp.StatusCode == http.StatusOK {
		var u apiv1.Unit
		if err := json.Unmarshal(raw, &u); err != nil {
			return opInfo, "", tagged, fmt.Sprintf("200 with a body that does not decode: %v", err)
		}
		return opOK, u.DesiredState, tagged, ""
	}
	msg := fmt.Sprintf("%d %s", resp.StatusCode, firstLine(strings.TrimSpace(string(raw))))
	if len(msg) > 160 {
		msg = msg[:160] + "..."
	}
	if !o.write {
		return opFail, "", tagged, msg
	}
	if resp.StatusCode >= 400 && resp.StatusCode < 500 || bytes.Contains(raw, []byte("nothing was changed")) {
		return opFail, "", tagged, msg
	}
	return opInfo, "", tagged, msg
}

// finalReads, once every fault is healed, reads every unit through every
// daemon and from every etcd member (serializable: the member's own copy)
// until all agree and no answer is tagged, within a minute. The round that
// agrees goes into the history as reads, so that the check covers it.
func finalReads(s *scenario, h *history) error {
	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	return waitfor.Poll(60*time.Second, func() error {
		var round []*jop
		var errs []string
		read := func(k, node string, f func(o *jop) (opStatus, string, bool, string)) {
			o := &jop{worker: -1, process: finalProcess, node: node, key: k, call: h.now()}
			o.status, o.value, o.tagged, o.answer = f(o)
			o.ret = h.now()
			round = append(round, o)
			switch {
			case o.status != opOK:
				errs = append(errs, fmt.Sprintf("%s from %s: %s", k, node, o.answer))
			case o.tagged:
				errs = append(errs, fmt.Sprintf("%s from %s: tagged %s", k, node, apiv1.EtcdUnreachableHeader))
			}
		}
		for _, k := range jepsenKeys {
			for _, p := range s.nodes {
				read(k, p.name, func(o *jop) (opStatus, string, bool, string) { return request(hc, p, o) })
			}
			for _, p := range s.nodes {
				read(k, "etcd@"+p.name, func(*jop) (opStatus, string, bool, string) {
					v, err := etcdDesired(p, k)
					if err != nil {
						return opFail, "", false, err.Error()
					}
					return opOK, v, false, ""
				})
			}
		}
		for _, k := range jepsenKeys {
			var vals []string
			seen := map[string]bool{}
			for _, o := range round {
				if o.key == k && o.status == opOK {
					vals = append(vals, o.node+"="+o.value)
					seen[o.value] = true
				}
			}
			if len(seen) > 1 {
				errs = append(errs, fmt.Sprintf("%s: %s", k, strings.Join(vals, " ")))
			}
		}
		if len(errs) > 0 {
			return errors.New(strings.Join(errs, "; "))
		}
		h.add(round)
		return nil
	})
}

// finalProcess is the process of the final reads, one at a time.
const finalProcess = 1 << 20

// etcdDesired reads unit's desired state from p's etcd member alone.
func etcdDesired(p *proc, unit string) (string, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{fmt.Sprintf("http://%s:%d", p.ip, etcdPort)},
		DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return "", err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, registry.Keys{}.Unit(unit), clientv3.WithSerializable())
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 {
		return "", errors.New("no record")
	}
	var r registry.Record
	if err := json.Unmarshal(resp.Kvs[0].Value, &r); err != nil {
		return "", fmt.Errorf("record: %w", err)
	}
	return r.DesiredState, nil
}
