package spawn

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/waitfor"
)

func sh(dir, script string) *Attr {
	return &Attr{Path: "/bin/sh", Argv: []string{"sh", "-c", script}, Dir: dir, Env: []string{"PATH=/usr/bin:/bin", "WHO=probe"}}
}

// run starts a and waits for it, checking it is reaped (no zombie left).
func run(t *testing.T, ctx context.Context, a *Attr, max int) (syscall.WaitStatus, string, error) {
	t.Helper()
	p, err := Start(a, max)
	if err != nil {
		t.Fatalf("start %v: %v", a.Argv, err)
	}
	ws, out, err := p.Wait(ctx)
	if _, serr := os.Stat("/proc/" + strconv.Itoa(p.Pid)); !os.IsNotExist(serr) {
		t.Errorf("process %d still there after Wait (a zombie?): %v", p.Pid, serr)
	}
	return ws, string(out), err
}

// TestSpawnExit: the exit status, the output of stdout and stderr
// (capped), the environment and the working directory are the command's.
func TestSpawnExit(t *testing.T) {
	dir := t.TempDir()
	ws, out, err := run(t, t.Context(), sh(dir, "echo $WHO in $PWD; echo err >&2; read x; echo read=$?; exit 3"), 4096)
	if err != nil || !ws.Exited() || ws.ExitStatus() != 3 {
		t.Errorf("status %v, %v: want exit 3", ws, err)
	}
	if e := Err(ws); e == nil || e.Error() != "exit status 3" {
		t.Errorf("Err = %v, want exit status 3", e)
	}
	// stdin is /dev/null: read meets its end at once.
	if want := "probe in " + dir + "\nerr\nread=1\n"; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	ws, out, err = run(t, t.Context(), sh(dir, "head -c 100000 /dev/zero"), 10)
	if err != nil || Err(ws) != nil || len(out) != 10 {
		t.Errorf("100,000 bytes written: %d kept (want 10), %v, %v", len(out), Err(ws), err)
	}
	ws, _, err = run(t, t.Context(), sh(dir, "kill -TERM $$"), 10)
	if e := Err(ws); err != nil || e == nil || e.Error() != "signal: terminated" {
		t.Errorf("killed by SIGTERM: %v, %v", e, err)
	}
	if _, err := Start(&Attr{Path: "/nonexistent", Argv: []string{"x"}}, 10); err == nil || !strings.Contains(err.Error(), "fork/exec /nonexistent") {
		t.Errorf("a missing program: %v, want fork/exec /nonexistent", err)
	}
}

// TestSpawnCredential: as root, the command runs as Cred's user and
// groups.
func TestSpawnCredential(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing user needs root")
	}
	a := sh("/", "echo $(id -u) $(id -g) $(id -G)")
	a.Cred = &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{65534, 4242}}
	ws, out, err := run(t, t.Context(), a, 100)
	if err != nil || Err(ws) != nil || strings.TrimSpace(out) != "65534 65534 65534 4242" {
		t.Errorf("id: %q, %v, %v; want 65534 65534 65534 4242", out, Err(ws), err)
	}
}

// TestSpawnKill: at the context's end the whole process group is killed,
// and Wait returns even if a process outside it still holds the output.
func TestSpawnKill(t *testing.T) {
	dir := t.TempDir()
	pidFile := dir + "/bg"
	ctx, cancel := context.WithCancelCause(t.Context())
	p, err := Start(sh(dir, "sleep 600 & echo $! > bg; echo started; wait"), 100)
	if err != nil {
		t.Fatal(err)
	}
	var bg int
	waitfor.Until(t, 10*time.Second, "the background sleep's pid", func() error {
		b, err := os.ReadFile(pidFile)
		if err == nil && strings.HasSuffix(string(b), "\n") {
			bg, err = strconv.Atoi(strings.TrimSpace(string(b)))
		} else if err == nil {
			err = errors.New("not written yet")
		}
		return err
	})
	timeout := errors.New("timed out")
	cancel(timeout)
	ws, out, err := p.Wait(ctx)
	if !errors.Is(err, timeout) || !ws.Signaled() || ws.Signal() != syscall.SIGKILL || string(out) != "started\n" {
		t.Errorf("Wait: %v, %v, %q; want SIGKILL, the cause, the output", ws, err, out)
	}
	// The group's other member dies too (its parent, the subreaper or
	// init, reaps it).
	waitfor.True(t, 10*time.Second, "the background sleep killed", func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(bg) + "/stat")
		return err != nil || strings.Contains(string(b), ") Z ")
	})

	// A process of another session holds the output: Wait still returns
	// at the context's end.
	ctx2, cancel2 := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel2()
	p, err = Start(sh(dir, "setsid sleep 600 & echo $! > esc; wait"), 100)
	if err != nil {
		t.Fatal(err)
	}
	ws, _, err = p.Wait(ctx2)
	if !errors.Is(err, context.DeadlineExceeded) || !ws.Signaled() {
		t.Errorf("Wait with the output held: %v, %v", ws, err)
	}
	if b, err := os.ReadFile(dir + "/esc"); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
