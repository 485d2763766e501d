// Package spawn starts short-lived commands (the [X-Check] Exec= probes)
// and waits for them at little cost to the process starting them: one
// syscall.ForkExec (a vfork on Linux) with the process's pidfd from the
// clone itself, the command's output read and its exit awaited through
// the runtime's poller, no thread blocked in wait, no goroutine of its own
// and no /dev/null opened at each start. os/exec, for the same command,
// opens /dev/null, starts a goroutine to copy the output, and waits in a
// blocking waitid, whose thread the runtime hands its processor off and
// wakes again; run two hundred times a second that was most of a probe
// spawner's CPU.
package spawn

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Attr is what to run: Path with Argv and Env, in Dir (none: the
// caller's), as Cred (nil: the caller's user), in the namespaces
// Unshareflags makes (unithide.Wrap's CLONE_NEWNS).
type Attr struct {
	Path         string
	Argv         []string
	Env          []string
	Dir          string
	Cred         *syscall.Credential
	Unshareflags uintptr
}

// A Proc is a started command.
type Proc struct {
	// Pid is its process ID, also its process group's: it leads a group
	// of its own.
	Pid int

	out    *os.File // the read end of its stdout and stderr
	pidfd  *os.File
	max    int
	mu     sync.Mutex
	reaped bool // set before it is reaped: no kill of its group after
}

var devNull = sync.OnceValues(func() (int, error) {
	return syscall.Open(os.DevNull, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
})

// Start starts a in a process group of its own, with SIGKILL as its
// parent-death signal (of the calling thread, as os/exec's Pdeathsig),
// its standard input /dev/null and its standard output and error one
// pipe, of which Wait keeps the first max bytes. Nothing of it is
// reaped until Wait, so a caller that reaps other children (a child
// subreaper) must leave Pid alone until Wait returns.
func Start(a *Attr, max int) (*Proc, error) {
	fds, err := StartFDs(a)
	if err != nil {
		return nil, err
	}
	pr := &Proc{Pid: fds.Pid, max: max}
	// Non-blocking, both are read through the runtime's poller.
	pr.out = os.NewFile(uintptr(fds.Out), "|0")
	if fds.PidFD >= 0 {
		pr.pidfd = os.NewFile(uintptr(fds.PidFD), "pidfd")
	}
	return pr, nil
}

// FDs is a command StartFDs started: its process ID (also its process
// group's), its pidfd (-1 where the kernel gives none) and the read end
// of its output pipe, both non-blocking and close-on-exec, the caller's
// to read, poll and close.
type FDs struct {
	Pid, PidFD, Out int
}

// StartFDs starts a as Start does, leaving its pidfd and output to the
// caller: for a process that waits for many commands in one epoll loop of
// its own (the probe spawner) rather than a goroutine and two poller
// registrations per command.
func StartFDs(a *Attr) (FDs, error) {
	null, err := devNull()
	if err != nil {
		return FDs{}, err
	}
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return FDs{}, os.NewSyscallError("pipe2", err)
	}
	pidfd := -1
	pid, err := syscall.ForkExec(a.Path, a.Argv, &syscall.ProcAttr{
		Dir:   a.Dir,
		Env:   a.Env,
		Files: []uintptr{uintptr(null), uintptr(p[1]), uintptr(p[1])},
		Sys: &syscall.SysProcAttr{
			Setpgid:      true,
			Pdeathsig:    syscall.SIGKILL,
			Credential:   a.Cred,
			Unshareflags: a.Unshareflags,
			PidFD:        &pidfd,
		},
	})
	syscall.Close(p[1])
	if err != nil {
		syscall.Close(p[0])
		return FDs{}, &os.PathError{Op: "fork/exec", Path: a.Path, Err: err}
	}
	syscall.SetNonblock(p[0], true) // the child's end blocks, as a program expects
	if pidfd >= 0 {
		syscall.SetNonblock(pidfd, true)
	}
	return FDs{Pid: pid, PidFD: pidfd, Out: p[0]}, nil
}

// Wait reads the command's output until its end, then waits for its exit
// and reaps it, returning its wait status and the first max bytes of its
// output. When ctx ends first its process group is SIGKILLed and the
// output no longer read (a process out of the group may hold the pipe);
// Wait then returns once the command is reaped, with ctx's cause.
func (p *Proc) Wait(ctx context.Context) (syscall.WaitStatus, []byte, error) {
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		if !p.reaped {
			syscall.Kill(-p.Pid, syscall.SIGKILL)
		}
		p.mu.Unlock()
		p.out.SetReadDeadline(time.Now())
	})
	defer stop()
	var out []byte
	var buf [512]byte
	for {
		n, err := p.out.Read(buf[:])
		if room := p.max - len(out); room > 0 && n > 0 {
			out = append(out, buf[:min(n, room)]...)
		}
		if err != nil {
			break
		}
	}
	p.out.Close()
	p.awaitExit()
	p.mu.Lock()
	p.reaped = true
	p.mu.Unlock()
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(p.Pid, &ws, 0, nil)
		if err != syscall.EINTR {
			if err != nil {
				return 0, out, os.NewSyscallError("wait4", err)
			}
			break
		}
	}
	if ctx.Err() != nil {
		return ws, out, context.Cause(ctx)
	}
	return ws, out, nil
}

// awaitExit returns once the command exited, leaving it to be reaped;
// without a pidfd at once (the reaping wait4 then blocks).
func (p *Proc) awaitExit() {
	if p.pidfd != nil {
		AwaitExit(p.pidfd)
		p.pidfd.Close()
	}
}

// AwaitExit returns true once the process of f, a non-blocking pidfd,
// has exited, leaving it to be reaped. It waits through the runtime's
// poller, not in a thread blocked in wait; false, at once, if f cannot be
// polled.
func AwaitExit(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	rc.Read(func(fd uintptr) bool {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		return !errors.Is(err, syscall.EINTR) && (err != nil || info.Signo != 0)
	})
	return true
}

// ExitError is the end of a command that did not exit 0.
type ExitError struct{ Status syscall.WaitStatus }

func (e *ExitError) Error() string {
	ws := e.Status
	switch {
	case ws.Exited():
		return "exit status " + strconv.Itoa(ws.ExitStatus())
	case ws.Signaled():
		return "signal: " + ws.Signal().String()
	}
	return "wait status " + strconv.Itoa(int(ws))
}

// Err is nil for a wait status of exit 0, else an *ExitError.
func Err(ws syscall.WaitStatus) error {
	if ws.Exited() && ws.ExitStatus() == 0 {
		return nil
	}
	return &ExitError{Status: ws}
}
