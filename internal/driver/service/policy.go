package service

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Results, in systemd's vocabulary (the Result= property of a service).
const (
	ResultSuccess       = "success"
	ResultExitCode      = "exit-code"
	ResultSignal        = "signal"
	ResultCoreDump      = "core-dump"
	ResultTimeout       = "timeout"
	ResultStartLimitHit = "start-limit-hit"
	ResultResources     = "resources"
	ResultOOMKill       = "oom-kill" // the kernel's OOM killer killed a process of the unit
	ResultWatchdog      = "watchdog" // no WATCHDOG=1 within WatchdogSec=: killed with SIGABRT
	ResultProtocol      = "protocol" // a Type=notify main process exited cleanly before READY=1
)

// ResultFenced is Flotilla's Result of a run a fence deadline ended (see
// driver.Fencer); FencedMessage is the Status.Message of a unit it killed.
const (
	ResultFenced  = "fenced"
	FencedMessage = "killed: no word from a current leader before the LostAfter= deadline"
)

// ExitStatus is how a process ended.
type ExitStatus struct {
	Code   int            // exit code; meaningful when Signal is 0
	Signal syscall.Signal // the signal that killed the process, 0 if it exited
	Dumped bool           // the process dumped core
}

// ExitStatusOf reads how a process ended from its wait status.
func ExitStatusOf(ws syscall.WaitStatus) ExitStatus {
	if ws.Signaled() {
		return ExitStatus{Signal: ws.Signal(), Dumped: ws.CoreDump()}
	}
	return ExitStatus{Code: ws.ExitStatus()}
}

// Result classifies an exit as systemd does. For a daemon's main process
// (daemon set), being killed by SIGHUP, SIGINT, SIGTERM or SIGPIPE is a clean
// exit; for a command (ExecStartPre=, Type=oneshot's ExecStart=, ...) only
// SIGPIPE is.
func (e ExitStatus) Result(daemon bool) string {
	switch {
	case e.Signal == 0 && e.Code == 0:
		return ResultSuccess
	case e.Signal == 0:
		return ResultExitCode
	case e.Signal == syscall.SIGPIPE:
		return ResultSuccess
	case daemon && (e.Signal == syscall.SIGHUP || e.Signal == syscall.SIGINT || e.Signal == syscall.SIGTERM):
		return ResultSuccess
	case e.Dumped:
		return ResultCoreDump
	}
	return ResultSignal
}

// String formats the status as systemd logs it:
// "code=exited, status=1/FAILURE", "code=killed, status=9/KILL".
func (e ExitStatus) String() string {
	if e.Signal != 0 {
		code := "killed"
		if e.Dumped {
			code = "dumped"
		}
		return fmt.Sprintf("code=%s, status=%d/%s", code, int(e.Signal), SignalName(e.Signal))
	}
	name := exitCodeNames[e.Code]
	if name == "" {
		name = "n/a"
	}
	return fmt.Sprintf("code=exited, status=%d/%s", e.Code, name)
}

// exitCodeNames are the names systemd gives to LSB exit codes.
var exitCodeNames = map[int]string{
	0: "SUCCESS",
	1: "FAILURE",
	2: "INVALIDARGUMENT",
	3: "NOTIMPLEMENTED",
	4: "NOPERMISSION",
	5: "NOTINSTALLED",
	6: "NOTCONFIGURED",
	7: "NOTRUNNING",
}

// ExitResult classifies how a unit's main process ended as systemd does: its
// Result (success, exit-code, signal or core-dump; SIGHUP, SIGINT, SIGTERM
// and SIGPIPE are clean exits of a main process) and the status as systemd
// logs it ("code=exited, status=1/FAILURE", "code=killed, status=9/KILL").
// sig is 0 when the process exited with code.
func ExitResult(code int, sig syscall.Signal) (result, status string) {
	e := ExitStatus{Code: code, Signal: sig}
	return e.Result(true), e.String()
}

