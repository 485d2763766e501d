package health

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
)

func TestTracker(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	type obs struct {
		pass bool
		sec  int
		want string
	}
	P := func(sec int, want string) obs { return obs{true, sec, want} }
	F := func(sec int, want string) obs { return obs{false, sec, want} }
	tests := []struct {
		name           string
		healthyAfter   time.Duration
		unhealthyAfter int
		runs           []obs
	}{
		{"first pass is healthy when HealthyAfter is 0", 0, 3,
			[]obs{P(0, Healthy), P(10, Healthy)}},
		{"failures below UnhealthyAfter stay unknown", 0, 3,
			[]obs{F(0, Unknown), F(10, Unknown), F(20, Unhealthy)}},
		{"a healthy unit bears failures below UnhealthyAfter", 0, 3,
			[]obs{P(0, Healthy), F(10, Healthy), F(20, Healthy), P(30, Healthy), F(40, Healthy), F(50, Healthy), F(60, Unhealthy)}},
		{"a pass resets the failures in a row", 0, 2,
			[]obs{F(0, Unknown), P(10, Healthy), F(20, Healthy), P(30, Healthy), F(40, Healthy), F(50, Unhealthy)}},
		{"passes must last HealthyAfter", 30 * time.Second, 3,
			[]obs{P(0, Unknown), P(10, Unknown), P(20, Unknown), P(30, Healthy)}},
		{"a failure restarts the HealthyAfter streak", 30 * time.Second, 3,
			[]obs{P(0, Unknown), P(20, Unknown), F(25, Unknown), P(30, Unknown), P(50, Unknown), P(60, Healthy)}},
		{"back to healthy only after HealthyAfter of passes", 15 * time.Second, 1,
			[]obs{P(0, Unknown), P(15, Healthy), F(20, Unhealthy), P(30, Unhealthy), P(40, Unhealthy), P(45, Healthy)}},
		{"UnhealthyAfter=1 turns at the first failure", 0, 1,
			[]obs{P(0, Healthy), F(10, Unhealthy), P(20, Healthy)}},
		// StartPeriod= ends at 30 s: failures before do not count until a
		// run passes; from then, or once it is over, they do.
		{"start period: failures in it do not count, after it they do", 0, 3,
			[]obs{F(0, Unknown), F(10, Unknown), F(29, Unknown), F(30, Unknown), F(40, Unknown), F(50, Unhealthy)}},
		{"start period: a pass in it ends it", 0, 3,
			[]obs{F(0, Unknown), P(5, Healthy), F(10, Healthy), F(15, Healthy), F(20, Unhealthy)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker(tt.healthyAfter, tt.unhealthyAfter)
			if strings.HasPrefix(tt.name, "start period") { // the cases below
				tr.StartPeriod(at(30))
			}
			if tr.State() != Unknown {
				t.Fatalf("new tracker: %s, want %s", tr.State(), Unknown)
			}
			prev := Unknown
			for i, o := range tt.runs {
				got, changed := tr.Observe(o.pass, at(o.sec))
				if got != o.want || changed != (got != prev) {
					t.Fatalf("run %d (pass=%v at %ds): %s changed=%v, want %s changed=%v", i, o.pass, o.sec, got, changed, o.want, o.want != prev)
				}
				prev = got
			}
		})
	}
}

func run(t *testing.T, p Probe, timeout time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return p.Run(ctx)
}

func TestExecProbe(t *testing.T) {
	dir := t.TempDir()
	flag := filepath.Join(dir, "flag")
	test := Exec(unit.Command{Argv: []string{"/usr/bin/test", "-f", flag}}, nil, nil)
	if err := run(t, test, 5*time.Second); err == nil {
		t.Fatal("test -f of a missing file passed")
	}
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(t, test, 5*time.Second); err != nil {
		t.Fatalf("test -f of an existing file: %v", err)
	}
	out := Exec(unit.Command{Argv: []string{"/bin/sh", "-c", "echo broken pipe here; exit 3"}}, nil, nil)
	if err := run(t, out, 5*time.Second); err == nil || !strings.Contains(err.Error(), "broken pipe here") {
		t.Fatalf("failing command: %v, want its exit and output", err)
	}
	missing := Exec(unit.Command{Argv: []string{filepath.Join(dir, "nope")}}, nil, nil)
	if err := run(t, missing, 5*time.Second); err == nil {
		t.Fatal("a missing program passed")
	}
}

// TestExecProbeKilledAtTimeout: a command that outlives the timeout fails,
// and its whole process group (a shell's child too) is gone.
func TestExecProbeKilledAtTimeout(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	slow := Exec(unit.Command{Argv: []string{"/bin/sh", "-c", "sleep 60 & echo $! > " + pidFile + "; wait"}}, nil, nil)
	start := time.Now()
	err := RunAll(context.Background(), []Probe{slow}, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "killed: Timeout= passed") {
		t.Fatalf("slow command: %v, want killed at Timeout=", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the probe returned %v after its timeout of 300ms", took)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	waitfor.True(t, 5*time.Second, "the shell's child sleep is killed", func() bool {
		// Killed and reaped by init, or a zombie awaiting it.
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		return err != nil || strings.Contains(string(b), ") Z ")
	})
}

