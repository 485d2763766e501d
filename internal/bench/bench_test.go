package bench_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/bench"
)

var (
	buildOnce   sync.Once
	binDir      string
	flotillaBin string
	buildErr    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// buildFlotilla builds the flotilla binary once, into a directory of its
// own, so that its path names the processes started from it.
func buildFlotilla(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "flotilla-bench-test-"); buildErr != nil {
			return
		}
		flotillaBin = filepath.Join(binDir, "flotilla")
		out, err := exec.Command("go", "build", "-o", flotillaBin, "github.com/flotilla/flotilla/cmd/flotilla").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("building flotilla: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return flotillaBin
}

// processesOf lists the live processes running bin.
func processesOf(bin string) []string {
	var found []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmdline, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !bytes.HasPrefix(cmdline, []byte(bin+"\x00")) {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join(d, "stat")); err == nil {
			if i := bytes.LastIndexByte(stat, ')'); i > 0 && len(stat) > i+2 && stat[i+2] == 'Z' {
				continue // a zombie: dead, waiting to be reaped
			}
		}
		found = append(found, filepath.Base(d)+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
	return found
}

// checkCleanedUp fails the test if a process of bin or a file in tmp is left.
func checkCleanedUp(t *testing.T, bin, tmp string) {
	t.Helper()
	if ps := processesOf(bin); len(ps) > 0 {
		t.Errorf("processes left running:\n%s", strings.Join(ps, "\n"))
		for _, p := range ps {
			pid, _, _ := strings.Cut(p, ":")
			if n, err := strconv.Atoi(pid); err == nil {
				syscall.Kill(n, syscall.SIGKILL)
			}
		}
	}
	left, _ := os.ReadDir(tmp)
	for _, e := range left {
		t.Errorf("left in the temporary directory: %s", e.Name())
	}
}

// TestBench runs a small benchmark in both registry modes through the
// real binary and checks that every unit became active, that the reports
// are complete, and that nothing is left behind.
func TestBench(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of processes twice")
	}
	lines := runBench(t, "--agents", "10", "--units", "200", "--registry", "both",
		"--json", "--state-pollers", "2", "--timeout", "60s", "--stop")
	for i, reg := range []string{"grpc", "etcd"} {
		var raw map[string]json.RawMessage
		if err := json.Unmarshal([]byte(lines[i]), &raw); err != nil {
			t.Fatalf("line %d is not a JSON object: %v\n%s", i+1, err, lines[i])
		}
		for _, k := range []string{"registry", "agents", "units", "all_active", "seconds_to_all_active",
			"start_latency_seconds", "histogram", "etcd_requests", "engine_cpu_seconds", "agent_cpu_seconds",
			"engine_peak_rss_bytes", "state"} {
			if _, ok := raw[k]; !ok {
				t.Errorf("%s report has no %q: %s", reg, k, lines[i])
			}
		}
		var r bench.Report
		if err := json.Unmarshal([]byte(lines[i]), &r); err != nil {
			t.Fatalf("%s report: %v", reg, err)
		}
		if r.Registry != reg || r.Agents != 10 || r.Units != 200 || r.Engines != 1 || r.AgentProcesses != 1 {
			t.Errorf("%s report describes %s, %d agents, %d units, %d engines, %d agent processes; want %s, 10, 200, 1, 1",
				reg, r.Registry, r.Agents, r.Units, r.Engines, r.AgentProcesses, reg)
		}
		if !r.AllActive || r.Active != 200 || r.SecondsToAllActive == nil || *r.SecondsToAllActive <= 0 {
			t.Errorf("%s: all_active %v, active %d, seconds_to_all_active %v; want every unit active", reg, r.AllActive, r.Active, r.SecondsToAllActive)
		}
		p := r.StartLatency
		if !(0 < p.P50 && p.P50 <= p.P90 && p.P90 <= p.P99 && p.P99 <= p.Max) || r.SecondsToAllActive != nil && p.Max != *r.SecondsToAllActive {
			t.Errorf("%s: start latency %+v; want 0 < p50 ≤ p90 ≤ p99 ≤ max = seconds_to_all_active", reg, p)
		}
		total := 0
		for _, b := range r.Histogram {
			total += b.Count
			if b.From > b.To {
				t.Errorf("%s: histogram bucket %+v runs backwards", reg, b)
			}
		}
		if len(r.Histogram) == 0 || total != 200 {
			t.Errorf("%s: histogram %+v holds %d units, want 200", reg, r.Histogram, total)
		}
		if r.EtcdRequests.Txn == 0 {
			t.Errorf("%s: etcd_requests %+v: no transaction, but the units were written", reg, r.EtcdRequests)
		}
		if r.EngineCPUSeconds <= 0 || r.EnginePeakRSSBytes <= 0 || r.AgentPeakRSSBytes <= 0 || r.EtcdPeakRSSBytes <= 0 {
			t.Errorf("%s: engine CPU %v s, peak RSS engine %d, agents %d, etcd %d: want all measured",
				reg, r.EngineCPUSeconds, r.EnginePeakRSSBytes, r.AgentPeakRSSBytes, r.EtcdPeakRSSBytes)
		}
		if s := r.State; s == nil || s.Pollers != 2 || s.Requests == 0 || s.Errors != 0 || s.Bytes == 0 || s.P99MS < s.P50MS ||
			s.After == nil || s.After.Requests == 0 {
			t.Errorf("%s: state %+v; want 2 pollers with answers during and after the run, and no errors", reg, s)
		}
		if s := r.Stop; s == nil || s.Error != "" || !s.AllStopped || s.SecondsToAllStopped == nil || *s.SecondsToAllStopped <= 0 ||
			s.RequestSeconds <= 0 || s.StillActive != 0 {
			t.Errorf("%s: stop %+v; want the stop request answered and every unit stopped", reg, s)
		}
		if reg == "etcd" && (r.VsGRPC == nil || r.VsGRPC.SecondsToAllActive <= 0) {
			t.Errorf("etcd report's vs_grpc = %+v, want the ratios to the grpc run", r.VsGRPC)
		}
	}
}

// TestBenchInterrupted interrupts a run while its cluster is up and checks
// that every process and directory it made is gone.
func TestBenchInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of processes")
	}
	bin := buildFlotilla(t)
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "bench", "--agents", "20", "--units", "100", "--sim-start-delay", "1h")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var progress strings.Builder
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		progress.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "the start request was answered") {
			break
		}
	}
	if len(processesOf(bin)) < 4 {
		t.Errorf("while running: processes %v, want the bench, etcd, an engine and agents", processesOf(bin))
	}
	cmd.Process.Signal(os.Interrupt)
	for sc.Scan() {
		progress.WriteString(sc.Text() + "\n")
	}
	err = cmd.Wait()
	t.Logf("progress (stderr):\n%s", progress.String())
	if err == nil {
		t.Error("an interrupted bench exited with status 0")
	}
	if !strings.Contains(progress.String(), "interrupted") {
		t.Error("the bench did not say it was interrupted")
	}
	checkCleanedUp(t, bin, tmp)
}

