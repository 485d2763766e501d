package supervisor

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/driver"
	"github.com/flotilla/flotilla/internal/monotime"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/version"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// The test binary is also the supervisor and a helper daemon: TestMain
// runs them when these are set.
const (
	envSupervisor  = "FLOTILLA_TEST_SUPERVISOR" // run Serve (args: supervisor --dir DIR)
	envHelperDir   = "FLOTILLA_TEST_HELPER_DIR" // run a client on DIR, start helper.service, then block
	envHelperUnit  = "FLOTILLA_TEST_HELPER_UNIT"
	envHelperFence = "FLOTILLA_TEST_HELPER_FENCE" // fence helper.service this long from now
	// envSupervisorProtocol makes the supervisor speak this protocol.
	envSupervisorProtocol = "FLOTILLA_TEST_SUPERVISOR_PROTOCOL"
)

func TestMain(m *testing.M) {
	if os.Getenv(envSupervisor) == "1" {
		os.Exit(runSupervisor(os.Args[1:]))
	}
	if dir := os.Getenv(envHelperDir); dir != "" {
		os.Exit(runHelper(dir))
	}
	os.Exit(m.Run())
}

func runSupervisor(args []string) int {
	if exe, _ := os.Executable(); strings.HasSuffix(exe, cannotAdopt) {
		refuseHandover = func() error { return errors.New("this test binary reads no handover") }
	}
	if p := os.Getenv(envSupervisorProtocol); p != "" {
		version.ProtocolVersion, _ = strconv.Atoi(p) // a supervisor of another release
	}
	return ServeArgs(args, "test", slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})))
}

// runHelper is a daemon that will be killed or frozen: it starts
// helper.service, fences it if asked, prints its PID and waits.
func runHelper(dir string) int {
	c, err := New(clientConfig(dir, nil))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	f, err := unit.Parse("helper.service", []byte(os.Getenv(envHelperUnit)))
	if err == nil {
		err = c.Load(f)
	}
	if err == nil {
		err = c.Start("helper.service")
	}
	if err == nil && os.Getenv(envHelperFence) != "" {
		var d time.Duration
		if d, err = time.ParseDuration(os.Getenv(envHelperFence)); err == nil {
			err = c.Fence(monotime.Now().Add(d), []string{"helper.service"})
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var pid int
	if err := waitfor.Poll(5*time.Second, func() error {
		for _, st := range c.States() {
			if st.Name == "helper.service" && st.Active == "active" && st.PID != 0 {
				pid = st.PID
				return nil
			}
		}
		return errors.New("helper.service not active")
	}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("pid=%d\n", pid)
	select {}
}

func clientConfig(dir string, notify driver.Notify) Config {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return Config{Dir: dir, Machine: "m1", Notify: notify, Binary: exe, Env: []string{envSupervisor + "=1"},
		RPCTimeout: 2 * time.Second, Version: "test"}
}

// waitTimeout bounds every wait of the tests.
const waitTimeout = 15 * time.Second

// recorder keeps every status a client notifies.
type recorder struct {
	mu   sync.Mutex
	seen []unit.Status
}

func (r *recorder) notify(st unit.Status) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, st)
}

// wait waits for a notified status of the unit that satisfies ok.
func (r *recorder) wait(t *testing.T, name, what string, ok func(unit.Status) bool) unit.Status {
	t.Helper()
	var found unit.Status
	waitfor.True(t, waitTimeout, name+" to be "+what, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, st := range r.seen {
			if st.Name == name && ok(st) {
				found = st
				return true
			}
		}
		return false
	})
	return found
}

// activePID waits for the unit to be active with a main process and
// returns its pid.
func (r *recorder) activePID(t *testing.T, name string) int {
	t.Helper()
	return r.wait(t, name, "active", func(st unit.Status) bool { return st.Active == "active" && st.PID != 0 }).PID
}

// pidIn waits for a unit to write a pid to path and returns it.
func pidIn(t *testing.T, path string) int {
	t.Helper()
	var pid int
	waitfor.True(t, waitTimeout, "a pid in "+path, func() bool {
		b, _ := os.ReadFile(path)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return pid > 0
	})
	return pid
}

