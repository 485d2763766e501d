package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/supervisor"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// previousRelease reads .ci/previous-release: the commit built as the
// release before the code under test (comment lines start with #).
func previousRelease(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, ".ci", "previous-release"))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line != "" && !strings.HasPrefix(line, "#") {
			return line
		}
	}
	t.Fatalf(".ci/previous-release names no commit:\n%s", b)
	return ""
}

// cannotRun skips the test, or fails it under CI (CI=true), which must
// run it.
func cannotRun(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + "; CI must not skip it")
	}
	t.Skip(msg)
}

// previousVersion is the version the previous release's build is stamped
// with, so that machines on it tell from those on the binary under test.
const previousVersion = "0.0.0-previous-release"

// buildPreviousRelease builds the commit .ci/previous-release names, from
// the clone's history (git archive), and returns the binary.
func buildPreviousRelease(t *testing.T) (bin, commit string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		cannotRun(t, "no git to take the previous release from the clone's history")
	}
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		cannotRun(t, "not in a git clone (%v): the previous release is built from its history", err)
	}
	root := strings.TrimSpace(string(out))
	commit = previousRelease(t, root)
	if err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		cannotRun(t, "commit %s of .ci/previous-release is not in this clone (a shallow clone? git fetch --unshallow)", commit)
	}
	src := t.TempDir()
	archive := exec.Command("sh", "-c", `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, "sh", root, commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, out)
	}
	bin = filepath.Join(t.TempDir(), "flotilla-previous")
	// Not -trimpath: the dependencies' compiled packages are then those
	// of the binary under test's build, from the build cache.
	build := exec.Command("go", "build", "-buildvcs=false", "-o", bin,
		"-ldflags", "-X github.com/flotilla/flotilla/internal/version.version="+previousVersion+
			" -X github.com/flotilla/flotilla/internal/version.commit="+commit,
		"./cmd/flotilla")
	build.Dir = src
	begin := time.Now()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the previous release %s: %v\n%s", commit, err, out)
	}
	t.Logf("built the previous release %.12s in %v", commit, time.Since(begin).Round(time.Millisecond))
	return bin, commit
}

// binVersion is what `flotilla version -o json` of bin says.
func binVersion(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("%s version -o json: %v", bin, err)
	}
	var v struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%s version -o json: %v: %q", bin, err, out)
	}
	return v.Version
}

// supervisorOf is the node's supervisor: its pid, the binary it runs, and
// its children (the units' main processes).
func supervisorOf(t *testing.T, nd *node) (pid int, exe string, children []int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(nd.dir, "units", supervisor.PIDFile))
	if err != nil {
		t.Fatalf("%s: %v", nd.name, err)
	}
	pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: supervisor pid %q", nd.name, b)
	}
	exe, _ = os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(s); err == nil && alive(c) {
				children = append(children, c)
			}
		}
	}
	slices.Sort(children)
	return pid, exe, children
}

// apiPoller asks the cluster's API for the unit states every 100ms, of
// each daemon in turn until one answers 200. It records the polls no
// daemon answered at all (no HTTP answer: the API was down), and the
// longest time without a 200: while the leader restarts, followers answer
// 502 until they learn of the next leader.
type apiPoller struct {
	nodes []*node
	stop  chan struct{}
	done  chan struct{}

	mu       sync.Mutex
	polls    int
	silent   []string // when and why, for each poll no daemon answered
	lastGood time.Time
	worstGap time.Duration
	// gapWhys are the answers other than 200 during the current run of
	// polls without one, and worstWhys those of the longest run.
	gapWhys, worstWhys []string
}

func pollAPI(nodes []*node) *apiPoller {
	p := &apiPoller{nodes: nodes, stop: make(chan struct{}), done: make(chan struct{}), lastGood: time.Now()}
	client := &http.Client{Timeout: 2 * time.Second}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
			var whys []string
			answered, ok := false, false
			for _, nd := range p.nodes {
				resp, err := client.Get("http://" + nd.api + "/v1/unit-states")
				if err != nil {
					whys = append(whys, fmt.Sprintf("%s: %v", nd.name, err))
					continue
				}
				resp.Body.Close()
				answered = true
				if resp.StatusCode == http.StatusOK {
					ok = true
					break
				}
				whys = append(whys, fmt.Sprintf("%s: %s", nd.name, resp.Status))
			}
			p.mu.Lock()
			p.polls++
			now := time.Now()
			if ok {
				p.lastGood, p.gapWhys = now, nil
			} else {
				p.gapWhys = append(p.gapWhys, now.Format("15:04:05.000")+" "+strings.Join(whys, "; "))
			}
			if gap := now.Sub(p.lastGood); gap > p.worstGap {
				p.worstGap, p.worstWhys = gap, slices.Clone(p.gapWhys)
			}
			if !answered {
				p.silent = append(p.silent, now.Format("15:04:05.000")+" "+strings.Join(whys, "; "))
			}
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *apiPoller) end() (polls int, silent []string, worstGap time.Duration, whys []string) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.polls, p.silent, p.worstGap, p.worstWhys
}

func machineVersions(nd *node) (map[string]string, string, error) {
	resp, err := http.Get("http://" + nd.api + "/v1/machines")
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("GET /v1/machines: %s", resp.Status)
	}
	var l struct {
		Machines []struct {
			ID      string `json:"id"`
			Leader  bool   `json:"leader"`
			Version string `json:"version"`
		} `json:"machines"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return nil, "", err
	}
	out := map[string]string{}
	leader := ""
	for _, m := range l.Machines {
		out[m.ID] = m.Version
		if m.Leader {
			leader = m.ID
		}
	}
	return out, leader, nil
}

