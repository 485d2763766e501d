package scenario

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// built lists the capabilities today's flotilla has. A scenario whose
// first directive is "requires CAP..." runs only when every CAP is here, in
// $FLOTILLA_CAPS (comma-separated), or detected in the binary (drain: the
// verb exists), or when FLOTILLA_SCENARIOS=all. Add a name here when the
// behaviour lands, so its scenarios guard it from then on. The names:
//
//	supervisor     units outlive their daemon: SIGTERM, SIGKILL and a
//	               restart on the same data dir leave them running (same PIDs)
//	lost-after     the cut-off policy: Singleton=/LostAfter= honoured by the
//	               leader and by the machine's own fence (even with a frozen
//	               daemon); an agent that reaches the leader but not etcd
//	               keeps its units; the extra copy stopped at once on return
//	etcd-outage    with etcd unreachable the leader keeps its memory and
//	               agents, serves reads saying since when etcd is gone,
//	               refuses writes naming etcd; nothing restarts after
//	durable-moves  a move or drain survives a change of leader; a graceful
//	               stop never overlaps a unit's copies
//	record-limits  a request that would make too large an etcd record gets
//	               400 and leaves the leader's term alone
//	drain          flotilla drain MACHINE
//	member-rejoin  an embedded etcd member cut off from the others rejoins
//	               within seconds of the partition ending, however long it
//	               lasted (etcd's peer streams outlive a partition on stale
//	               TCP connections: internal/daemon/peerstreams.go)
//	doubt          a tenth of the machines (ten at least) silent at once:
//	               the leader places none of their units elsewhere for the
//	               agent TTL, then loses them as LostAfter= says
var built = []string{"supervisor", "lost-after", "etcd-outage", "durable-moves", "record-limits", "drain", "member-rejoin", "deployments", "doubt"}

var (
	flotillaBin string
	scenarioSeq atomic.Int64
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "flotilla-scenario-")
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
	sweepStale()
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestScenarios runs every testdata/*.txt as one scenario, each on a fresh
// cluster in fresh network namespaces. -rewrite rewrites the golden output;
// FLOTILLA_SCENARIOS=all also runs scenarios whose requirements are not
// built; -run TestScenarios/NAME runs one.
func TestScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("scenarios run whole clusters; skipped with -short")
	}
	needNamespaces(t)
	caps := capabilities()
	all := os.Getenv("FLOTILLA_SCENARIOS") == "all"
	dir := "testdata"
	if d := os.Getenv("SCENARIO_TESTDATA"); d != "" {
		dir = d // e.g. a copy to -rewrite, to see what today's binary does
	}
	datadriven.Walk(t, dir, func(t *testing.T, path string) {
		reqs, err := requirements(path)
		if err != nil {
			t.Fatal(err)
		}
		var missing []string
		for _, r := range reqs {
			if !caps[r] {
				missing = append(missing, r)
			}
		}
		if len(missing) > 0 && !all {
			t.Skipf("requires %s, not built (add to `built` in scenario_test.go, FLOTILLA_CAPS=%s, or FLOTILLA_SCENARIOS=all)",
				strings.Join(missing, ", "), strings.Join(missing, ","))
		}
		s := newScenario(t, filepath.Base(path))
		datadriven.RunTest(t, path, s.do)
	})
}

// capabilities returns what the binary under test can do: built, plus
// $FLOTILLA_CAPS, plus what can be detected.
func capabilities() map[string]bool {
	caps := map[string]bool{}
	for _, c := range built {
		caps[c] = true
	}
	for c := range strings.SplitSeq(os.Getenv("FLOTILLA_CAPS"), ",") {
		if c = strings.TrimSpace(c); c != "" {
			caps[c] = true
		}
	}
	if out, err := exec.Command(flotillaBin, "drain", "--help").CombinedOutput(); err == nil && strings.Contains(string(out), "drain") {
		caps["drain"] = true
	}
	return caps
}

// knownCaps are the names "requires" accepts.
var knownCaps = []string{"supervisor", "lost-after", "etcd-outage", "durable-moves", "record-limits", "drain", "member-rejoin", "deployments", "doubt"}

// requirements reads the capabilities a scenario file requires: its
// "requires" directives before its first other directive.
func requirements(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var reqs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || line == "----" {
			continue
		}
		fields := strings.Fields(line)
		if fields[0] != "requires" {
			break
		}
		for _, c := range fields[1:] {
			if !slices.Contains(knownCaps, c) {
				return nil, fmt.Errorf("%s: requires %s: unknown capability; known: %s", path, c, strings.Join(knownCaps, ", "))
			}
			reqs = append(reqs, c)
		}
	}
	sort.Strings(reqs)
	return reqs, sc.Err()
}

// TestScenarioFiles checks, without running anything, that every scenario
// names only known capabilities and unit specs the runner understands.
func TestScenarioFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios in testdata: %v", err)
	}
	for _, f := range files {
		if _, err := requirements(f); err != nil {
			t.Error(err)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if spec, ok := strings.CutPrefix(line, "start "); ok {
				if _, _, err := unitNames(strings.Fields(spec)[0]); err != nil {
					t.Errorf("%s:%d: %v", f, i+1, err)
				}
			}
		}
	}
}
