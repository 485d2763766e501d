package bench

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/engine"
	"github.com/flotilla/flotilla/internal/waitfor"
)

func TestConfigValidate(t *testing.T) {
	ok := Config{Agents: 10, Units: 200, Binary: "/bin/true"}
	if err := ok.validate(); err != nil {
		t.Fatal(err)
	}
	if ok.Engines != 1 || len(ok.Registries) != 1 || ok.Registries[0] != "grpc" || ok.Timeout != 10*time.Minute ||
		ok.AgentsPerProcess != agentsPerProcess(10, runtime.NumCPU()) || ok.StatePath != StatePath {
		t.Errorf("defaults: %+v", ok)
	}
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{Agents: 0, Units: 1}, "--agents 0"},
		{Config{Agents: MaxAgents + 1, Units: 1}, "--agents"},
		{Config{Agents: 1, Units: 0}, "--units 0"},
		{Config{Agents: 1, Units: -5}, "--units -5"},
		{Config{Agents: 1, Units: 1, Registries: []string{"zk"}}, `--registry "zk"`},
		{Config{Agents: 1, Units: 1, Engines: 2}, "--engines 2: want 1 or 3"},
		{Config{Agents: 1, Units: 1, Latency: -time.Millisecond}, "--latency -1ms"},
		{Config{Agents: 1, Units: 1, Latency: time.Minute}, "--latency 1m0s"},
		{Config{Agents: 1, Units: 1, StatePollers: -1}, "--state-pollers -1"},
		{Config{Agents: 1, Units: 1, StatePollers: MaxStatePollers + 1}, "--state-pollers"},
		{Config{Agents: 1, Units: 1, Timeout: -time.Second}, "--timeout"},
		{Config{Agents: 1, Units: 1, AgentsPerProcess: -1}, "--agents-per-process"},
		{Config{Agents: 1, Units: 1, SimStartDelay: -1}, "--sim-start-delay"},
		{Config{Agents: 1, Units: 1, AgentTTL: 8 * time.Second}, "--agent-ttl 8s: want more than 8s"},
		{Config{Agents: 1, Units: 1, EngineEnv: []string{"GOGC"}}, `--engine-env "GOGC": want KEY=VALUE`},
		{Config{Agents: 1, Units: 1, EngineEnv: []string{"=50"}}, `--engine-env "=50"`},
	} {
		err := tt.cfg.validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("validate(%+v) = %v, want an error naming %s", tt.cfg, err, tt.want)
		}
	}
}

// TestProcessEnv: a process started with variables sees them, over the
// bench's own (the engines' --engine-env).
func TestProcessEnv(t *testing.T) {
	t.Setenv("FLOTILLA_BENCH_X", "bench")
	log := filepath.Join(t.TempDir(), "log")
	p, err := startProcess("sh", "/bin/sh", []string{"-c", `echo "$FLOTILLA_BENCH_X $GOMEMLIMIT"`}, log, "FLOTILLA_BENCH_X=engine", "GOMEMLIMIT=1300MiB")
	if err != nil {
		t.Fatal(err)
	}
	<-p.done
	out, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "engine 1300MiB" {
		t.Errorf("the process saw %q, want %q", got, "engine 1300MiB")
	}
}

func TestStatePollers(t *testing.T) {
	body := strings.Repeat("x", 1000)
	var answered, missed atomic.Int64 // requests answered, of /v1/state and of other paths
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/state" {
			missed.Add(1)
			http.NotFound(w, r)
			return
		}
		defer answered.Add(1)
		time.Sleep(time.Millisecond) // an engine takes a while to answer
		w.Header().Set("ETag", `"1.1"`)
		if r.Header.Get("If-None-Match") == `"1.1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Write([]byte(body))
	}))
	defer srv.Close()

	// answers waits for n more answers of /v1/state.
	answers := func(n int64, what string) {
		t.Helper()
		from := answered.Load()
		waitfor.True(t, 10*time.Second, what, func() bool { return answered.Load() >= from+n })
	}
	p := startStatePollers(t.Context(), 3, srv.URL+"/v1/state", false, nil)
	answers(20, "20 answers to the pollers")
	p.allActive()
	answers(10, "10 answers once all were active")
	r := p.stop()
	if r.After == nil || r.After.Requests == 0 || r.After.Requests >= r.Requests {
		t.Errorf("pollers marked all active midway: After = %+v of %d answers; want some, not all", r.After, r.Requests)
	}
	if r.Pollers != 3 || r.Requests < 10 || r.Errors != 0 || r.Bytes != 1000 || r.Error != "" {
		t.Errorf("pollers of a working endpoint: %+v; want 3 pollers, many answers of 1000 bytes, no errors", r)
	}
	if r.P50MS < 1 || r.P99MS < r.P50MS || r.MaxMS < r.P99MS {
		t.Errorf("latencies p50 %v, p99 %v, max %v ms: want 1 ≤ p50 ≤ p99 ≤ max", r.P50MS, r.P99MS, r.MaxMS)
	}

	if r.NotModified != 0 {
		t.Errorf("unconditional pollers got %d 304s", r.NotModified)
	}

	// Conditional pollers get the body once each, then 304s.
	p = startStatePollers(t.Context(), 2, srv.URL+"/v1/state", true, nil)
	answers(10, "10 answers to the conditional pollers")
	r = p.stop()
	if !r.Conditional || r.NotModified != r.Requests-2 || r.Bytes != 1000 {
		t.Errorf("conditional pollers: %+v; want all but the first answer of each 304, the body's size remembered", r)
	}

	p = startStatePollers(t.Context(), 1, srv.URL+"/v1/nothing", false, nil)
	waitfor.True(t, 10*time.Second, "3 requests of the missing endpoint", func() bool { return missed.Load() >= 3 })
	r = p.stop()
	if r.Requests != 0 || r.Errors == 0 || !strings.Contains(r.Error, "404 Not Found: the engine does not serve /v1/nothing") || r.After != nil {
		t.Errorf("pollers of a missing endpoint: %+v; want errors naming the 404, no After", r)
	}
	if again := p.stop(); again != r {
		t.Errorf("stop again = %p, want the same report %p", again, r)
	}
}

func TestProgressNotATerminal(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b)
	p.prefix = "grpc: "
	p.phase("starting %s", "etcd")
	p.status("1/10")
	p.status("2/10") // within statusEvery: held back
	p.status("3/10")
	p.done() // prints the last one held back
	p.phase("stopping")
	want := "grpc: starting etcd\ngrpc: 1/10\ngrpc: 3/10\ngrpc: stopping\n"
	if b.String() != want {
		t.Errorf("progress:\n%q\nwant:\n%q", b.String(), want)
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	err := Run(context.Background(), Config{Agents: 0, Units: 10})
	if err == nil || !strings.Contains(err.Error(), "--agents 0") {
		t.Errorf("Run with --agents 0 = %v, want an error naming --agents", err)
	}
}

// TestElectionTTLIsTheDaemons: the bench cannot import the engine (it is
// served, not used), so it keeps the engines' election TTL as a constant
// of its own, which must be the daemon's default its engines run with.
func TestElectionTTLIsTheDaemons(t *testing.T) {
	if engineElectionTTL != engine.DefaultElectionTTL {
		t.Errorf("engineElectionTTL %v, the daemon's default %v", engineElectionTTL, engine.DefaultElectionTTL)
	}
}