// newClient makes a client on dir; the test's end stops the supervisor
// (newTestDir's cleanup).
func newClient(t *testing.T, dir string) (*Client, *recorder) {
	t.Helper()
	rec := &recorder{}
	c, err := New(clientConfig(dir, rec.notify))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Detach(context.Background()) })
	return c, rec
}

// newTestDir returns a state directory whose supervisor, if one runs at the
// end of the test, is ended (SIGTERM, then SIGKILL) with its units.
func newTestDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("---- %s ----\n%s", LogFile, logTail(filepath.Join(dir, LogFile), 40))
		}
		stopSupervisor(t, dir)
	})
	return dir
}

func stopSupervisor(t *testing.T, dir string) {
	pid, err := readPIDFile(filepath.Join(dir, PIDFile))
	if err != nil {
		return
	}
	syscall.Kill(pid, syscall.SIGCONT)
	syscall.Kill(pid, syscall.SIGTERM)
	if err := waitfor.Poll(waitTimeout, func() error {
		if !processGone(pid) {
			return fmt.Errorf("supervisor %d still runs after SIGTERM", pid)
		}
		return nil
	}); err != nil {
		t.Errorf("%v; killing it", err)
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

func parseUnit(t *testing.T, name, text string) *unit.File {
	t.Helper()
	f, err := unit.Parse(name, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func mustLoadStart(t *testing.T, c *Client, f *unit.File) {
	t.Helper()
	if err := c.Load(f); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(f.Name); err != nil {
		t.Fatal(err)
	}
}

// stateOf returns the unit's status from States.
func stateOf(t *testing.T, c *Client, name string) unit.Status {
	t.Helper()
	for _, st := range c.States() {
		if st.Name == name {
			return st
		}
	}
	t.Fatalf("States lacks %s: %+v", name, c.States())
	return unit.Status{}
}

// proc is what the tests read of a process in /proc.
type proc struct {
	state           byte
	ppid, pgrp, sid int
}

func readProc(pid int) (proc, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return proc{}, false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	p := proc{state: f[0][0]}
	p.ppid, _ = strconv.Atoi(f[1])
	p.pgrp, _ = strconv.Atoi(f[2])
	p.sid, _ = strconv.Atoi(f[3])
	return p, true
}

func alive(pid int) bool {
	p, ok := readProc(pid)
	return ok && p.state != 'Z'
}

// freeze stops process pid (SIGSTOP) and waits until every thread of it
// is stopped: kill returns before they all are, and a thread still running
// could answer one more call (a test once saw a Stop answered 9 ms after
// the signal).
func freeze(t *testing.T, pid int) {
	t.Helper()
	syscall.Kill(pid, syscall.SIGSTOP)
	waitfor.Until(t, 10*time.Second, fmt.Sprintf("every thread of %d stopped after SIGSTOP", pid), func() error {
		tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		if err != nil {
			t.Fatalf("threads of %d: %v", pid, err)
		}
		for _, task := range tasks {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/stat")
			if err != nil {
				continue // the thread ended
			}
			if st := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])); st[0] != "T" && st[0] != "t" {
				return fmt.Errorf("thread %s is %s", task.Name(), st[0])
			}
		}
		return nil
	})
}

func supervisorPID(t *testing.T, dir string) int {
	t.Helper()
	pid, err := readPIDFile(filepath.Join(dir, PIDFile))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// readLog is the unit's current log file as the supervisor writes it,
// read with no client.
func readLog(dir, name string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "logs", name+".log"))
	return string(b)
}

