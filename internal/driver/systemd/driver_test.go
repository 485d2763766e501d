package systemddriver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/activation"

	"github.com/flotilla/flotilla/internal/driver"
	"github.com/flotilla/flotilla/internal/monotime"
	"github.com/flotilla/flotilla/internal/systemdtest"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// The tests named TestInside* run inside a container whose PID 1 is
// systemd: TestDriver builds this package's test binary, copies it into
// the container and runs them there, so the driver talks to a real
// systemd over D-Bus exactly as on a machine. Run on the host they skip.

const insideEnv = "FLOTILLA_SYSTEMD_INSIDE"

// helperEnv makes the test binary act as a unit's program (see
// TestHelperProcess) instead of running tests.
const helperEnv = "FLOTILLA_SYSTEMD_HELPER"

const testBinary = "/usr/local/bin/systemd.test"

func inside(t *testing.T) {
	t.Helper()
	if os.Getenv(insideEnv) != "1" {
		t.Skip("runs inside a systemd container; TestDriver runs it there")
	}
}

// TestDriver runs the TestInside* tests in a fresh systemd container.
func TestDriver(t *testing.T) {
	if os.Getenv(insideEnv) == "1" || os.Getenv(helperEnv) != "" {
		t.Skip("already inside")
	}
	c := systemdtest.Start(t)
	bin := systemdtest.BuildStatic(t, t.TempDir(), ".", "systemd.test", true)
	c.CopyIn(bin, testBinary)
	args := []string{testBinary, "-test.run", "^TestInside", "-test.count=1", "-test.timeout=150s"}
	if testing.Verbose() {
		args = append(args, "-test.v")
	}
	out, err := c.ExecEnv([]string{insideEnv + "=1"}, args...)
	t.Logf("inside the container:\n%s", out)
	if err != nil {
		t.Fatalf("tests inside the container failed: %v", err)
	}
}

// TestHelperProcess is the program of the test's socket-activated unit:
// with FLOTILLA_SYSTEMD_HELPER=sockecho it answers each connection on the
// sockets systemd passed with "hello from PID", forever.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "sockecho" {
		t.Skip("a unit's program, not a test")
	}
	lns, err := activation.Listeners()
	if err != nil || len(lns) == 0 {
		fmt.Fprintln(os.Stderr, "no sockets passed:", err)
		os.Exit(2)
	}
	fmt.Println("serving on", lns[0].Addr())
	for {
		conn, err := lns[0].Accept()
		if err != nil {
			os.Exit(1)
		}
		fmt.Fprintf(conn, "hello from %d\n", os.Getpid())
		conn.Close()
	}
}

// recorder keeps every status the driver notifies.
type recorder struct {
	mu   sync.Mutex
	seen map[string][]unit.Status
}

func (r *recorder) notify(s unit.Status) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string][]unit.Status{}
	}
	r.seen[s.Name] = append(r.seen[s.Name], s)
}

func (r *recorder) history(name string) []unit.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]unit.Status(nil), r.seen[name]...)
}

func (r *recorder) last(name string) unit.Status {
	h := r.history(name)
	if len(h) == 0 {
		return unit.Status{}
	}
	return h[len(h)-1]
}

// wait waits until the unit's last notified status is active/sub.
func (r *recorder) wait(t *testing.T, name, active, sub string, timeout time.Duration) unit.Status {
	t.Helper()
	waitfor.Until(t, timeout, name+" "+active+"/"+sub, func() error {
		if s := r.last(name); s.Active != active || s.Sub != sub {
			return fmt.Errorf("%s is %s/%s, want %s/%s (history %v)", name, s.Active, s.Sub, active, sub, states(r.history(name)))
		}
		return nil
	})
	return r.last(name)
}

func states(h []unit.Status) []string {
	var out []string
	for _, s := range h {
		out = append(out, s.Active+"/"+s.Sub)
	}
	return out
}

