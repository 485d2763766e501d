// Package supervisortest lets a test binary that runs daemons in its own
// process (with the exec driver) be the supervisor those daemons start, and
// stops the supervisors a test started, with their units.
//
// A daemon starts its machine's supervisor as `<its executable> supervisor
// --dir DIR`; in a test, that executable is the test binary. Call Main from
// the package's TestMain: in the test process it marks the environment so
// that the supervisors it starts serve instead of running the tests.
package supervisortest

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/supervisor"
	"github.com/flotilla/flotilla/internal/waitfor"
	"github.com/prometheus/procfs"
)

// Env marks a test binary started as a supervisor.
const Env = "FLOTILLA_TEST_AS_SUPERVISOR"

// Main runs the tests, or serves as a supervisor when the test binary was
// started as one. Call it from TestMain.
func Main(m *testing.M) {
	if os.Getenv(Env) == "1" {
		os.Exit(serve(os.Args[1:]))
	}
	os.Setenv(Env, "1") // inherited by the supervisors the tests' daemons start
	os.Exit(m.Run())
}

func serve(args []string) int {
	return supervisor.ServeArgs(args, "test", slog.New(slog.NewTextHandler(os.Stderr, nil)))
}

// Stop ends the supervisor serving dir (a daemon's <data-dir>/units), if
// one runs, with its units: SIGTERM (it stops them), then SIGKILL if it has
// not ended within 30s.
func Stop(t testing.TB, dir string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, supervisor.PIDFile))
	if err != nil {
		return
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil || pid <= 1 {
		t.Errorf("%s holds %q, not a PID", filepath.Join(dir, supervisor.PIDFile), b)
		return
	}
	syscall.Kill(pid, syscall.SIGCONT)
	syscall.Kill(pid, syscall.SIGTERM)
	if err := waitfor.Poll(30*time.Second, func() error {
		if syscall.Kill(pid, 0) == nil && !zombie(pid) {
			return fmt.Errorf("supervisor %d still runs after SIGTERM", pid)
		}
		return nil
	}); err != nil {
		t.Errorf("%v; killing it", err)
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// zombie reports whether pid has exited but not been reaped (or has no
// /proc/<pid>/stat at all).
func zombie(pid int) bool {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return true
	}
	st, err := p.Stat()
	if err != nil {
		var pe *fs.PathError
		return errors.As(err, &pe)
	}
	return st.State == "Z"
}
