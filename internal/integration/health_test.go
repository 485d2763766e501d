package integration

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/waitfor"
)

// healthServerEnv has the test binary serve HTTP as a unit (TestMain): GET
// answers 200, or 503 while the file named by healthFailEnv holds the
// server's own PID. On start the server appends its PID to the file named
// by healthStartsEnv, so the test counts its starts.
const (
	healthServerEnv = "FLOTILLA_IT_HEALTH_ADDR"
	healthFailEnv   = "FLOTILLA_IT_HEALTH_FAIL"
	healthStartsEnv = "FLOTILLA_IT_HEALTH_STARTS"
)

func serveHealth(addr string) {
	pid := strconv.Itoa(os.Getpid())
	if f, err := os.OpenFile(os.Getenv(healthStartsEnv), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
		fmt.Fprintln(f, pid)
		f.Close()
	}
	fail := os.Getenv(healthFailEnv)
	err := http.ListenAndServe(addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b, _ := os.ReadFile(fail); strings.TrimSpace(string(b)) == pid {
			http.Error(w, "told to fail", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	}))
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

// TestHealthChecks: units of the exec driver with [X-Check] show healthy in
// list-units once their HTTP check (and, for one, an Exec= check that needs
// the unit's Environment= and WorkingDirectory=) passes; when the unit's
// server starts answering 503 it turns unhealthy after UnhealthyAfter runs
// of Interval, and stays so with the same process when OnUnhealthy=none;
// with OnUnhealthy=restart its process is replaced exactly once (the
// process table and the server's own count of starts say so) and it is
// healthy again.
func TestHealthChecks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a daemon")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	n1 := newLeadingNode(t, nil)

	const interval, unhealthyAfter = time.Second, 3
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "here"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	type server struct{ name, addr, fail, starts string }
	unitFile := func(s server, onUnhealthy, extra string) string {
		return fmt.Sprintf(`[Service]
ExecStart=%s
Environment=%s=%s %s=%s %s=%s MARK=ok
WorkingDirectory=%s
TimeoutStopSec=5
[X-Check]
HTTP=http://%s/health
%sInterval=%v
Timeout=500ms
UnhealthyAfter=%d
OnUnhealthy=%s
`, self, healthServerEnv, s.addr, healthFailEnv, s.fail, healthStartsEnv, s.starts, dir, s.addr, extra, interval, unhealthyAfter, onUnhealthy)
	}
	newServer := func(name string) server {
		return server{name: name, addr: freeAddr(t), fail: filepath.Join(dir, name+".fail"), starts: filepath.Join(dir, name+".starts")}
	}
	watched, restarted := newServer("watched.service"), newServer("restarted.service")
	mustCLI(t, n1, "start",
		// The Exec= check passes only with the unit's environment and
		// working directory.
		writeUnit(t, dir, watched.name, unitFile(watched, "none", `Exec=/bin/sh -c 'test "$MARK" = ok && test -f here'`+"\n")),
		writeUnit(t, dir, restarted.name, unitFile(restarted, "restart", "")))

	health := func(name string) (string, error) {
		out, err := cli(t, n1, "list-units", "--no-legend", "--fields", "unit,active,health")
		if err != nil {
			return "", err
		}
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] == name {
				return f[1] + "/" + f[2], nil
			}
		}
		return "", fmt.Errorf("%s not in list-units:\n%s", name, out)
	}
	waitHealth := func(name, want string, within time.Duration) {
		t.Helper()
		waitfor.Until(t, within, name+" "+want, func() error {
			got, err := health(name)
			if err == nil && got != want {
				err = fmt.Errorf("list-units shows %s %s", name, got)
			}
			return err
		})
	}
	starts := func(s server) []int {
		b, _ := os.ReadFile(s.starts)
		var pids []int
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return pids
	}
	waitHealth(watched.name, "active/healthy", 60*time.Second)
	waitHealth(restarted.name, "active/healthy", 60*time.Second)
	// On a busy host a unit's first process can take longer to answer
	// than its checks allow (UnhealthyAfter runs of Interval: 3 s), and
	// OnUnhealthy=restart then replaces it before it was ever healthy, as
	// it should: what follows counts from the processes running now.
	wPID, rPID := starts(watched), starts(restarted)
	if len(wPID) != 1 || len(rPID) == 0 || !alive(wPID[0]) || !alive(rPID[len(rPID)-1]) {
		t.Fatalf("starts: %s %v, %s %v; want one live process each", watched.name, wPID, restarted.name, rPID)
	}
	history := func(name, want string) int { return strings.Count(mustCLI(t, n1, "status", name), want) }
	const wentUnhealthy, restartedThere = "unhealthy on n1", "unhealthy on n1; restarted there (OnUnhealthy=restart)"
	wBefore, rBefore := history(watched.name, wentUnhealthy), history(restarted.name, restartedThere)
	rStarts, rCur := len(rPID), rPID[len(rPID)-1]

	// Each server answers 503 from now on.
	failed := time.Now()
	for _, s := range []struct {
		server
		pid int
	}{{watched, wPID[0]}, {restarted, rCur}} {
		if err := os.WriteFile(s.fail, []byte(strconv.Itoa(s.pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	waitHealth(watched.name, "active/unhealthy", 30*time.Second)
	// The first failing run comes within an Interval of the failure, and
	// UnhealthyAfter-1 more Intervals decide; list-units adds its own delay.
	// (5s of slack: the report's way to the leader and list-units' polls.)
	if took, least, most := time.Since(failed), (unhealthyAfter-1)*interval, unhealthyAfter*interval+5*time.Second; took < least || took > most {
		t.Errorf("%s unhealthy %v after its server failed; UnhealthyAfter=%d of Interval=%v take %v to %v", watched.name, took, unhealthyAfter, interval, least, most)
	}

	// OnUnhealthy=restart: a new process, which passes, once.
	waitfor.Until(t, 30*time.Second, restarted.name+" restarted", func() error {
		if p := starts(restarted); len(p) != rStarts+1 {
			return fmt.Errorf("started %v", p)
		}
		return nil
	})
	waitHealth(restarted.name, "active/healthy", 30*time.Second)
	p := starts(restarted)
	if len(p) != rStarts+1 || p[rStarts] == rCur || alive(rCur) || !alive(p[rStarts]) {
		t.Fatalf("%s: processes %v (%d alive %v); want %d gone and one new one running", restarted.name, p, rCur, alive(rCur), rCur)
	}
	// OnUnhealthy=none: still the same process, still unhealthy.
	if p := starts(watched); len(p) != 1 || !alive(p[0]) {
		t.Errorf("%s (OnUnhealthy=none) processes %v; want the first one still running", watched.name, p)
	}
	if got, err := health(watched.name); err != nil || got != "active/unhealthy" {
		t.Errorf("%s: %s %v, want active/unhealthy", watched.name, got, err)
	}
	// The API's three views of the unit's state say so too.
	for _, path := range []string{"/v1/units/" + watched.name, "/v1/unit-states?name=" + watched.name, "/v1/state?unit=" + watched.name} {
		waitfor.Until(t, 10*time.Second, "GET "+path+" shows unhealthy", func() error {
			resp, err := http.Get("http://" + n1.api + path)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if !strings.Contains(string(b), `"health":"unhealthy"`) {
				return fmt.Errorf("%s: %s", resp.Status, b)
			}
			return nil
		})
	}
	// Each turn to unhealthy is in the unit's history (flotilla status),
	// the restart in the daemon's log.
	for _, h := range []struct {
		name, want string
		before     int
	}{{watched.name, wentUnhealthy, wBefore}, {restarted.name, restartedThere, rBefore}} {
		if out := mustCLI(t, n1, "status", h.name); strings.Count(out, h.want) != h.before+1 {
			t.Errorf("flotilla status %s does not say %q once more than the %d times before the failure:\n%s", h.name, h.want, h.before, out)
		}
	}
	// The restart is in the daemon's log, and in the unit's (the exec
	// driver, in the supervisor, runs the checks and restarts it).
	if log := n1.log.String(); !strings.Contains(log, "restarting it (OnUnhealthy=restart)") {
		t.Errorf("the daemon's log does not say it restarted %s", restarted.name)
	}
	if out := mustCLI(t, n1, "journal", restarted.name); !strings.Contains(out, "Restarting it (OnUnhealthy=restart).") {
		t.Errorf("the journal of %s does not tell of the restart:\n%s", restarted.name, out)
	}
}

// TestHealthChecksWithDaemonKilled: an exec unit's checks run in the
// supervisor, so with the daemon SIGKILLed a unit whose check turns
// failing is still restarted once (OnUnhealthy=restart: a new process,
// the old one gone), and the restarted daemon shows its health as the
// supervisor has it, unhealthy, never "unknown" on the way (a deployment
// waiting for health would start over), and does not restart it again.
func TestHealthChecksWithDaemonKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a daemon")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	n1 := newLeadingNode(t, nil)
	dir := t.TempDir()
	flag, startsFile := filepath.Join(dir, "ok"), filepath.Join(dir, "starts")
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	const name = "checked.service"
	mustCLI(t, n1, "start", writeUnit(t, dir, name, fmt.Sprintf(`[Service]
ExecStart=%s
Environment=%s=%s %s=%s %s=%s
TimeoutStopSec=5
[X-Check]
Exec=/usr/bin/test -f %s
Interval=500ms
Timeout=400ms
UnhealthyAfter=2
OnUnhealthy=restart
`, self, healthServerEnv, freeAddr(t), healthFailEnv, filepath.Join(dir, "fail"), healthStartsEnv, startsFile, flag)))
	health := func() string {
		out, err := cli(t, n1, "list-units", "--no-legend", "--fields", "unit,active,health")
		if err != nil {
			return "error"
		}
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] == name {
				return f[1] + "/" + f[2]
			}
		}
		return "absent"
	}
	starts := func() []int {
		b, _ := os.ReadFile(startsFile)
		var pids []int
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return pids
	}
	waitfor.True(t, 60*time.Second, name+" active/healthy", func() bool { return health() == "active/healthy" })

	n1.kill()
	if err := os.Remove(flag); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 30*time.Second, name+" restarted with no daemon", func() error {
		if p := starts(); len(p) != 2 || alive(p[0]) || !alive(p[1]) {
			return fmt.Errorf("processes %v, want the first gone and a second running", p)
		}
		return nil
	})

	n1.start(t)
	var seen []string
	waitfor.True(t, 60*time.Second, name+" active/unhealthy after the daemon's restart", func() bool {
		h := health()
		if len(seen) == 0 || seen[len(seen)-1] != h {
			seen = append(seen, h)
		}
		return h == "active/unhealthy"
	})
	for _, h := range seen {
		if strings.HasSuffix(h, "/unknown") {
			t.Fatalf("after the daemon's restart list-units showed %v: unknown on the way", seen)
		}
	}
	// Unhealthy still, but restarted once per turn: not again.
	waitfor.Never(t, 3*time.Second, name+" restarted again", func() bool { return len(starts()) != 2 || health() != "active/unhealthy" })
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, 30*time.Second, name+" healthy again", func() bool { return health() == "active/healthy" })
}