func newDriver(t *testing.T, r *recorder) *Driver {
	t.Helper()
	d, err := New(Config{Machine: "m1", Notify: r.notify})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func parse(t *testing.T, name, text string) *unit.File {
	t.Helper()
	f, err := unit.Parse(name, []byte(text))
	if err != nil {
		t.Fatalf("unit.Parse(%s): %v", name, err)
	}
	return f
}

func load(t *testing.T, d *Driver, name, text string) {
	t.Helper()
	if err := d.Load(parse(t, name, text)); err != nil {
		t.Fatal(err)
	}
}

func systemctl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := runOut("systemctl", args...)
	if err != nil {
		t.Fatalf("systemctl %v: %v", args, err)
	}
	return strings.TrimSpace(out)
}

func closeDriver(t *testing.T, d *Driver) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// The services the exec driver runs differently from systemd: Type=notify
// is activating until it says READY=1, Type=forking is its forked child
// (from PIDFile=), Type=oneshot with RemainAfterExit= stays active/exited.
func TestInsideServiceTypes(t *testing.T) {
	inside(t)
	r := &recorder{}
	d := newDriver(t, r)
	defer closeDriver(t, d)

	load(t, d, "notify.service", `[Service]
Type=notify
NotifyAccess=all
ExecStart=/bin/sh -c 'echo warming up; sleep 1.5; systemd-notify --ready; echo ready; exec sleep infinity'
`)
	load(t, d, "forking.service", `[Service]
Type=forking
PIDFile=/run/forking.pid
ExecStart=/bin/sh -c 'sleep infinity & echo $! > /run/forking.pid'
`)
	load(t, d, "oneshot.service", `[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/true
ExecStart=/bin/echo set up
`)
	load(t, d, "fails.service", `[Service]
ExecStart=/bin/sh -c 'exit 3'
`)
	for _, n := range []string{"notify.service", "forking.service", "oneshot.service", "fails.service"} {
		if s := r.last(n); s.Load != "loaded" || s.Active != "inactive" || s.Sub != "dead" || s.Result != "" || s.Hash == "" {
			t.Errorf("after Load, %s = %+v, want loaded inactive/dead with its hash and no result", n, s)
		}
		if err := d.Start(n); err != nil {
			t.Fatal(err)
		}
	}
	r.wait(t, "notify.service", "activating", "start", 5*time.Second)
	s := r.wait(t, "notify.service", "active", "running", 10*time.Second)
	if s.PID == 0 || s.Result != "success" {
		t.Errorf("notify.service = %+v, want a PID and result success", s)
	}
	s = r.wait(t, "forking.service", "active", "running", 10*time.Second)
	pidfile, err := os.ReadFile("/run/forking.pid")
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := strconv.Atoi(strings.TrimSpace(string(pidfile))); s.PID != want || want == 0 {
		t.Errorf("forking.service PID = %d, want the forked child's %d from PIDFile=", s.PID, want)
	}
	r.wait(t, "oneshot.service", "active", "exited", 10*time.Second)
	s = r.wait(t, "fails.service", "failed", "failed", 10*time.Second)
	if s.Result != "exit-code" {
		t.Errorf("fails.service result = %q, want exit-code", s.Result)
	}
	if got := systemctl(t, "show", "-P", "ActiveState", "notify.service"); got != "active" {
		t.Errorf("systemctl says notify.service is %s", got)
	}
	if st := d.States(); len(st) != 4 || st[0].Name != "fails.service" || st[3].Name != "oneshot.service" {
		t.Errorf("States() = %v, want the 4 units sorted by name", st)
	}

	if err := d.Stop("notify.service"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "notify.service", "inactive", "dead", 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := d.Unload(ctx, "forking.service"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/run/systemd/system/forking.service"); !os.IsNotExist(err) {
		t.Errorf("forking.service's file after Unload: %v, want gone", err)
	}
	if got := systemctl(t, "show", "-P", "LoadState", "forking.service"); got != "not-found" {
		t.Errorf("after Unload systemd has forking.service %s, want not-found", got)
	}
	if err := d.Start("forking.service"); !errors.Is(err, driver.ErrUnknownUnit) {
		t.Errorf("Start after Unload = %v, want ErrUnknownUnit", err)
	}
}

// A .timer starts its service again and again; a .socket starts its service
// on the first connection, passing it the listening socket.
func TestInsideTimerAndSocket(t *testing.T) {
	inside(t)
	r := &recorder{}
	d := newDriver(t, r)
	defer closeDriver(t, d)

	load(t, d, "tick.service", `[Service]
Type=oneshot
ExecStart=/bin/sh -c 'echo tick >> /run/ticks'
`)
	load(t, d, "tick.timer", `[Timer]
OnActiveSec=1s
OnUnitActiveSec=1s
AccuracySec=10ms
`)
	load(t, d, "echo.service", `[Service]
ExecStart=`+testBinary+` -test.run=^TestHelperProcess$
Environment=`+helperEnv+`=sockecho
`)
	load(t, d, "echo.socket", `[Socket]
ListenStream=127.0.0.1:7999
`)
	for _, n := range []string{"tick.timer", "echo.socket"} {
		if err := d.Start(n); err != nil {
			t.Fatal(err)
		}
	}
	r.wait(t, "tick.timer", "active", "waiting", 5*time.Second)
	waitfor.Until(t, 10*time.Second, "the timer to run tick.service twice", func() error {
		b, _ := os.ReadFile("/run/ticks")
		if n := strings.Count(string(b), "tick"); n < 2 {
			return fmt.Errorf("tick.service ran %d times, want the timer to run it at least twice", n)
		}
		return nil
	})
	if s := r.last("tick.service"); s.Result != "success" {
		t.Errorf("tick.service = %+v, want result success after the timer ran it", s)
	}

	r.wait(t, "echo.socket", "active", "listening", 5*time.Second)
	if s := r.last("echo.service"); s.Active != "inactive" {
		t.Errorf("echo.service before a connection = %s/%s, want inactive", s.Active, s.Sub)
	}
	conn, err := net.DialTimeout("tcp", "127.0.0.1:7999", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	conn.Close()
	if err != nil || !strings.HasPrefix(line, "hello from ") {
		t.Fatalf("socket answered %q, %v; want hello from the activated service", line, err)
	}
	s := r.wait(t, "echo.service", "active", "running", 5*time.Second)
	if want := "hello from " + strconv.Itoa(s.PID) + "\n"; line != want {
		t.Errorf("answer %q, want %q: the service's main process serves the socket", line, want)
	}
	if svc, _ := d.Started("echo.service"); svc {
		t.Error("Started(echo.service) = true, want false: its socket started it")
	}
	if sock, _ := d.Started("echo.socket"); !sock {
		t.Error("Started(echo.socket) = false, want true")
	}
	if err := d.Stop("echo.socket"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "echo.socket", "inactive", "dead", 5*time.Second)
}

// A new driver adopts the units an earlier one wrote, running as they are:
// same MainPID, nothing restarted. Detach leaves them; Close stops them.
func TestInsideAdopt(t *testing.T) {
	inside(t)
	r := &recorder{}
	d := newDriver(t, r)
	load(t, d, "adopt.service", `[Service]
ExecStart=/bin/sleep infinity
`)
	load(t, d, "adopt-loaded.service", `[Service]
ExecStart=/bin/sleep infinity
`)
	if err := d.Start("adopt.service"); err != nil {
		t.Fatal(err)
	}
	before := r.wait(t, "adopt.service", "active", "running", 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.Start("adopt.service"); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Detach = %v, want ErrClosed", err)
	}
	if got := systemctl(t, "show", "-P", "MainPID", "adopt.service"); got != strconv.Itoa(before.PID) {
		t.Fatalf("after Detach MainPID = %s, want %d still running", got, before.PID)
	}

	r2 := &recorder{}
	d2 := newDriver(t, r2)
	st := d2.States()
	if len(st) != 2 {
		t.Fatalf("adopted %v, want adopt.service and adopt-loaded.service", st)
	}
	a, l := st[0], st[1]
	if a.Name != "adopt-loaded.service" {
		a, l = l, a
	}
	if l.Name != "adopt.service" || l.Active != "active" || l.PID != before.PID || l.Hash != before.Hash || l.Since != before.Since {
		t.Errorf("adopted %+v, want %+v", l, before)
	}
	if a.Active != "inactive" || a.Result != "" {
		t.Errorf("adopted the never started unit as %+v, want inactive with no result", a)
	}
	started, _ := d2.Started("adopt.service")
	loaded, _ := d2.Started("adopt-loaded.service")
	if !started || loaded {
		t.Errorf("Started after adoption: adopt.service %v, adopt-loaded.service %v; want true, false", started, loaded)
	}
	if got := systemctl(t, "show", "-P", "NRestarts", "adopt.service"); got != "0" {
		t.Errorf("NRestarts = %s, want 0", got)
	}
	closeDriver(t, d2)
	if got := systemctl(t, "show", "-P", "LoadState", "adopt.service"); got != "not-found" {
		t.Errorf("after Close systemd has adopt.service %s, want not-found", got)
	}
}

// Kill ends a unit at once, even one whose ExecStop= would take long.
func TestInsideKill(t *testing.T) {
	inside(t)
	r := &recorder{}
	d := newDriver(t, r)
	defer closeDriver(t, d)
	load(t, d, "slowstop.service", `[Service]
ExecStart=/bin/sleep infinity
ExecStop=/bin/sleep 60
TimeoutStopSec=90
Restart=always
`)
	if err := d.Start("slowstop.service"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "slowstop.service", "active", "running", 10*time.Second)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := d.Kill(ctx, "slowstop.service"); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("Kill took %v: it waited for ExecStop=", el)
	}
	if got := systemctl(t, "show", "-P", "ActiveState", "slowstop.service"); got != "inactive" {
		t.Errorf("after Kill slowstop.service is %s, want inactive (not restarted)", got)
	}
	if len(d.States()) != 0 {
		t.Errorf("States after Kill = %v, want none", d.States())
	}
	if err := d.Kill(ctx, "slowstop.service"); err != nil {
		t.Errorf("Kill of an unknown unit = %v, want nil", err)
	}
}

// A fenced unit is stopped by systemd at its deadline, even with no driver
// left to do it (a frozen or dead daemon); each Fence re-arms it.
func TestInsideFence(t *testing.T) {
	inside(t)
	r := &recorder{}
	d := newDriver(t, r)
	load(t, d, "single.service", `[Service]
ExecStart=/bin/sleep infinity
Restart=always
`)
	load(t, d, "other.service", `[Service]
ExecStart=/bin/sleep infinity
`)
	for _, n := range []string{"single.service", "other.service"} {
		if err := d.Start(n); err != nil {
			t.Fatal(err)
		}
		r.wait(t, n, "active", "running", 10*time.Second)
	}
	// Re-armed before its first deadline: the unit outlives it.
	first := monotime.Now().Add(time.Second)
	if err := d.Fence(first, []string{"single.service"}); err != nil {
		t.Fatal(err)
	}
	deadline := first.Add(time.Second)
	if err := d.Fence(deadline, []string{"single.service"}); err != nil {
		t.Fatal(err)
	}
	// Watched until the monotonic clock is 300ms past the first deadline
	// (and still 700ms before the second).
	waitfor.Holds(t, monotime.Until(first)+300*time.Millisecond, "single.service active after its first deadline was moved on", func() error {
		if got := systemctl(t, "show", "-P", "ActiveState", "single.service"); got != "active" {
			return fmt.Errorf("single.service is %s", got)
		}
		return nil
	})
	if got := systemctl(t, "list-units", "--all", "--plain", "--no-legend", fencePrefix+"*.timer"); strings.Count(got, fencePrefix) != 1 {
		t.Errorf("fence timers armed: %q, want exactly one", got)
	}
	// The daemon goes away: systemd still stops the unit at the deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d.Detach(ctx)
	waitfor.Until(t, 5*time.Second, "single.service stopped at its deadline", func() error {
		if got := systemctl(t, "show", "-P", "ActiveState", "single.service"); got != "inactive" && got != "failed" {
			return fmt.Errorf("single.service is %s, want stopped at its deadline", got)
		}
		return nil
	})
	if late := monotime.Since(deadline); late < 0 {
		t.Errorf("single.service stopped %v before its deadline", -late)
	}
	if got := systemctl(t, "show", "-P", "ActiveState", "other.service"); got != "active" {
		t.Errorf("other.service is %s, want active: it was not fenced", got)
	}

	r2 := &recorder{}
	d2 := newDriver(t, r2)
	defer closeDriver(t, d2)
	if err := d2.Fence(deadline, []string{"single.service"}); err != nil {
		t.Fatal(err)
	}
	if err := d2.Start("single.service"); !errors.Is(err, ErrFenced) {
		t.Errorf("Start of a fenced unit = %v, want ErrFenced", err)
	}
	d2.refresh("single.service", nil)
	if s := r2.last("single.service"); s.Result != resultFenced || s.Message != fencedMessage {
		t.Errorf("fenced unit = %+v, want result %q and message %q", s, resultFenced, fencedMessage)
	}
	// A fence moved on lets it start again.
	if err := d2.Fence(monotime.Now().Add(time.Minute), []string{"single.service"}); err != nil {
		t.Fatal(err)
	}
	if err := d2.Start("single.service"); err != nil {
		t.Fatal(err)
	}
	r2.wait(t, "single.service", "active", "running", 10*time.Second)
	if err := d2.Fence(0, nil); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 5*time.Second, "the fence timers gone", func() error {
		if got := systemctl(t, "list-units", "--all", "--plain", "--no-legend", fencePrefix+"*"); strings.Contains(got, ".timer") {
			return fmt.Errorf("fence timers left after Fence(0, nil): %q", got)
		}
		return nil
	})
}

