package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/flotilla/flotilla/internal/driver"
	"github.com/flotilla/flotilla/internal/monotime"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
)

func TestStartStop(t *testing.T) {
	h := newHarness(t)
	d := h.driver()
	f := h.unitFile("web.service", "Command=run\n[Service]\nEnvironment=GREETING=world\n")
	if err := d.Load(f); err != nil {
		t.Fatal(err)
	}
	h.wait(d, "web.service", 5*time.Second, "loaded inactive", dead)
	if err := d.Start("web.service"); err != nil {
		t.Fatal(err)
	}
	st := h.wait(d, "web.service", 30*time.Second, "active/running", active)
	if st.Hash != f.Hash || st.Machine != h.machine {
		t.Errorf("status %+v: want hash %s machine %s", st, f.Hash, h.machine)
	}
	id, pid, running := h.inspect("web.service")
	if !running || pid != st.PID {
		t.Errorf("container %s: running %v pid %d; the driver says pid %d", id, running, pid, st.PID)
	}
	j := waitJournal(t, d, "web.service", "web.service["+strconv.Itoa(pid)+"]: hello world")
	waitJournal(t, d, "web.service", "to stderr")
	if !strings.Contains(j, "Started web.service.") {
		t.Errorf("journal lacks the driver's Started line:\n%s", j)
	}
	if err := d.Start("web.service"); err != nil { // a running unit is left alone
		t.Fatal(err)
	}
	if err := d.Stop("web.service"); err != nil {
		t.Fatal(err)
	}
	st = h.wait(d, "web.service", 30*time.Second, "stopped", dead)
	if st.Result != "success" || st.PID != 0 {
		t.Errorf("after stop: %+v", st)
	}
	if !h.seen("web.service", func(s unit.Status) bool { return s.Sub == "stop-sigterm" }) {
		t.Error("never reported deactivating/stop-sigterm")
	}
	j = waitJournal(t, d, "web.service", "]: bye")
	if !strings.Contains(j, "Stopped web.service.") {
		t.Errorf("journal lacks Stopped:\n%s", j)
	}
	// Started again: a new container, the journal goes on.
	if err := d.Start("web.service"); err != nil {
		t.Fatal(err)
	}
	h.wait(d, "web.service", 30*time.Second, "active again", active)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.Unload(ctx, "web.service"); err != nil {
		t.Fatal(err)
	}
	if n := len(d.States()); n != 0 {
		t.Errorf("%d units after unload", n)
	}
	list, _ := h.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", LabelMachine+"="+h.machine)})
	if len(list.Items) != 0 {
		t.Errorf("unload left %d containers", len(list.Items))
	}
	// The log outlives the unit, until RemoveLog.
	if j := journal(t, d, "web.service"); strings.Count(j, "hello world") != 2 {
		t.Errorf("journal after unload should hold both runs:\n%s", j)
	}
	if err := d.RemoveLog("web.service"); err != nil {
		t.Fatal(err)
	}
	if err := d.Journal(ctx, "web.service", -1, false, &bytes.Buffer{}); !errors.Is(err, driver.ErrUnknownUnit) {
		t.Errorf("journal after RemoveLog: %v, want ErrUnknownUnit", err)
	}
}