// TestUpgradeRolling upgrades a three-daemon cluster running exec units
// from the previous release (.ci/previous-release, built from the clone's
// history) to the binary under test, one daemon at a time, followers
// first and the leader last: each is stopped and started again on its
// data dir with the new binary. No unit restarts (the process table shows
// the same PIDs, children of the same supervisors), every supervisor
// re-executes itself into the new binary (/proc/PID/exe), the API answers
// throughout, and every machine reports the new version. Then it goes back
// down to the previous release the same way, with the same checks:
// supervisors follow their daemon's binary both ways.
func TestUpgradeRolling(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the previous release and runs a three-daemon cluster")
	}
	prev, commit := buildPreviousRelease(t)
	prevVersion, newVersion := binVersion(t, prev), binVersion(t, flotillaBin)
	if prevVersion == newVersion {
		t.Fatalf("the previous release and the binary under test both say version %q: cannot tell them apart", prevVersion)
	}
	c := newClusterOn(t, 3, prev, nil)
	n1 := c.nodes[0]
	waitfor.Until(t, 60*time.Second, "three machines and a leader", func() error {
		vs, leader, err := machineVersions(n1)
		if err != nil {
			return err
		}
		if len(vs) != 3 || leader == "" {
			return fmt.Errorf("machines %v, leader %q", vs, leader)
		}
		return nil
	})
	dir := t.TempDir()
	var paths []string
	for i := 1; i <= 6; i++ {
		name := fmt.Sprintf("up%d.service", i)
		paths = append(paths, writeUnit(t, dir, name, fmt.Sprintf(sleeper, name, name)))
	}
	mustCLI(t, n1, append([]string{"start"}, paths...)...)
	var before map[string]int // unit: pid
	waitfor.Until(t, 30*time.Second, "six units running", func() error {
		states, err := unitStates(t, n1)
		if err != nil {
			return err
		}
		before = map[string]int{}
		for name, s := range states {
			if s.Active != "active" || s.PID == 0 {
				return fmt.Errorf("%s is %s/%s", name, s.Active, s.Sub)
			}
			before[name] = s.PID
		}
		if len(before) != 6 {
			return fmt.Errorf("%d units", len(before))
		}
		return nil
	})
	sups := map[string]int{}
	kids := map[string][]int{}
	for _, nd := range c.nodes {
		pid, exe, children := supervisorOf(t, nd)
		if exe != prev {
			t.Fatalf("%s's supervisor %d runs %s, want the previous release %s", nd.name, pid, exe, prev)
		}
		sups[nd.name], kids[nd.name] = pid, children
	}
	t.Logf("previous release %.12s (%s) running: units %v, supervisors %v, their children %v", commit, prevVersion, before, sups, kids)

	roll := func(to, version string) {
		t.Helper()
		_, leader, err := machineVersions(n1)
		if err != nil {
			t.Fatal(err)
		}
		order := slices.Clone(c.nodes)
		slices.SortStableFunc(order, func(a, b *node) int { // the leader last
			switch {
			case a.name == leader:
				return 1
			case b.name == leader:
				return -1
			}
			return 0
		})
		poll := pollAPI(c.nodes)
		for _, nd := range order {
			begin := time.Now()
			nd.stop(t)
			nd.bin = to
			nd.start(t)
			waitfor.Until(t, 30*time.Second, nd.name+" back on "+version, func() error {
				vs, _, err := machineVersions(nd)
				if err != nil {
					return err
				}
				if vs[nd.name] != version {
					return fmt.Errorf("it reports version %q", vs[nd.name])
				}
				if pid, exe, _ := supervisorOf(t, nd); exe != to {
					return fmt.Errorf("its supervisor %d runs %s", pid, exe)
				}
				return nil
			})
			t.Logf("%s (leader %v) restarted on %s in %v", nd.name, nd.name == leader, filepath.Base(to), time.Since(begin).Round(time.Millisecond))
		}
		polls, silent, gap, whys := poll.end()
		t.Logf("API polled %d times while rolling to %s; longest time without a 200 %v", polls, version, gap.Round(time.Millisecond))
		if len(silent) > 0 {
			t.Errorf("%d of %d polls of the API found no daemon answering:\n%s", len(silent), polls, strings.Join(silent, "\n"))
		}
		if gap > electionTTL {
			t.Errorf("the API answered no 200 for %v, longer than the election TTL %v; the answers meanwhile:\n%s",
				gap.Round(time.Millisecond), electionTTL, strings.Join(whys, "\n"))
		}
		for _, nd := range c.nodes {
			pid, exe, children := supervisorOf(t, nd)
			if pid != sups[nd.name] || exe != to {
				t.Errorf("%s's supervisor: pid %d running %s, want pid %d running %s", nd.name, pid, exe, sups[nd.name], to)
			}
			if !slices.Equal(children, kids[nd.name]) {
				t.Errorf("%s's supervisor's children %v, want %v unchanged: units restarted", nd.name, children, kids[nd.name])
			}
		}
		waitfor.Until(t, 30*time.Second, "every unit running with its pid, every machine on "+version, func() error {
			states, err := unitStates(t, n1)
			if err != nil {
				return err
			}
			for name, pid := range before {
				if s := states[name]; s.PID != pid || s.Active != "active" || !alive(pid) {
					return fmt.Errorf("%s: %+v, want active with pid %d", name, s, pid)
				}
			}
			vs, _, err := machineVersions(n1)
			if err != nil {
				return err
			}
			for m, v := range vs {
				if v != version {
					return fmt.Errorf("machine %s reports %q", m, v)
				}
			}
			return nil
		})
	}
	roll(flotillaBin, newVersion)
	roll(prev, prevVersion)
}