func journal(t *testing.T, c *Client, name string) string {
	t.Helper()
	var b bytes.Buffer
	if err := c.Journal(context.Background(), name, -1, false, &b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

const ticker = `[Service]
ExecStart=/bin/sh -c 'while :; do echo tick; sleep 0.05; done'
`

// TestAdoptAfterDetach: a unit started through one client keeps running,
// with the same PID and a log that goes on, after the client detaches (a
// daemon stopped with SIGTERM); the next client lists it at once, adopted,
// and can stop it. The supervisor is in a session of its own.
func TestAdoptAfterDetach(t *testing.T) {
	t.Parallel()
	dir := newTestDir(t)
	c1, rec1 := newClient(t, dir)
	f := parseUnit(t, "web.service", ticker)
	mustLoadStart(t, c1, f)
	st := rec1.wait(t, "web.service", "active", func(st unit.Status) bool { return st.Active == "active" && st.PID != 0 })
	sup := supervisorPID(t, dir)
	if p, _ := readProc(sup); p.sid != sup {
		t.Errorf("supervisor %d is in session %d, want a session of its own", sup, p.sid)
	}
	if p, _ := readProc(st.PID); p.ppid != sup {
		t.Errorf("unit pid %d has parent %d, want the supervisor %d", st.PID, p.ppid, sup)
	}
	if err := c1.Detach(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c1.Start("web.service"); err == nil {
		t.Error("Start on a detached client succeeded")
	}
	// The unit goes on writing with no client.
	ticks := strings.Count(journal(t, c1, "web.service"), "tick")
	waitfor.True(t, waitTimeout, "the log to go on with no client", func() bool {
		return strings.Count(journal(t, c1, "web.service"), "tick") > ticks+3
	})
	if !alive(st.PID) {
		t.Fatalf("unit pid %d died when its client detached", st.PID)
	}
	ticks = strings.Count(journal(t, c1, "web.service"), "tick")

	c2, rec2 := newClient(t, dir)
	got := c2.States() // at once: adoption needs no wait
	if len(got) != 1 || got[0].Name != "web.service" || got[0].PID != st.PID || got[0].Active != "active" ||
		got[0].Hash != f.Hash || got[0].Machine != "m1" {
		t.Fatalf("States of the new client = %+v, want web.service active with pid %d and hash %.8s", got, st.PID, f.Hash)
	}
	if supervisorPID(t, dir) != sup {
		t.Errorf("the new client did not reuse supervisor %d", sup)
	}
	// Loading the same file again (what an agent given the same
	// assignments does) leaves it running and reports it.
	if err := c2.Load(f); err != nil {
		t.Fatal(err)
	}
	if err := c2.Start("web.service"); err != nil {
		t.Fatal(err)
	}
	if got := rec2.activePID(t, "web.service"); got != st.PID {
		t.Errorf("after Load and Start of the adopted unit: pid %d, want %d", got, st.PID)
	}
	waitfor.True(t, waitTimeout, "the log to go on", func() bool {
		return strings.Count(journal(t, c2, "web.service"), "tick") > ticks+3
	})
	if log := journal(t, c2, "web.service"); !strings.Contains(log, fmt.Sprintf("web.service[%d]: tick", st.PID)) {
		t.Errorf("log lacks ticks of pid %d:\n%s", st.PID, log)
	}

	// The adopted unit is driven as any other; Close stops it and the
	// supervisor.
	if err := c2.Stop("web.service"); err != nil {
		t.Fatal(err)
	}
	rec2.wait(t, "web.service", "inactive", func(st unit.Status) bool { return st.Active == "inactive" })
	if alive(st.PID) {
		t.Errorf("unit pid %d outlived its stop", st.PID)
	}
	if err := c2.Start("nope.service"); !errors.Is(err, driver.ErrUnknownUnit) {
		t.Errorf("Start of an unknown unit: %v, want driver.ErrUnknownUnit", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := c2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !processGone(sup) {
		t.Errorf("supervisor %d still runs after Close", sup)
	}
	for _, p := range []string{SocketFile, PIDFile} {
		if _, err := os.Stat(filepath.Join(dir, p)); err == nil {
			t.Errorf("%s left behind after Close", p)
		}
	}
}

// startHelper runs a helper daemon (this test binary) that starts
// helper.service on dir and prints its pid; it returns the helper and
// that pid.
func startHelper(t *testing.T, dir, unitText, fence string) (*exec.Cmd, int) {
	t.Helper()
	exe, _ := os.Executable()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envHelperDir+"="+dir, envHelperUnit+"="+unitText, envHelperFence+"="+fence)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		s.Scan()
		line <- s.Text()
	}()
	select {
	case l := <-line:
		pid, err := strconv.Atoi(strings.TrimPrefix(l, "pid="))
		if err != nil {
			t.Fatalf("helper said %q", l)
		}
		return cmd, pid
	case <-time.After(waitTimeout):
		t.Fatal("the helper daemon did not start its unit")
	}
	return nil, 0
}

// TestAdoptAfterDaemonKilled: a daemon SIGKILLed leaves its unit running;
// the next daemon's client adopts it with the same PID.
func TestAdoptAfterDaemonKilled(t *testing.T) {
	t.Parallel()
	dir := newTestDir(t)
	helper, pid := startHelper(t, dir, ticker, "")
	sup := supervisorPID(t, dir)
	helper.Process.Kill()
	helper.Wait()
	// The unit goes on writing with its daemon gone.
	ticks := strings.Count(readLog(dir, "helper.service"), "tick")
	waitfor.True(t, waitTimeout, "the log to go on with the daemon killed", func() bool {
		return strings.Count(readLog(dir, "helper.service"), "tick") > ticks+3
	})
	if !alive(pid) || !alive(sup) {
		t.Fatalf("after the daemon was killed: unit %d alive %v, supervisor %d alive %v; want both running", pid, alive(pid), sup, alive(sup))
	}
	c, _ := newClient(t, dir)
	if st := stateOf(t, c, "helper.service"); st.PID != pid || st.Active != "active" {
		t.Errorf("adopted status %+v, want active with pid %d", st, pid)
	}
	if supervisorPID(t, dir) != sup {
		t.Errorf("a new supervisor was started; want %d reused", sup)
	}
}

// TestRestartWhileDetached: Restart= is the supervisor's, so a unit that
// dies while no daemon is connected is restarted, and the next client
// sees the new process.
func TestRestartWhileDetached(t *testing.T) {
	t.Parallel()
	dir := newTestDir(t)
	c1, rec := newClient(t, dir)
	mustLoadStart(t, c1, parseUnit(t, "always.service", "[Service]\nExecStart=/bin/sleep 300\nRestart=always\nRestartSec=100ms\n"))
	old := rec.activePID(t, "always.service")
	c1.Detach(context.Background())
	syscall.Kill(old, syscall.SIGKILL)
	waitfor.True(t, waitTimeout, "always.service restarted with no client", func() bool {
		log := readLog(dir, "always.service")
		i := strings.Index(log, "restart counter is at 1")
		return i >= 0 && strings.Contains(log[i:], "Started ")
	})

	c2, _ := newClient(t, dir)
	st := stateOf(t, c2, "always.service")
	if st.Active != "active" || st.PID == 0 || st.PID == old || !alive(st.PID) {
		t.Fatalf("after its process was killed with no client: %+v, want active with a new live pid (old %d)", st, old)
	}
	if log := journal(t, c2, "always.service"); !strings.Contains(log, "Scheduled restart job, restart counter is at 1") {
		t.Errorf("log lacks the restart:\n%s", log)
	}
}

// TestFenceWhileDaemonFrozen: the supervisor kills a fenced unit at its
// deadline on its own timer, while the daemon that set it is frozen
// (SIGSTOP); the unit stays loaded, inactive, "fenced".
func TestFenceWhileDaemonFrozen(t *testing.T) {
	t.Parallel()
	dir := newTestDir(t)
	const fence = 1500 * time.Millisecond
	start := time.Now()
	helper, pid := startHelper(t, dir, "[Service]\nExecStart=/bin/sleep 300\n", fence.String())
	helper.Process.Signal(syscall.SIGSTOP)
	defer helper.Process.Signal(syscall.SIGCONT)
	waitfor.True(t, waitTimeout, "the fenced unit to die", func() bool { return !alive(pid) })
	took := time.Since(start)
	if took < fence {
		t.Errorf("the fenced unit died %v after the helper started, before its %v deadline", took, fence)
	}
	t.Logf("fenced unit killed %v after the helper started (deadline %v after its start)", took.Round(time.Millisecond), fence)

	helper.Process.Kill()
	c, _ := newClient(t, dir)
	st := stateOf(t, c, "helper.service")
	if st.Active != "inactive" || st.Sub != "dead" || st.Result != "fenced" || !strings.Contains(st.Message, "LostAfter=") {
		t.Errorf("fenced unit's status %+v, want inactive/dead, Result fenced and a message naming LostAfter=", st)
	}
	if err := c.Start("helper.service"); err == nil || !strings.Contains(err.Error(), "fenced") {
		t.Errorf("Start of a unit past its fence deadline: %v, want it refused as fenced", err)
	}
}

// TestFreshSupervisorKillsStale: when the supervisor is SIGKILLed, the next
// client starts a fresh one, which kills what the dead one's units left
// running (through the pid files) and has no units.
func TestFreshSupervisorKillsStale(t *testing.T) {
	t.Parallel()
	dir := newTestDir(t)
	pidFile := filepath.Join(t.TempDir(), "bg.pid")
	c1, rec := newClient(t, dir)
	mustLoadStart(t, c1, parseUnit(t, "bg.service", "[Service]\nExecStart=/bin/sh -c 'sleep 300 & echo $! > "+pidFile+"; exec sleep 300'\n"))
	main := rec.activePID(t, "bg.service")
	bg := pidIn(t, pidFile)
	c1.Detach(context.Background())
	old := supervisorPID(t, dir)
	syscall.Kill(old, syscall.SIGKILL)
	waitfor.True(t, waitTimeout, "the old supervisor to be gone", func() bool { return processGone(old) })
	waitfor.True(t, waitTimeout, "the main process to die with its supervisor", func() bool { return !alive(main) })
	if !alive(bg) {
		t.Fatalf("background process %d died with the supervisor; the test needs it left over", bg)
	}

	c2, _ := newClient(t, dir)
	if sup := supervisorPID(t, dir); sup == old {
		t.Fatalf("supervisor pid %d unchanged", sup)
	}
	waitfor.True(t, waitTimeout, "the left-over process to be killed", func() bool { return !alive(bg) })
	if got := c2.States(); len(got) != 0 {
		t.Errorf("a fresh supervisor lists %+v, want no units", got)
	}
	if log := logTail(filepath.Join(dir, LogFile), 100); !strings.Contains(log, "killed process group left running") {
		t.Errorf("supervisor log does not say it killed the stale group:\n%s", log)
	}
}

// TestSupervisorReplaced: a client whose supervisor dies under it starts
// a new one and gives it its units again: they run again, with new PIDs,
// and Notify says so.
func TestSupervisorReplaced(t *testing.T) {
	t.Parallel()
	dir := newTestDir(t)
	c, rec := newClient(t, dir)
	mustLoadStart(t, c, parseUnit(t, "web.service", "[Service]\nExecStart=/bin/sleep 300\n"))
	if err := c.Load(parseUnit(t, "idle.service", "[Service]\nExecStart=/bin/sleep 300\n")); err != nil {
		t.Fatal(err)
	}
	old := rec.activePID(t, "web.service")
	sup := supervisorPID(t, dir)
	syscall.Kill(sup, syscall.SIGKILL)
	st := rec.wait(t, "web.service", "running again", func(st unit.Status) bool {
		return st.Active == "active" && st.PID != 0 && st.PID != old
	})
	if !alive(st.PID) || alive(old) {
		t.Errorf("after the supervisor was replaced: new pid %d alive %v, old pid %d alive %v", st.PID, alive(st.PID), old, alive(old))
	}
	if s := stateOf(t, c, "idle.service"); s.Active != "inactive" {
		t.Errorf("idle.service after the replay: %+v, want loaded and inactive", s)
	}
	if now := supervisorPID(t, dir); now == sup {
		t.Errorf("supervisor pid unchanged")
	}
}

// TestFrozenSupervisorDoesNotBlock: calls to a supervisor that does not
// answer (SIGSTOP) fail within the RPC timeout; States falls back to the
// last statuses heard. Once it runs again, so does the client.
func TestFrozenSupervisorDoesNotBlock(t *testing.T) {
	t.Parallel()
	dir := newTestDir(t)
	c, rec := newClient(t, dir)
	mustLoadStart(t, c, parseUnit(t, "web.service", "[Service]\nExecStart=/bin/sleep 300\n"))
	pid := rec.activePID(t, "web.service")
	sup := supervisorPID(t, dir)
	defer syscall.Kill(sup, syscall.SIGCONT)
	freeze(t, sup)

	begin := time.Now()
	err := c.Stop("web.service")
	if took := time.Since(begin); err == nil || took > 2*c.cfg.RPCTimeout {
		t.Errorf("Stop on a frozen supervisor: %v after %v; want an error within the RPC timeout %v", err, took, c.cfg.RPCTimeout)
	}
	begin = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = c.Unload(ctx, "web.service")
	if took := time.Since(begin); err == nil || took > waitPoll+2*c.cfg.RPCTimeout {
		t.Errorf("Unload on a frozen supervisor: %v after %v; want an error within a poll and the RPC timeout", err, took)
	}
	begin = time.Now()
	if st := c.States(); len(st) != 1 || st[0].PID != pid || time.Since(begin) > 2*c.cfg.RPCTimeout {
		t.Errorf("States on a frozen supervisor = %+v after %v, want the last status heard", st, time.Since(begin))
	}
	syscall.Kill(sup, syscall.SIGCONT)
	// The Unload that timed out may still have reached the supervisor
	// and be carried out once it runs again: the unit is then gone.
	waitfor.True(t, waitTimeout, "the client to work again", func() bool {
		err := c.Stop("web.service")
		return err == nil || errors.Is(err, driver.ErrUnknownUnit)
	})
	rec.wait(t, "web.service", "inactive", func(st unit.Status) bool { return st.Active == "inactive" })
}

// TestOrphansReaped: the supervisor is a child subreaper: a unit's
// double-forked process is reparented to it, and reaped when it exits.
func TestOrphansReaped(t *testing.T) {
	t.Parallel()
	dir := newTestDir(t)
	pidFile := filepath.Join(t.TempDir(), "orphan.pid")
	c, rec := newClient(t, dir)
	mustLoadStart(t, c, parseUnit(t, "fork.service", "[Service]\nExecStart=/bin/sh -c '(sleep 300 & echo $! > "+pidFile+") ; exec sleep 300'\n"))
	rec.activePID(t, "fork.service")
	orphan := pidIn(t, pidFile)
	sup := supervisorPID(t, dir)
	waitfor.True(t, waitTimeout, "the orphan to be reparented to the supervisor", func() bool {
		p, ok := readProc(orphan)
		return ok && p.ppid == sup
	})
	syscall.Kill(orphan, syscall.SIGKILL)
	waitfor.True(t, waitTimeout, "the orphan to be reaped, not left a zombie", func() bool {
		_, ok := readProc(orphan)
		return !ok
	})
}

// TestCallsOutliveBrokenConnection: calls made on a connection that has
// just broken (the supervisor's keepalive ends the connection of a daemon
// frozen for 15 s, and the daemon's first calls as it wakes go out on it)
// are made again on the client's next connection, not failed: a failed
// kill left its unit running unknown to the agent, a failed load left the
// unit never run.
func TestCallsOutliveBrokenConnection(t *testing.T) {
	t.Parallel()
	dir := newTestDir(t)
	c, rec := newClient(t, dir)
	mustLoadStart(t, c, parseUnit(t, "web.service", "[Service]\nExecStart=/bin/sleep 300\n"))
	pid := rec.activePID(t, "web.service")
	sup := supervisorPID(t, dir)

	c.mu.Lock()
	broken := c.sess
	c.mu.Unlock()
	broken.conn.Close()
	if err := c.Load(parseUnit(t, "idle.service", "[Service]\nExecStart=/bin/sleep 300\n")); err != nil {
		t.Errorf("Load on a connection just broken: %v, want it made again on the next", err)
	}
	if err := c.Start("idle.service"); err != nil {
		t.Errorf("Start on a connection just broken: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := c.Kill(ctx, "web.service"); err != nil {
		t.Errorf("Kill on a connection just broken: %v", err)
	}
	waitfor.True(t, waitTimeout, "web.service's process to be killed", func() bool { return !alive(pid) })
	rec.activePID(t, "idle.service")
	c.mu.Lock()
	now := c.sess
	c.mu.Unlock()
	if now == broken {
		t.Errorf("the client kept the broken connection")
	}
	if got := supervisorPID(t, dir); got != sup {
		t.Errorf("supervisor pid %d, was %d: the connection broke, not the supervisor", got, sup)
	}
}