// TestBenchTLS runs a small benchmark with --tls in both registry modes:
// every connection is then mutual TLS (the bench speaks https to the API
// and etcd, the agents present their own certificates to the leader and
// to etcd) and the engines require a token (--acl: the bench bootstraps
// one), so a unit becomes active only if all of them work.
func TestBenchTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of processes twice")
	}
	lines := runBench(t, "--tls", "--agents", "5", "--units", "100", "--registry", "both",
		"--json", "--state-pollers", "1", "--timeout", "60s")
	for i, reg := range []string{"grpc", "etcd"} {
		var r bench.Report
		if err := json.Unmarshal([]byte(lines[i]), &r); err != nil {
			t.Fatalf("%s report: %v", reg, err)
		}
		if !r.TLS || !r.ACL || r.Registry != reg || !r.AllActive || r.Active != 100 {
			t.Errorf("%s report: tls %v, acl %v, registry %s, all_active %v, active %d; want TLS, ACL and every unit active", reg, r.TLS, r.ACL, r.Registry, r.AllActive, r.Active)
		}
		if s := r.State; s == nil || s.Requests == 0 || s.Errors != 0 {
			t.Errorf("%s: state %+v; want the poller's https requests answered", reg, s)
		}
	}
}

// TestBenchScaling runs --scaling with two small sizes through the real
// binary: a fresh cluster for each, on an agent per 100 units, each
// report carrying the shape the bench chose, then the scaling line with
// each rate as a share of the first.
func TestBenchScaling(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of processes twice")
	}
	// Each size up to 100,000 units runs three times: six reports, then
	// the scaling line.
	lines := runBenchLines(t, 7, "--scaling", "--scaling-units", "200,400", "--json", "--timeout", "60s")
	rates := map[int][]float64{}
	for i := range 6 {
		units := []int{200, 400}[i/3]
		var r bench.Report
		if err := json.Unmarshal([]byte(lines[i]), &r); err != nil {
			t.Fatalf("line %d: %v\n%s", i+1, err, lines[i])
		}
		if r.Units != units || r.Agents != units/bench.UnitsPerAgent || !r.AllActive || r.UnitsPerSecond <= 0 {
			t.Errorf("size %d: report of %d units on %d agents, all active %v, %v units/s", units, r.Units, r.Agents, r.AllActive, r.UnitsPerSecond)
		}
		if r.AgentsPerProcess < 1 || r.AgentGOMAXPROCS < 1 || strings.Join(r.ShapeChosen, ",") != "agents_per_process,agent_gomaxprocs" {
			t.Errorf("size %d: shape %d agents per process, GOMAXPROCS %d, chosen %v; want both chosen", units, r.AgentsPerProcess, r.AgentGOMAXPROCS, r.ShapeChosen)
		}
		rates[units] = append(rates[units], r.UnitsPerSecond)
	}
	var sr bench.ScalingReport
	if err := json.Unmarshal([]byte(lines[6]), &sr); err != nil {
		t.Fatalf("scaling line: %v\n%s", err, lines[6])
	}
	if sr.Registry != "grpc" || len(sr.Steps) != 2 {
		t.Fatalf("scaling line: %s", lines[6])
	}
	median := func(xs []float64) float64 { return slices.Sorted(slices.Values(xs))[len(xs)/2] }
	for i, s := range sr.Steps {
		units := []int{200, 400}[i]
		want := median(rates[units]) / median(rates[200])
		if s.Units != units || !s.AllActive || !slices.Equal(s.Rates, rates[units]) || s.UnitsPerSecond != median(rates[units]) ||
			math.Abs(s.Share-want) > 1e-9 || s.AgentsPerProcess < 1 {
			t.Errorf("scaling step %d: %+v; want the rates %v, their median, share %v", i, s, rates[units], want)
		}
	}
}