func TestHTTPProbe(t *testing.T) {
	var mu sync.Mutex
	code := http.StatusOK
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path == "/old" { // a redirect is followed
			http.Redirect(w, r, "/health?deep=1", http.StatusFound)
			return
		}
		if r.UserAgent() != "flotilla-health-check" || r.Host != strings.TrimPrefix(srv.URL, "http://") {
			http.Error(w, "who is asking?", http.StatusBadRequest)
			return
		}
		if r.URL.Path != "/health" || r.URL.RawQuery != "deep=1" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(code)
	}))
	defer srv.Close()
	p, err := HTTP(srv.URL + "/health?deep=1")
	if err != nil {
		t.Fatal(err)
	}
	if err := run(t, p, 5*time.Second); err != nil {
		t.Fatalf("200: %v", err)
	}
	old, err := HTTP(srv.URL + "/old")
	if err != nil {
		t.Fatal(err)
	}
	if err := run(t, old, 5*time.Second); err != nil {
		t.Fatalf("a redirect to 200: %v", err)
	}
	mu.Lock()
	code = http.StatusServiceUnavailable
	mu.Unlock()
	if err := run(t, p, 5*time.Second); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("503: %v, want a failure naming it", err)
	}
	srv.Close()
	if err := run(t, p, 5*time.Second); err == nil {
		t.Fatal("a closed server passed")
	}

	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer hang.Close()
	p, err = HTTP(hang.URL)
	if err != nil {
		t.Fatal(err)
	}
	if err := run(t, p, 200*time.Millisecond); err == nil {
		t.Fatal("a server that does not answer passed")
	}
}

func TestHTTPProbeRefusesBadURLs(t *testing.T) {
	for _, u := range []string{"ftp://x/", "http://", "http:///path", "http://user:pw@host/", "http://host:port/", "://x"} {
		if _, err := HTTP(u); err == nil || !strings.Contains(err.Error(), "URL") {
			t.Errorf("HTTP(%q): %v, want an error naming the URL", u, err)
		}
	}
}

func TestTCPProbe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	p := TCP(addr)
	if err := run(t, p, 5*time.Second); err != nil {
		ln.Close()
		t.Fatalf("listening: %v", err)
	}
	ln.Close()
	if err := run(t, p, 5*time.Second); err == nil {
		t.Fatal("a closed port passed")
	}
}