func TestCrashAndRestartPolicy(t *testing.T) {
	h := newHarness(t)
	d := h.driver()
	// Restart=no: a crash fails the unit, with the exit status as reason.
	if err := d.Load(h.unitFile("once.service", "Command=crash 3\n")); err != nil {
		t.Fatal(err)
	}
	if err := d.Start("once.service"); err != nil {
		t.Fatal(err)
	}
	st := h.wait(d, "once.service", 30*time.Second, "failed", failed)
	if st.Result != "exit-code" || !strings.Contains(st.Message, "status=3") {
		t.Errorf("crashed unit: %+v", st)
	}
	waitJournal(t, d, "once.service", "crashing with 3")

	// Restart=on-failure restarts after RestartSec= until the start limit.
	f := h.unitFile("loop.service", "Command=crash 1\n[Unit]\nStartLimitBurst=3\nStartLimitIntervalSec=60\n[Service]\nRestart=on-failure\nRestartSec=200ms\n")
	if err := d.Load(f); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	if err := d.Start("loop.service"); err != nil {
		t.Fatal(err)
	}
	st = h.wait(d, "loop.service", 60*time.Second, "start-limit-hit", func(s unit.Status) bool { return s.Result == "start-limit-hit" })
	if st.Active != "failed" {
		t.Errorf("after the start limit: %+v", st)
	}
	if !h.seen("loop.service", func(s unit.Status) bool { return s.Sub == "auto-restart" }) {
		t.Error("never reported activating/auto-restart")
	}
	j := journal(t, d, "loop.service")
	if n := strings.Count(j, "Scheduled restart job"); n != 3 {
		t.Errorf("%d restarts scheduled, want 3 (burst 3):\n%s", n, j)
	}
	if took := time.Since(begin); took < 400*time.Millisecond {
		t.Errorf("3 starts with RestartSec=200ms took %s", took)
	}
	if err := d.Start("loop.service"); !errors.Is(err, ErrStartLimitHit) {
		t.Errorf("start past the limit: %v, want ErrStartLimitHit", err)
	}

	// Restart=always restarts a clean exit too.
	if err := d.Load(h.unitFile("always.service", "Command=crash 0\n[Service]\nRestart=always\nRestartSec=100ms\n")); err != nil {
		t.Fatal(err)
	}
	if err := d.Start("always.service"); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 30*time.Second, "Restart=always to restart a clean exit", func() error {
		if j := journal(t, d, "always.service"); strings.Count(j, "crashing with 0") < 2 {
			return fmt.Errorf("journal:\n%s", j)
		}
		return nil
	})
	if err := d.Stop("always.service"); err != nil {
		t.Fatal(err)
	}
	h.wait(d, "always.service", 30*time.Second, "stopped", dead)
}

func TestStopTimeoutKills(t *testing.T) {
	h := newHarness(t)
	d := h.driver()
	if err := d.Load(h.unitFile("stubborn.service", "Command=ignore-term\n[Service]\nTimeoutStopSec=1\n")); err != nil {
		t.Fatal(err)
	}
	if err := d.Start("stubborn.service"); err != nil {
		t.Fatal(err)
	}
	h.wait(d, "stubborn.service", 30*time.Second, "active", active)
	waitJournal(t, d, "stubborn.service", "ignoring SIGTERM")
	begin := time.Now()
	if err := d.Stop("stubborn.service"); err != nil {
		t.Fatal(err)
	}
	st := h.wait(d, "stubborn.service", 30*time.Second, "stopped", dead)
	if took := time.Since(begin); took < time.Second {
		t.Errorf("stopped after %s, before TimeoutStopSec=1", took)
	}
	waitJournal(t, d, "stubborn.service", "got SIGTERM, ignored")
	if st.Result != "success" {
		t.Errorf("a stop that was asked for ends inactive/dead, success: %+v", st)
	}
}

func TestJournalFollow(t *testing.T) {
	h := newHarness(t)
	d := h.driver()
	if err := d.Load(h.unitFile("count.service", "Command=count\n")); err != nil {
		t.Fatal(err)
	}
	if err := d.Start("count.service"); err != nil {
		t.Fatal(err)
	}
	h.wait(d, "count.service", 30*time.Second, "active", active)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fctx, stop := context.WithCancel(ctx)
	pr := &lineWriter{want: "line 40", found: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- d.Journal(fctx, "count.service", 1, true, pr) }()
	select {
	case <-pr.found:
	case <-ctx.Done():
		t.Fatalf("follow did not show line 40 within 20s:\n%s", pr.String())
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("follow returned %v", err)
	}
	var last bytes.Buffer
	if err := d.Journal(ctx, "count.service", 2, false, &last); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(last.String(), "\n"); n != 2 {
		t.Errorf("-n 2 gave %d lines:\n%s", n, last.String())
	}
}