// Journal reads the unit's journald entries and follows new ones.
func TestInsideJournal(t *testing.T) {
	inside(t)
	r := &recorder{}
	d := newDriver(t, r)
	defer closeDriver(t, d)
	load(t, d, "talk.service", `[Service]
ExecStart=/bin/sh -c 'i=0; while true; do i=$((i+1)); echo line $i; sleep 0.3; done'
`)
	if err := d.Start("talk.service"); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "talk.service", "active", "running", 10*time.Second)
	waitfor.Until(t, 10*time.Second, "2 lines of the journal of talk.service", func() error {
		var b strings.Builder
		if err := d.Journal(context.Background(), "talk.service", 2, false, &b); err != nil {
			return err
		}
		lines := strings.Split(strings.TrimSpace(b.String()), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[1], "line ") {
			return fmt.Errorf("Journal(2 lines) = %q", b.String())
		}
		return nil
	})

	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- d.Journal(ctx, "talk.service", 0, true, pw); pw.Close() }()
	sc := bufio.NewScanner(pr)
	seen := map[string]bool{}
	timeout := time.AfterFunc(10*time.Second, func() { pw.CloseWithError(errors.New("timed out")) })
	for len(seen) < 3 && sc.Scan() {
		seen[sc.Text()] = true
	}
	timeout.Stop()
	if len(seen) < 3 {
		cancel()
		t.Fatalf("followed %v, want 3 new lines: %v (Journal: %v)", seen, sc.Err(), <-done)
	}
	cancel()
	go io.Copy(io.Discard, pr)
	if err := <-done; err != nil {
		t.Errorf("Journal(follow) after cancel = %v, want nil", err)
	}
	if err := d.Journal(context.Background(), "never.service", 5, false, io.Discard); !errors.Is(err, driver.ErrUnknownUnit) {
		t.Errorf("Journal of a unit never loaded = %v, want ErrUnknownUnit", err)
	}
}

