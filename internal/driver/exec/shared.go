package execdriver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/flotilla/flotilla/internal/unit"
)

// This file exports the exec driver's systemd semantics for the other
// drivers that run units the way exec units are run (the docker driver), so
// that Restart=, the start limit, Environment= and KillSignal= mean the same
// under each.

// Environment returns the environment a unit's processes get beyond the
// driver's base: Environment= in file order, then each EnvironmentFile= in
// order (read now, refused unless a regular file of at most 1 MiB; a missing
// one is an error unless it has the "-" prefix, as is one inside hidden), a
// later assignment winning.
func Environment(svc *unit.Service, hidden ...string) ([]string, error) {
	env, err := unitEnviron(nil, svc, hidden...)
	if err != nil {
		return nil, err
	}
	return env.list(), nil
}

// ShouldRestart reports whether a unit whose run ended with result (a
// systemd Result: success, exit-code, signal, core-dump, timeout, ...) is
// restarted under the Restart= policy, following systemd.service(5).
func ShouldRestart(policy, result string) bool { return shouldRestart(policy, result) }

// ExitResult classifies how a unit's main process ended as systemd does: its
// Result (success, exit-code, signal or core-dump; SIGHUP, SIGINT, SIGTERM
// and SIGPIPE are clean exits of a main process) and the status as systemd
// logs it ("code=exited, status=1/FAILURE", "code=killed, status=9/KILL").
// sig is 0 when the process exited with code.
func ExitResult(code int, sig syscall.Signal) (result, status string) {
	e := exitStatus{Code: code, Signal: sig}
	return e.result(true), e.String()
}

// StartLimiter counts a unit's starts against StartLimitBurst= within
// StartLimitIntervalSec=, as systemd's rate limit does. The zero value is
// ready to use; it is not safe for concurrent use.
type StartLimiter struct{ l startLimiter }

// Allow records a start at now and reports whether it is within the limit
// (a burst or interval of zero or less is no limit).
func (s *StartLimiter) Allow(now time.Time, burst int, interval time.Duration) bool {
	return s.l.allow(now, burst, interval)
}

// ParseSignal reads a KillSignal= value: "SIGTERM", "TERM" or "15"; empty
// is SIGTERM.
func ParseSignal(s string) (syscall.Signal, error) { return parseSignal(s) }

// SignalName is "TERM" for SIGTERM, or the number of a signal without a name.
func SignalName(sig syscall.Signal) string { return signalName(sig) }

// LockDir makes a driver's state directory dir with its logs/ and run/
// subdirectories and takes the flock on run/lock that keeps a second
// driver off it: one in another process makes it fail with an error
// wrapping errInUse. Errors name the driver by what. The lock is held
// until the returned file is closed.
func LockDir(dir, what string, errInUse error) (*os.File, error) {
	for _, sub := range []string{"logs", "run"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o750); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	lockPath := filepath.Join(dir, "run", "lock")
	lock, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", errInUse, dir)
		}
		return nil, fmt.Errorf("%s: lock %s: %w", what, lockPath, err)
	}
	return lock, nil
}
