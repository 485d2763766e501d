package unithide

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/flotilla/flotilla/internal/spawn"
)

// serveSpawner is the spawner's process: it covers the paths in its mount
// namespace (a new one, Unshareflags), then starts each command it is
// asked to and replies once it ended, until its input ends and its last
// command ended. Arguments: the parent's PID, the number of paths, the
// paths.
func serveSpawner(a []string, in, out int) error {
	if len(a) < 2 {
		return fmt.Errorf("%d arguments", len(a))
	}
	n, err := strconv.Atoi(a[1])
	if err != nil || n < 0 || len(a) != 2+n {
		return fmt.Errorf("bad path count %q", a[1])
	}
	if err := makeInaccessible(a[2:]); err != nil {
		return err
	}
	if strconv.Itoa(os.Getppid()) != a[0] {
		return fmt.Errorf("the daemon (PID %s) is gone", a[0])
	}
	// One goroutine: a second processor only adds threads spinning to
	// look for work at each wakeup.
	runtime.GOMAXPROCS(1)
	l, err := newSpawnLoop(in, out)
	if err != nil {
		return err
	}
	return l.run()
}

// spawnLoop is the spawner's one goroutine: a single epoll set holds its
// input, and each command's output pipe and pidfd. A wakeup reads every
// request that arrived, starts or kills what they ask, reads what the
// commands wrote, reaps those that ended, and writes all the replies in
// one write. A goroutine per command, waiting on the runtime's poller,
// cost each probe two poller registrations, a wakeup of its own, and the
// runtime's scheduling and sysmon around it: most of the spawner's CPU
// beside the clone itself.
type spawnLoop struct {
	ep, in, out int
	inOpen      bool
	inBuf       []byte
	replies     []byte
	procs       map[int32]*spawned // by output pipe and by pidfd
	live        map[uint64]*spawned
}

// spawned is one command the spawner started and has not replied for.
type spawned struct {
	id     uint64
	fds    spawn.FDs // Out and PidFD -1 once closed
	output []byte
	exited bool
	status syscall.WaitStatus
	killed bool
}

func newSpawnLoop(in, out int) (*spawnLoop, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	l := &spawnLoop{ep: ep, in: in, out: out, inOpen: true, procs: map[int32]*spawned{}, live: map[uint64]*spawned{}}
	if err := syscall.SetNonblock(in, true); err != nil {
		return nil, os.NewSyscallError("fcntl", err)
	}
	if err := l.watch(in); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *spawnLoop) watch(fd int) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
	return os.NewSyscallError("epoll_ctl", unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &ev))
}

// run serves until the input ended and the last command was replied for.
//
// It waits in epoll_wait as a raw system call, which the runtime does not
// see: to the runtime its one goroutine is running, so sysmon keeps to its
// slowest pace (every 10 ms, and then only to ask the goroutine to yield,
// which interrupts the wait). Parked in the runtime's poller instead, or
// blocked in an ordinary system call, the process looked idle, sysmon
// went into its deep sleep, and the first system call of every wakeup
// (the clone's own, in syscall.ForkExec) woke it to run every 20 µs until
// the process was idle again: two thirds of the spawner's CPU. The wait
// ends at least every second so that the runtime is never kept waiting
// long for its processor (a garbage collection) should a signal not reach
// the thread.
func (l *spawnLoop) run() error {
	evs := make([]unix.EpollEvent, 128)
	for l.inOpen || len(l.live) > 0 {
		n, err := epollWaitRaw(l.ep, evs, 1000)
		if err == syscall.EINTR || n == 0 {
			runtime.Gosched() // the runtime asked for the processor
			continue
		}
		if err != nil {
			return os.NewSyscallError("epoll_wait", err)
		}
		if err := l.handle(evs[:n]); err != nil {
			return err
		}
	}
	return nil
}

// epollWaitRaw is epoll_pwait with no signal mask, as a raw system call
// (see run).
func epollWaitRaw(ep int, evs []unix.EpollEvent, msec int) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(ep), uintptr(unsafe.Pointer(&evs[0])), uintptr(len(evs)), uintptr(msec), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// handle carries out what a wakeup's events say, and writes the replies.
func (l *spawnLoop) handle(evs []unix.EpollEvent) error {
	for _, ev := range evs {
		if int(ev.Fd) == l.in {
			if err := l.readRequests(); err != nil {
				return err
			}
			continue
		}
		if p := l.procs[ev.Fd]; p != nil {
			l.progress(p, int(ev.Fd))
		}
	}
	if len(l.replies) > 0 {
		if err := writeAll(l.out, l.replies); err != nil {
			return err
		}
		l.replies = l.replies[:0]
	}
	return nil
}