// runBench runs flotilla bench with args and two registry modes (--json)
// and returns its two report lines, having checked it left nothing behind.
func runBench(t *testing.T, args ...string) []string {
	t.Helper()
	return runBenchLines(t, 2, args...)
}

// runBenchLines runs flotilla bench with args (--json) and returns its n
// lines of output, having checked it left nothing behind.
func runBenchLines(t *testing.T, n int, args ...string) []string {
	t.Helper()
	bin := buildFlotilla(t)
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"bench"}, args...)...)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("progress (stderr):\n%s", stderr.String())
	if err != nil {
		t.Fatalf("flotilla bench %s: %v\nstdout:\n%s", strings.Join(args, " "), err, stdout.String())
	}
	checkCleanedUp(t, bin, tmp)
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != n {
		t.Fatalf("stdout has %d lines, want %d JSON objects:\n%s", len(lines), n, stdout.String())
	}
	return lines
}

// TestBenchDriver runs `flotilla bench driver` with the exec driver and a
// few units through the real binary: every unit starts and stops, the
// report is complete, and nothing is left behind (the daemon, the
// supervisor it started, the units' processes, the directory).
func TestBenchDriver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a daemon and its units")
	}
	bin := buildFlotilla(t)
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "bench", "driver", "--driver", "exec", "--units", "30", "--baseline", "exec", "--json", "--timeout", "60s")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("progress (stderr):\n%s", stderr.String())
	if err != nil {
		t.Fatalf("flotilla bench driver: %v\nstdout:\n%s", err, stdout.String())
	}
	checkCleanedUp(t, bin, tmp)
	var r bench.DriverReport
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("report: %v\n%s", err, stdout.String())
	}
	if r.Driver != "exec" || r.Units != 30 || r.Active != 30 || r.Stopped != 30 || r.Failed != 0 || r.Error != "" {
		t.Errorf("report %+v, want 30 exec units started and stopped", r)
	}
	if r.StartSeconds <= 0 || r.StopSeconds <= 0 || r.DaemonStartCPUSeconds <= 0 || r.SupervisorStartCPUSeconds <= 0 {
		t.Errorf("report %+v, want start and stop times and CPU times measured", r)
	}
	if b := r.Baseline; b == nil || b.Kind != "exec" || b.StartSeconds <= 0 {
		t.Errorf("baseline %+v, want the plain exec loop timed", b)
	}
}