// A unit systemd reads from elsewhere (a file of the same name in /etc) is
// refused: the driver would not be running what was submitted.
func TestInsideShadowed(t *testing.T) {
	inside(t)
	if err := os.WriteFile("/etc/systemd/system/shadow.service", []byte("[Service]\nExecStart=/bin/true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove("/etc/systemd/system/shadow.service")
	systemctl(t, "daemon-reload")
	r := &recorder{}
	d := newDriver(t, r)
	defer closeDriver(t, d)
	err := d.Load(parse(t, "shadow.service", "[Service]\nExecStart=/bin/sleep infinity\n"))
	if !errors.Is(err, ErrNotOurs) {
		t.Fatalf("Load of a unit /etc overrides = %v, want ErrNotOurs", err)
	}
	if _, err := os.Stat("/run/systemd/system/shadow.service"); !os.IsNotExist(err) {
		t.Errorf("the refused unit's file stays: %v", err)
	}
	if len(d.States()) != 0 {
		t.Errorf("States = %v, want none", d.States())
	}
}

func runOut(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

// An instance of a template is written as an instance file of the
// template's text (%i is the instance); a .path unit starts its service
// when its path appears; a .mount unit mounts.
func TestInsideInstancePathMount(t *testing.T) {
	inside(t)
	r := &recorder{}
	d := newDriver(t, r)
	defer closeDriver(t, d)

	tmpl := "[Service]\nExecStart=/bin/sh -c 'echo instance %i; exec sleep infinity'\n"
	f := parse(t, "inst@blue.service", tmpl)
	if f.Raw != tmpl {
		t.Fatalf("Raw of an instance = %q, want the template's text", f.Raw)
	}
	if err := d.Load(f); err != nil {
		t.Fatal(err)
	}
	load(t, d, "flag.service", "[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/echo flag seen\n")
	load(t, d, "flag.path", "[Path]\nPathExists=/run/flag\n")
	load(t, d, "mnt-flotilla.mount", "[Mount]\nWhat=tmpfs\nWhere=/mnt/flotilla\nType=tmpfs\nOptions=size=1m\n")
	for _, n := range []string{"inst@blue.service", "flag.path", "mnt-flotilla.mount"} {
		if err := d.Start(n); err != nil {
			t.Fatal(err)
		}
	}
	r.wait(t, "inst@blue.service", "active", "running", 10*time.Second)
	waitfor.Until(t, 10*time.Second, "the journal of inst@blue.service", func() error {
		var b strings.Builder
		d.Journal(context.Background(), "inst@blue.service", -1, false, &b)
		if !strings.Contains(b.String(), "instance blue") {
			return fmt.Errorf("journal of inst@blue.service = %q, want %q", b.String(), "instance blue")
		}
		return nil
	})
	r.wait(t, "flag.path", "active", "waiting", 10*time.Second)
	if s := r.last("flag.service"); s.Active != "inactive" {
		t.Fatalf("flag.service = %s/%s before its path exists, want inactive", s.Active, s.Sub)
	}
	if err := os.WriteFile("/run/flag", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "flag.service", "active", "exited", 10*time.Second)
	r.wait(t, "mnt-flotilla.mount", "active", "mounted", 10*time.Second)
	mounts, _ := os.ReadFile("/proc/self/mounts")
	if !strings.Contains(string(mounts), " /mnt/flotilla tmpfs ") {
		t.Errorf("/mnt/flotilla is not a tmpfs mount:\n%s", mounts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := d.Unload(ctx, "mnt-flotilla.mount"); err != nil {
		t.Fatal(err)
	}
	mounts, _ = os.ReadFile("/proc/self/mounts")
	if strings.Contains(string(mounts), " /mnt/flotilla ") {
		t.Errorf("/mnt/flotilla still mounted after Unload")
	}
}