// readRequests reads what input there is and carries out each whole
// request in it.
func (l *spawnLoop) readRequests() error {
	var buf [64 << 10]byte
	for {
		n, err := syscall.Read(l.in, buf[:])
		if err == syscall.EINTR {
			continue
		}
		if err == syscall.EAGAIN {
			break
		}
		if err != nil {
			return os.NewSyscallError("read", err)
		}
		if n == 0 { // the supervisor closed it: end once the commands have
			l.inOpen = false
			unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, l.in, nil)
			break
		}
		l.inBuf = append(l.inBuf, buf[:n]...)
	}
	b := l.inBuf
	for {
		body, rest, ok, err := nextFrame(b)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		b = rest
		req, err := decodeRequest(body)
		if err != nil {
			return err
		}
		if req.Kill {
			l.kill(req.ID)
		} else {
			l.start(&req)
		}
	}
	l.inBuf = append(l.inBuf[:0], b...)
	if !l.inOpen && len(l.inBuf) > 0 {
		return fmt.Errorf("the input ends within a frame")
	}
	return nil
}

// start starts one command, or replies why it could not.
func (l *spawnLoop) start(req *spawnRequest) {
	cred, err := credential(req.UID, req.GID, req.Groups)
	var fds spawn.FDs
	if err == nil {
		fds, err = spawn.StartFDs(&spawn.Attr{Path: req.Path, Argv: req.Args, Env: req.Env, Dir: req.Dir, Cred: cred})
	}
	if err != nil {
		l.replies = appendReply(l.replies, &spawnReply{ID: req.ID, Err: err.Error()})
		return
	}
	p := &spawned{id: req.ID, fds: fds}
	l.live[p.id] = p
	l.procs[int32(fds.Out)] = p
	l.watch(fds.Out)
	if fds.PidFD >= 0 {
		l.procs[int32(fds.PidFD)] = p
		l.watch(fds.PidFD)
	}
}

// kill kills the process group of a command not yet replied for, and
// stops reading its output (a process out of its group may hold the
// pipe); its reply comes once it is reaped.
func (l *spawnLoop) kill(id uint64) {
	p := l.live[id]
	if p == nil || p.killed {
		return
	}
	p.killed = true
	if !p.exited { // once reaped its PID may be another's
		syscall.Kill(-p.fds.Pid, syscall.SIGKILL)
	}
	l.closeFD(&p.fds.Out)
	l.progress(p, -1)
}

// progress reads what fd of p has for it (its output, or its pidfd's
// exit), and replies for p once it exited and its output ended.
func (l *spawnLoop) progress(p *spawned, fd int) {
	switch {
	case fd < 0:
	case fd == p.fds.Out:
		l.readOutput(p)
	case fd == p.fds.PidFD:
		l.reap(p, syscall.WNOHANG)
	}
	if p.fds.Out >= 0 || !p.exited && p.fds.PidFD >= 0 {
		return
	}
	if !p.exited { // a kernel without pidfds: the output ended, so wait
		l.reap(p, 0)
	}
	delete(l.live, p.id)
	l.replies = appendReply(l.replies, &spawnReply{ID: p.id, Status: int(p.status), Output: string(p.output)})
}

// readOutput reads p's output until the pipe is empty, keeping the first
// maxSpawnOutput bytes, and closes it at its end.
func (l *spawnLoop) readOutput(p *spawned) {
	var buf [4096]byte
	for {
		n, err := syscall.Read(p.fds.Out, buf[:])
		if err == syscall.EINTR {
			continue
		}
		if err == syscall.EAGAIN {
			return
		}
		if n > 0 {
			if room := maxSpawnOutput - len(p.output); room > 0 {
				p.output = append(p.output, buf[:min(n, room)]...)
			}
			continue
		}
		l.closeFD(&p.fds.Out) // its end, or an error reading it: the same to a probe
		return
	}
}

// reap reaps p if it exited (with flags 0: once it has), and closes its
// pidfd.
func (l *spawnLoop) reap(p *spawned, flags int) {
	for {
		pid, err := syscall.Wait4(p.fds.Pid, &p.status, flags, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid == 0 && err == nil {
			return // not yet (a pidfd's spurious wakeup)
		}
		if err != nil {
			p.status = syscall.WaitStatus(0xff << 8) // not ours to reap: cannot be; an exit of 255 says so
		}
		break
	}
	p.exited = true
	l.closeFD(&p.fds.PidFD)
}

// closeFD closes *fd (which takes it out of the epoll set) and forgets it.
func (l *spawnLoop) closeFD(fd *int) {
	if *fd < 0 {
		return
	}
	delete(l.procs, int32(*fd))
	syscall.Close(*fd)
	*fd = -1
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := syscall.Write(fd, b)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return os.NewSyscallError("write", err)
		}
		b = b[n:]
	}
	return nil
}