// TestBenchDriverRefused: a driver the daemon does not run ends the bench
// with the daemon's own reason, and bad flags are named.
func TestBenchDriverRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a daemon")
	}
	bin := buildFlotilla(t)
	tmp := t.TempDir()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--driver", "no-such-driver", "--units", "5"}, `--driver "no-such-driver"`},
		{[]string{"--baseline", "command"}, "--baseline command needs --baseline-start and --baseline-stop"},
		{[]string{"--baseline", "loop"}, `--baseline "loop": want exec or command`},
		{[]string{"--units", "-1"}, "--units -1: want 1 to"},
	} {
		cmd := exec.CommandContext(t.Context(), bin, append([]string{"bench", "driver"}, tt.args...)...)
		cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tt.want) {
			t.Errorf("bench driver %v: %v, output:\n%s\nwant an error with %q", tt.args, err, out, tt.want)
		}
	}
	checkCleanedUp(t, bin, tmp)
}

// TestBenchFailover kills the leading engine of a small cluster once every
// unit is active and checks what the report says of the new leader.
func TestBenchFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of processes")
	}
	lines := runBench(t, "--agents", "5", "--units", "100", "--engines", "3", "--failover", "--registry", "both", "--json", "--timeout", "60s")
	for i, reg := range []string{"grpc", "etcd"} {
		var r bench.Report
		if err := json.Unmarshal([]byte(lines[i]), &r); err != nil {
			t.Fatalf("%s report: %v\n%s", reg, err, lines[i])
		}
		f := r.Failover
		if f == nil {
			t.Fatalf("the %s report has no failover: %s", reg, lines[i])
		}
		if !f.Completed || f.Error != "" || f.LeaderSeconds == nil || f.AgentsSeconds == nil || f.ActiveSeconds == nil ||
			!(0 < *f.LeaderSeconds && *f.LeaderSeconds <= *f.AgentsSeconds && *f.AgentsSeconds <= *f.ActiveSeconds) {
			t.Errorf("%s: failover %+v: want a new leader, then every agent back, then every unit active", reg, f)
		}
		if f.Restarted != 0 {
			t.Errorf("%s: %d units were started again after the leader was killed; a failover restarts none", reg, f.Restarted)
		}
		if f.Killed == "" {
			t.Errorf("%s: failover %+v names no engine killed", reg, f)
		}
	}
}