// ShouldRestart reports whether a unit whose run ended with result (a
// systemd Result: success, exit-code, signal, core-dump, timeout, ...) is
// restarted under the Restart= policy, following the table in
// systemd.service(5) (a watchdog timeout restarts under always, on-failure,
// on-abnormal and on-watchdog); a start-limit-hit is final whatever the
// policy.
func ShouldRestart(policy, result string) bool {
	if result == ResultStartLimitHit {
		return false
	}
	clean := result == ResultSuccess
	abnormal := result == ResultSignal || result == ResultCoreDump || result == ResultTimeout || result == ResultOOMKill || result == ResultWatchdog
	abort := result == ResultSignal || result == ResultCoreDump
	switch policy {
	case "always":
		return true
	case "on-success":
		return clean
	case "on-failure":
		return !clean
	case "on-abnormal":
		return abnormal
	case "on-abort":
		return abort
	case "on-watchdog":
		return result == ResultWatchdog
	}
	return false // "", "no"
}

// StartLimiter counts starts in a window the way systemd's ratelimit does: a
// window opens at the first start and lasts interval; within it at most burst
// starts are allowed. Refused attempts count too, so a unit that keeps being
// started stays refused until the window ends. The zero value is ready to
// use; it is not safe for concurrent use.
type StartLimiter struct {
	begin time.Time
	n     int
}

// Allow records a start at now and reports whether it is within the limit.
// A burst or interval of zero or less disables the limit.
func (l *StartLimiter) Allow(now time.Time, burst int, interval time.Duration) bool {
	if burst <= 0 || interval <= 0 {
		return true
	}
	if l.begin.IsZero() || now.Sub(l.begin) > interval {
		l.begin, l.n = now, 1
		return true
	}
	l.n++
	return l.n <= burst
}

// State is the limiter's window: when it opened (zero before the first
// start) and the starts counted in it, for RestoreStartLimiter.
func (l *StartLimiter) State() (begin time.Time, n int) { return l.begin, l.n }

// RestoreStartLimiter is a limiter in the state State returned, for a
// process that takes over another's units.
func RestoreStartLimiter(begin time.Time, n int) StartLimiter {
	return StartLimiter{begin: begin, n: n}
}

// signals names the Linux signals a unit may use.
var signals = map[syscall.Signal]string{
	syscall.SIGHUP:    "HUP",
	syscall.SIGINT:    "INT",
	syscall.SIGQUIT:   "QUIT",
	syscall.SIGILL:    "ILL",
	syscall.SIGTRAP:   "TRAP",
	syscall.SIGABRT:   "ABRT",
	syscall.SIGBUS:    "BUS",
	syscall.SIGFPE:    "FPE",
	syscall.SIGKILL:   "KILL",
	syscall.SIGUSR1:   "USR1",
	syscall.SIGSEGV:   "SEGV",
	syscall.SIGUSR2:   "USR2",
	syscall.SIGPIPE:   "PIPE",
	syscall.SIGALRM:   "ALRM",
	syscall.SIGTERM:   "TERM",
	syscall.SIGCHLD:   "CHLD",
	syscall.SIGCONT:   "CONT",
	syscall.SIGSTOP:   "STOP",
	syscall.SIGTSTP:   "TSTP",
	syscall.SIGTTIN:   "TTIN",
	syscall.SIGTTOU:   "TTOU",
	syscall.SIGURG:    "URG",
	syscall.SIGXCPU:   "XCPU",
	syscall.SIGXFSZ:   "XFSZ",
	syscall.SIGVTALRM: "VTALRM",
	syscall.SIGPROF:   "PROF",
	syscall.SIGWINCH:  "WINCH",
	syscall.SIGIO:     "IO",
	syscall.SIGSYS:    "SYS",
}

// SignalName is "TERM" for SIGTERM, or the number for a signal without a name.
func SignalName(sig syscall.Signal) string {
	if n, ok := signals[sig]; ok {
		return n
	}
	return strconv.Itoa(int(sig))
}

// ParseSignal reads KillSignal=: "SIGTERM", "TERM" or "15". Empty means SIGTERM.
func ParseSignal(s string) (syscall.Signal, error) {
	if s == "" {
		return syscall.SIGTERM, nil
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n < 1 || n > 64 {
			return 0, fmt.Errorf("signal number %d out of range 1-64", n)
		}
		return syscall.Signal(n), nil
	}
	name := strings.TrimPrefix(strings.ToUpper(s), "SIG")
	for sig, n := range signals {
		if n == name {
			return sig, nil
		}
	}
	return 0, fmt.Errorf("unknown signal %q", s)
}
