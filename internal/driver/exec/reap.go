package execdriver

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/flotilla/flotilla/internal/spawn"
	"golang.org/x/sys/unix"
)

// children is the set of processes the driver started and has not yet
// reaped. A process that runs as a child subreaper (the supervisor) inherits
// the orphans of its units' processes and must reap them, but must not reap
// its own children, whose exit statuses the units' goroutines wait for:
// starts hold the lock shared, a reaping pass holds it exclusively.
type children struct {
	lock sync.RWMutex // shared: a start in progress; exclusive: ReapOrphans

	mu   sync.Mutex
	pids map[int]bool
}

func (c *children) add(pid int) {
	c.mu.Lock()
	c.pids[pid] = true
	c.mu.Unlock()
}

func (c *children) remove(pid int) {
	c.mu.Lock()
	delete(c.pids, pid)
	c.mu.Unlock()
}

func (c *children) has(pid int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pids[pid]
}

// ReapOrphans reaps the exited children of this process that the driver did
// not start: the orphans of units' processes, which the kernel hands to a
// child subreaper (prctl PR_SET_CHILD_SUBREAPER) instead of init. It returns
// how many it reaped. A process that is not a subreaper has none; call it
// when SIGCHLD arrives.
func (d *Driver) ReapOrphans() int {
	d.kids.lock.Lock()
	defer d.kids.lock.Unlock()
	n := 0
	for _, pid := range childPids() {
		if d.kids.has(pid) {
			continue
		}
		var ws syscall.WaitStatus
		if got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); err == nil && got == pid {
			n++
		}
	}
	return n
}

// childPids lists this process's children, from each thread's
// /proc/self/task/<tid>/children, or by walking /proc where the kernel does
// not provide those files. The children files are read by hand: procfs
// (github.com/prometheus/procfs) has no reader for them, and finding the
// children through it would mean the walk of every process's stat that the
// files spare.
func childPids() []int {
	tasks, err := os.ReadDir("/proc/self/task")
	if err == nil {
		var pids []int
		ok := true
		for _, t := range tasks {
			data, err := os.ReadFile("/proc/self/task/" + t.Name() + "/children")
			if err != nil {
				if os.IsNotExist(err) && t.Name() == strconv.Itoa(os.Getpid()) {
					ok = false // no CONFIG_PROC_CHILDREN
					break
				}
				continue // the thread ended meanwhile
			}
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids = append(pids, pid)
				}
			}
		}
		if ok {
			return pids
		}
	}
	self := os.Getpid()
	var pids []int
	for _, pid := range allPids() {
		if st, err := readProcStat(pid); err == nil && st.ppid == self {
			pids = append(pids, pid)
		}
	}
	return pids
}

// awaitExit returns once the child pid has exited, leaving it to be reaped.
// It waits through the runtime's poller on a pidfd, so that the processes
// of a thousand units do not hold a thousand threads blocked in wait (as
// os.Process.Wait alone would); where pidfds do not work it returns at
// once, false, and the caller's Wait blocks as before.
func awaitExit(pid int) bool {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return false
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	return spawn.AwaitExit(f)
}
