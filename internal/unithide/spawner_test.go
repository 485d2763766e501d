package unithide

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/waitfor"
)

func shell(dir, script string) *exec.Cmd {
	return &exec.Cmd{Path: "/bin/sh", Args: []string{"sh", "-c", script}, Dir: dir, Env: []string{"PATH=/usr/bin:/bin", "WHO=probe"},
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}}
}

// TestSpawner: commands Wrap rewrote run through one spawner process, with
// the paths hidden, their environment, working directory, credentials,
// output and exit status; at the context's end their process group is
// killed.
func TestSpawner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mount namespaces need root")
	}
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.Mkdir(secret, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secret, "key"), []byte("s3cret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := NewSpawner([]string{secret})
	defer s.Close()
	run := func(ctx context.Context, c *exec.Cmd) (string, error) {
		t.Helper()
		Wrap(c, []string{secret})
		var out bytes.Buffer
		c.Stdout, c.Stderr = &out, &out
		err := s.Run(ctx, c)
		return out.String(), err
	}

	out, err := run(t.Context(), shell(dir, "cat secret/key; echo $WHO in $PWD; exit 3"))
	var exit *SpawnExitError
	if !errors.As(err, &exit) || err.Error() != "exit status 3" {
		t.Errorf("error %v, want exit status 3", err)
	}
	if strings.Contains(out, "s3cret") || !strings.Contains(out, "probe in "+dir) {
		t.Errorf("output %q: want the key hidden, the environment and the directory", out)
	}
	if out, err := run(t.Context(), shell(dir, "true")); err != nil || out != "" {
		t.Errorf("true: %q, %v", out, err)
	}
	// Many at once, as a grid slot's probes come: each its own reply.
	var wg sync.WaitGroup
	wrong := make([]string, 40)
	for i := range wrong {
		wg.Go(func() {
			out, err := run(t.Context(), shell(dir, fmt.Sprintf("echo %d; exit %d", i, i%3)))
			want := "<nil>"
			if i%3 != 0 {
				want = fmt.Sprintf("exit status %d", i%3)
			}
			if out != fmt.Sprintf("%d\n", i) || fmt.Sprint(err) != want {
				wrong[i] = fmt.Sprintf("command %d: %q, %v", i, out, err)
			}
		})
	}
	wg.Wait()
	for _, w := range wrong {
		if w != "" {
			t.Error(w)
		}
	}
	// More output than a pipe holds: read to its end, the first 4 KiB kept.
	if out, err := run(t.Context(), shell(dir, "head -c 300000 /dev/zero | tr '\\0' x")); err != nil || out != strings.Repeat("x", maxSpawnOutput) {
		t.Errorf("300,000 bytes of output: %d bytes kept, %v", len(out), err)
	}

	// A command too large for a frame is refused here; the spawner goes on.
	huge := shell(dir, "true")
	huge.Env = append(huge.Env, "BIG="+strings.Repeat("x", maxFrame))
	if _, err := run(t.Context(), huge); !errors.Is(err, syscall.E2BIG) {
		t.Errorf("a 16 MiB environment: %v, want E2BIG", err)
	}

	// One spawner process for all.
	first := s.proc.cmd.Process.Pid
	run(t.Context(), shell(dir, "true"))
	if s.proc.cmd.Process.Pid != first {
		t.Errorf("a second spawner %d after %d", s.proc.cmd.Process.Pid, first)
	}

	nobody := shell("/", "id -u; id -g") // the temporary directory is root's alone
	nobody.SysProcAttr.Credential = &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}
	if out, err := run(t.Context(), nobody); err != nil || out != "65534\n65534\n" {
		t.Errorf("as nobody: %q, %v", out, err)
	}

	pidFile := filepath.Join(dir, "pid")
	ctx, cancel := context.WithTimeoutCause(t.Context(), 300*time.Millisecond, errors.New("too slow"))
	defer cancel()
	if _, err := run(ctx, shell(dir, "sleep 60 & echo $! > "+pidFile+"; wait")); err == nil || err.Error() != "too slow" {
		t.Errorf("past its deadline: %v, want the cause", err)
	}
	b, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 {
		t.Fatalf("no pid in %s", pidFile)
	}
	waitfor.True(t, 10*time.Second, "the probe's child killed with its group", func() bool {
		return syscall.Kill(pid, 0) != nil || zombie(pid)
	})

	// A context ended before the command starts: the spawner kills it as
	// soon as it has started it, and Run returns once it is gone.
	ended, end := context.WithCancelCause(t.Context())
	end(errors.New("stopped"))
	t0 := time.Now()
	if _, err := run(ended, shell(dir, "exec sleep 60")); err == nil || err.Error() != "stopped" {
		t.Errorf("with its context ended: %v, want the cause", err)
	}
	if el := time.Since(t0); el > 30*time.Second {
		t.Errorf("with its context ended: %v before Run returned", el)
	}

	// Not rewritten by Wrap: run as is, nothing hidden.
	plain := shell(dir, "cat secret/key")
	var o bytes.Buffer
	plain.Stdout = &o
	if err := s.Run(t.Context(), plain); err != nil || o.String() != "s3cret\n" {
		t.Errorf("a plain command: %q, %v", o.String(), err)
	}

	// A spawner that died is replaced.
	s.proc.cmd.Process.Kill()
	waitfor.True(t, 10*time.Second, "the spawner forgotten", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.proc == nil
	})
	if out, err := run(t.Context(), shell(dir, "echo again")); err != nil || out != "again\n" {
		t.Errorf("after the spawner died: %q, %v", out, err)
	}
}

func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}