// lineWriter collects what it is written and closes found once it has seen want.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	want  string
	found chan struct{}
	done  bool
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.done && strings.Contains(w.buf.String(), w.want+"\n") {
		w.done = true
		close(w.found)
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestAdoptAfterRestart: a new driver on the same machine and directory
// adopts the running container as it is (same container, same PID, same
// hash), and the log copy resumes where the old driver left it, with no
// line lost or doubled.
func TestAdoptAfterRestart(t *testing.T) {
	h := newHarness(t)
	d1, err := New(h.config())
	if err != nil {
		t.Fatal(err)
	}
	f := h.unitFile("count.service", "Command=count\n[Service]\nRestart=always\n")
	if err := d1.Load(f); err != nil {
		t.Fatal(err)
	}
	if err := d1.Start("count.service"); err != nil {
		t.Fatal(err)
	}
	st1 := h.wait(d1, "count.service", 30*time.Second, "active", active)
	id1, pid1, _ := h.inspect("count.service")
	waitJournal(t, d1, "count.service", "line 5\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d1.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	// The container writes while no driver copies.
	detached := h.lastLine("count.service")
	waitfor.True(t, 15*time.Second, "the container to write while detached", func() bool { return h.lastLine("count.service") >= detached+10 })
	d2 := h.driver()
	var st2 unit.Status
	for _, s := range d2.States() {
		if s.Name == "count.service" {
			st2 = s
		}
	}
	if !active(st2) || st2.PID != st1.PID || st2.Hash != f.Hash {
		t.Fatalf("adopted %+v; before the restart %+v", st2, st1)
	}
	id2, pid2, running := h.inspect("count.service")
	if id2 != id1 || pid2 != pid1 || !running {
		t.Fatalf("container %s pid %d after adoption, was %s pid %d", id2, pid2, id1, pid1)
	}
	waitJournal(t, d2, "count.service", "line 60\n")
	if err := d2.Stop("count.service"); err != nil {
		t.Fatal(err)
	}
	h.wait(d2, "count.service", 30*time.Second, "stopped", dead)
	j := waitJournal(t, d2, "count.service", fmt.Sprintf("line %d\n", h.lastLine("count.service")))
	seq := regexp.MustCompile(`count\.service\[\d+\]: line (\d+)`).FindAllStringSubmatch(j, -1)
	for i, m := range seq {
		if n, _ := strconv.Atoi(m[1]); n != i+1 {
			t.Fatalf("output line %d reads %q: lines lost or doubled across the restart:\n%s", i+1, m[0], j)
		}
	}
	if len(seq) < 60 {
		t.Errorf("only %d output lines", len(seq))
	}
}

// TestAdoptExitedWhileAway: a container that crashed while no driver ran
// ends its run when adopted, and Restart= applies; one stopped on request
// stays stopped.
func TestAdoptExitedWhileAway(t *testing.T) {
	h := newHarness(t)
	d1, err := New(h.config())
	if err != nil {
		t.Fatal(err)
	}
	if err := d1.Load(h.unitFile("flaky.service", "Command=crash 2\n[Service]\nRestart=on-failure\nRestartSec=100ms\n")); err != nil {
		t.Fatal(err)
	}
	if err := d1.Load(h.unitFile("quiet.service", "Command=run\n[Service]\nRestart=always\n")); err != nil {
		t.Fatal(err)
	}
	d1.Start("quiet.service")
	h.wait(d1, "quiet.service", 30*time.Second, "active", active)
	d1.Stop("quiet.service")
	h.wait(d1, "quiet.service", 30*time.Second, "stopped", dead)
	d1.Start("flaky.service")
	h.wait(d1, "flaky.service", 30*time.Second, "active", active)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d1.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, 15*time.Second, "flaky.service's container to exit while detached", func() bool {
		_, _, running := h.inspect("flaky.service")
		return !running
	})
	d2 := h.driver()
	if got := len(d2.States()); got != 2 {
		t.Fatalf("adopted %d units, want 2: %+v", got, d2.States())
	}
	waitJournal(t, d2, "flaky.service", "Scheduled restart job")
	if st := h.wait(d2, "quiet.service", time.Second, "still stopped", dead); st.Result != "success" {
		t.Errorf("quiet.service: %+v", st)
	}
}

func TestMissingImage(t *testing.T) {
	h := newHarness(t)
	d := h.driver()
	f, err := unit.ParseStored("gone.service", "[X-Container]\nImage=flotilla-test/no-such-image:"+h.run+"\n")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Load(f); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	if err := d.Start("gone.service"); err != nil {
		t.Fatal(err)
	}
	st := h.wait(d, "gone.service", time.Minute, "failed", failed)
	t.Logf("missing image failed in %s: %s", time.Since(begin), st.Message)
	if st.Result != "resources" || !strings.Contains(st.Message, "flotilla-test/no-such-image:"+h.run+" is not on this machine and pulling it failed") {
		t.Errorf("status %+v: want the image named with the reason", st)
	}
	waitJournal(t, d, "gone.service", "Failed to start: image flotilla-test/no-such-image")
}

func TestLimitsAndOptionsMapped(t *testing.T) {
	h := newHarness(t)
	d := h.driver()
	vol := t.TempDir()
	f := h.unitFile("limited.service", "Command=env\nPorts=127.0.0.1:0:8080\nVolumes="+vol+":/data:ro\nNetwork=bridge\n"+
		"[Service]\nCPUQuota=50%\nMemoryMax=64M\nUser=1234\nWorkingDirectory=/data\nEnvironment=A=1 B=2\nKillSignal=SIGINT\nTimeoutStopSec=7\n")
	if err := d.Load(f); err != nil {
		t.Fatal(err)
	}
	if err := d.Start("limited.service"); err != nil {
		t.Fatal(err)
	}
	h.wait(d, "limited.service", 30*time.Second, "active", active)
	id, _, _ := h.inspect("limited.service")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ins, err := h.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc, cfg := ins.Container.HostConfig, ins.Container.Config
	if hc.Memory != 64<<20 || hc.MemorySwap != 64<<20 {
		t.Errorf("MemoryMax=64M: Memory %d MemorySwap %d", hc.Memory, hc.MemorySwap)
	}
	if hc.CPUPeriod != 100000 || hc.CPUQuota != 50000 {
		t.Errorf("CPUQuota=50%%: period %d quota %d", hc.CPUPeriod, hc.CPUQuota)
	}
	if cfg.User != "1234" || cfg.WorkingDir != "/data" || cfg.StopSignal != "SIGINT" || cfg.StopTimeout == nil || *cfg.StopTimeout != 7 {
		t.Errorf("config: user %q wd %q stop signal %q timeout %v", cfg.User, cfg.WorkingDir, cfg.StopSignal, cfg.StopTimeout)
	}
	if len(hc.Binds) != 1 || hc.Binds[0] != vol+":/data:ro" || hc.NetworkMode != "bridge" {
		t.Errorf("binds %v network %q", hc.Binds, hc.NetworkMode)
	}
	if fmt.Sprint(hc.PortBindings) == "map[]" || !strings.Contains(fmt.Sprint(hc.PortBindings), "127.0.0.1") {
		t.Errorf("port bindings %v", hc.PortBindings)
	}
	j := waitJournal(t, d, "limited.service", "wd /data uid 1234")
	if !strings.Contains(j, "]: A=1\n") || !strings.Contains(j, "]: B=2\n") {
		t.Errorf("environment not passed:\n%s", j)
	}
}

func TestKill(t *testing.T) {
	h := newHarness(t)
	d := h.driver()
	if err := d.Load(h.unitFile("victim.service", "Command=ignore-term\n[Service]\nTimeoutStopSec=60\n")); err != nil {
		t.Fatal(err)
	}
	d.Start("victim.service")
	h.wait(d, "victim.service", 30*time.Second, "active", active)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	begin := time.Now()
	if err := d.Kill(ctx, "victim.service"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("kill took %s: it must not wait for TimeoutStopSec=", took)
	}
	if len(d.States()) != 0 {
		t.Errorf("killed unit still loaded: %+v", d.States())
	}
	list, _ := h.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", LabelMachine+"="+h.machine)})
	if len(list.Items) != 0 {
		t.Errorf("kill left %d containers", len(list.Items))
	}
}

func TestFence(t *testing.T) {
	h := newHarness(t)
	d := h.driver()
	if err := d.Load(h.unitFile("single.service", "Command=run\n[Service]\nRestart=always\n")); err != nil {
		t.Fatal(err)
	}
	if err := d.Load(h.unitFile("other.service", "Command=run\n")); err != nil {
		t.Fatal(err)
	}
	d.Start("single.service")
	d.Start("other.service")
	h.wait(d, "single.service", 30*time.Second, "active", active)
	h.wait(d, "other.service", 30*time.Second, "active", active)
	if err := d.Fence(monotime.Now().Add(300*time.Millisecond), []string{"single.service"}); err != nil {
		t.Fatal(err)
	}
	st := h.wait(d, "single.service", 10*time.Second, "fenced", func(s unit.Status) bool { return s.Result == "fenced" })
	if st.Active != "inactive" || !strings.Contains(st.Message, "LostAfter=") {
		t.Errorf("fenced unit: %+v", st)
	}
	if err := d.Start("single.service"); !errors.Is(err, ErrFenced) {
		t.Errorf("start past the fence: %v, want ErrFenced", err)
	}
	if st := h.wait(d, "other.service", time.Second, "untouched", active); st.Result != "" {
		t.Errorf("other unit: %+v", st)
	}
	// A later deadline lets it start again.
	if err := d.Fence(monotime.Now().Add(time.Hour), []string{"single.service"}); err != nil {
		t.Fatal(err)
	}
	if err := d.Start("single.service"); err != nil {
		t.Fatal(err)
	}
	h.wait(d, "single.service", 30*time.Second, "active again", active)
}

// TestFenceHoldsWithoutDaemon: the fence deadline holds when the driver's
// process does nothing (here: it has detached, as a frozen daemon would
// do nothing): the watchdog kills the container on time, and the driver
// that adopts it does not restart it.
func TestFenceHoldsWithoutDaemon(t *testing.T) {
	h := newHarness(t)
	d1, err := New(h.config())
	if err != nil {
		t.Fatal(err)
	}
	if err := d1.Load(h.unitFile("single.service", "Command=run\n[Service]\nRestart=always\n")); err != nil {
		t.Fatal(err)
	}
	d1.Start("single.service")
	h.wait(d1, "single.service", 30*time.Second, "active", active)
	deadline := monotime.Now().Add(1500 * time.Millisecond)
	if err := d1.Fence(deadline, []string{"single.service"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d1.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, monotime.Until(deadline)+3*time.Second, "the watchdog to end the container after its fence deadline", func() error {
		if _, _, running := h.inspect("single.service"); running {
			return fmt.Errorf("container still runs %s after its fence deadline, with no driver", monotime.Since(deadline))
		}
		return nil
	})
	if early := monotime.Until(deadline); early > 0 {
		t.Fatalf("container ended %s before its fence deadline", early)
	}
	t.Logf("the watchdog killed the container %s after the deadline", monotime.Since(deadline))
	d2 := h.driver()
	st := h.wait(d2, "single.service", 5*time.Second, "fenced", func(s unit.Status) bool { return s.Result == "fenced" })
	if st.Active != "inactive" {
		t.Errorf("adopted fenced unit: %+v", st)
	}
	waitfor.Never(t, 500*time.Millisecond, "the adopting driver restarting a fenced unit", func() bool {
		_, _, running := h.inspect("single.service")
		return running
	})
}

func TestInUse(t *testing.T) {
	h := newHarness(t)
	h.driver()
	if _, err := New(h.config()); !errors.Is(err, ErrInUse) {
		t.Errorf("second driver on a directory: %v, want ErrInUse", err)
	}
}

func TestLoadRefuses(t *testing.T) {
	h := newHarness(t)
	d := h.driver()
	f, err := unit.ParseStored("plain.service", "[Service]\nExecStart=/bin/true\n")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Load(f); err == nil || !strings.Contains(err.Error(), "no [X-Container] section") {
		t.Errorf("load of a plain service: %v", err)
	}
	if err := d.Start("nothing.service"); !errors.Is(err, driver.ErrUnknownUnit) {
		t.Errorf("start of an unknown unit: %v", err)
	}
}

// TestAdoptWhileStopping: a daemon that goes away in the middle of a stop
// leaves it to the next, which carries it through to SIGKILL.
func TestAdoptWhileStopping(t *testing.T) {
	h := newHarness(t)
	d1, err := New(h.config())
	if err != nil {
		t.Fatal(err)
	}
	if err := d1.Load(h.unitFile("stubborn.service", "Command=ignore-term\n[Service]\nTimeoutStopSec=1\n")); err != nil {
		t.Fatal(err)
	}
	d1.Start("stubborn.service")
	h.wait(d1, "stubborn.service", 30*time.Second, "active", active)
	waitJournal(t, d1, "stubborn.service", "ignoring SIGTERM")
	if err := d1.Stop("stubborn.service"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d1.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	d2 := h.driver()
	st := h.wait(d2, "stubborn.service", 30*time.Second, "stopped", dead)
	if st.Result != "success" || !strings.Contains(st.Message, "SIGKILL") {
		t.Errorf("stop carried on by the next driver: %+v", st)
	}
	if _, _, running := h.inspect("stubborn.service"); running {
		t.Error("container still runs")
	}
}