// TestRunner: a runner reports healthy, then unhealthy after UnhealthyAfter
// failures, then healthy again, and nothing after Stop.
func TestRunner(t *testing.T) {
	flag := filepath.Join(t.TempDir(), "ok")
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c := &unit.Check{Exec: []unit.Command{{Argv: []string{"/usr/bin/test", "-f", flag}}},
		Interval: 20 * time.Millisecond, Timeout: 10 * time.Second, UnhealthyAfter: 3, OnUnhealthy: "none"}
	probes, err := Probes(c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var states []string
	var reasons []error
	r := Start(c, probes, nil, false, func(state string, reason error) {
		mu.Lock()
		states = append(states, state)
		reasons = append(reasons, reason)
		mu.Unlock()
	})
	seen := func(want ...string) func() error {
		return func() error {
			mu.Lock()
			defer mu.Unlock()
			if strings.Join(states, " ") != strings.Join(want, " ") {
				return errors.New("reported " + strings.Join(states, " "))
			}
			return nil
		}
	}
	waitfor.Until(t, 10*time.Second, "healthy", seen(Healthy))
	os.Remove(flag)
	waitfor.Until(t, 10*time.Second, "unhealthy", seen(Healthy, Unhealthy))
	mu.Lock()
	var pe *ProbeError
	if !errors.As(reasons[1], &pe) || !strings.Contains(pe.Probe, "/usr/bin/test -f") {
		t.Errorf("reason of unhealthy: %v, want the probe named", reasons[1])
	}
	mu.Unlock()
	os.WriteFile(flag, nil, 0o644)
	waitfor.Until(t, 10*time.Second, "healthy again", seen(Healthy, Unhealthy, Healthy))
	// Stop returns once the loop has ended: the runner's goroutine is gone
	// (its done channel closed), so report cannot be called again.
	r.Stop()
	select {
	case <-r.done:
	default:
		t.Fatal("Stop returned before the runner's goroutine ended")
	}
}

// TestRunnerStartPeriod: a unit whose checks fail while it comes up is not
// unhealthy within StartPeriod= (with UnhealthyAfter=1 it would be at the
// first run), turns healthy at its first pass, and unhealthy at the first
// failure after. Resumed, a unit still unknown keeps what is left of its
// period, counted from when it became active.
func TestRunnerStartPeriod(t *testing.T) {
	flag := filepath.Join(t.TempDir(), "ok")
	c := &unit.Check{Exec: []unit.Command{{Argv: []string{"/usr/bin/test", "-f", flag}}},
		Interval: 20 * time.Millisecond, Timeout: 10 * time.Second, UnhealthyAfter: 1, StartPeriod: time.Minute, OnUnhealthy: "none"}
	probes, err := Probes(c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var states []string
	record := func(state string, _ error) {
		mu.Lock()
		states = append(states, state)
		mu.Unlock()
	}
	reported := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(states, " ")
	}
	r := Start(c, probes, nil, false, record)
	time.Sleep(300 * time.Millisecond) // about 15 failed runs
	if got := reported(); got != "" {
		t.Fatalf("reported %q within the start period, want nothing", got)
	}
	os.WriteFile(flag, nil, 0o644)
	waitfor.True(t, 10*time.Second, "healthy", func() bool { return reported() == Healthy })
	os.Remove(flag)
	waitfor.True(t, 10*time.Second, "unhealthy", func() bool { return reported() == Healthy+" "+Unhealthy })
	r.Stop()

	// Resumed still unknown: within the period (active 10 s ago) failures
	// do not count; past it (active 2 minutes ago) the first one does.
	mu.Lock()
	states = nil
	mu.Unlock()
	r = Resume(c, probes, nil, Unknown, time.Now().Add(-10*time.Second), record)
	time.Sleep(300 * time.Millisecond)
	r.Stop()
	if got := reported(); got != "" {
		t.Fatalf("resumed within the start period: reported %q, want nothing", got)
	}
	r = Resume(c, probes, nil, Unknown, time.Now().Add(-2*time.Minute), record)
	defer r.Stop()
	waitfor.True(t, 10*time.Second, "unhealthy once past the period", func() bool { return reported() == Unhealthy })
}

// TestRunnerAfterRestart: a runner of a unit restarted for being unhealthy
// starts unhealthy: failures report nothing (no second turn, so no second
// restart), and its first pass reports healthy.
func TestRunnerAfterRestart(t *testing.T) {
	dir := t.TempDir()
	flag, runs := filepath.Join(dir, "ok"), filepath.Join(dir, "runs")
	c := &unit.Check{Exec: []unit.Command{{Argv: []string{"/bin/sh", "-c", "echo run >> " + runs + "; test -f " + flag}}},
		Interval: 20 * time.Millisecond, Timeout: 10 * time.Second, UnhealthyAfter: 2, OnUnhealthy: "restart"}
	probes, err := Probes(c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var states []string
	r := Start(c, probes, nil, true, func(state string, _ error) {
		mu.Lock()
		states = append(states, state)
		mu.Unlock()
	})
	defer r.Stop()
	count := func() int { b, _ := os.ReadFile(runs); return strings.Count(string(b), "run\n") }
	waitfor.True(t, 10*time.Second, "5 failed runs", func() bool { return count() >= 5 })
	mu.Lock()
	if len(states) != 0 {
		t.Fatalf("reported %v while failing after a restart, want nothing (it is unhealthy already)", states)
	}
	mu.Unlock()
	os.WriteFile(flag, nil, 0o644)
	waitfor.True(t, 10*time.Second, "healthy", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(states, " ") == Healthy
	})
}

// TestRunnerSpreads: runners started together run their checks at once,
// then each a random part of Interval later, on the grid of slotOf, then
// every Interval: the runs of units started together do not stay
// together.
func TestRunnerSpreads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 10 * time.Second
		const n = 20
		t0 := time.Now()
		var mu sync.Mutex
		runs := make([][]time.Duration, n)
		var runners []*Runner
		for i := range n {
			p := Probe{Name: "record", run: func(context.Context) error {
				mu.Lock()
				runs[i] = append(runs[i], time.Since(t0))
				mu.Unlock()
				return nil
			}}
			runners = append(runners, Start(&unit.Check{Interval: interval, Timeout: time.Second, UnhealthyAfter: 1}, []Probe{p}, nil, false, func(string, error) {}))
		}
		time.Sleep(4*interval - time.Millisecond) // virtual time
		for _, r := range runners {
			r.Stop()
		}
		seconds := map[time.Duration]bool{}
		for i, r := range runs {
			ok := len(r) >= 4 && r[0] == 0 && r[1] > 0 && r[1] <= interval
			for j := 2; ok && j < len(r); j++ {
				ok = r[j]-r[j-1] == interval
			}
			if !ok {
				t.Fatalf("runner %d ran at %v, want at once, within an interval, then every %v", i, r, interval)
			}
			seconds[r[1]] = true
			if at := t0.Add(r[1]); !at.Equal(at.Truncate(slotOf(interval))) {
				t.Errorf("runner %d's second run at %v is not on the grid of %v", i, at, slotOf(interval))
			}
		}
		if len(seconds) < n/2 {
			t.Errorf("the second runs of %d runners came at %d distinct times, want them spread", n, len(seconds))
		}
	})
}
