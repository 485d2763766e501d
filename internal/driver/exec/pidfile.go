package execdriver

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// pgroup is a process group a unit started: the group's ID (the pid of its
// first process) and that process's start time in clock ticks since boot
// (/proc/<pid>/stat field 22), which tells it apart from a later process
// that reuses the pid.
type pgroup struct {
	pgid  int
	start uint64
}

// writePidFile records the unit's live process groups in path, one
// "<pgid> <start time>" line each; the first is the main process's group when
// there is one. With no groups the file is removed. The file is replaced
// atomically, so a crash leaves either the old or the new content.
func writePidFile(path string, groups []pgroup) error {
	if len(groups) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	var b bytes.Buffer
	for _, g := range groups {
		fmt.Fprintf(&b, "%d %d\n", g.pgid, g.start)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// readPidFile parses a file written by writePidFile.
func readPidFile(path string) ([]pgroup, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var groups []pgroup
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("%s:%d: want \"<pgid> <start time>\", got %q", path, i+1, line)
		}
		pgid, err1 := strconv.Atoi(f[0])
		start, err2 := strconv.ParseUint(f[1], 10, 64)
		if err1 != nil || err2 != nil || pgid <= 1 {
			return nil, fmt.Errorf("%s:%d: bad entry %q", path, i+1, line)
		}
		groups = append(groups, pgroup{pgid: pgid, start: start})
	}
	return groups, nil
}

// procStat is what the driver needs from /proc/<pid>/stat.
type procStat struct {
	state byte   // field 3: R, S, D, Z, ...
	ppid  int    // field 4
	pgrp  int    // field 5
	start uint64 // field 22, clock ticks after boot
}

// procFS is /proc, through procfs.
var procFS = sync.OnceValues(procfs.NewDefaultFS)

// readProcStat reads /proc/<pid>/stat. procfs parses it (counting the
// fields from the last ')', as the command name may hold spaces and
// parentheses); its Starttime is field 22 as the kernel writes it, in clock
// ticks after boot, the unit pid files record start times in.
func readProcStat(pid int) (procStat, error) {
	fs, err := procFS()
	if err != nil {
		return procStat{}, err
	}
	p, err := fs.Proc(pid)
	if err != nil {
		return procStat{}, err
	}
	st, err := p.Stat()
	if err != nil {
		return procStat{}, err
	}
	if st.State == "" {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no state", pid)
	}
	return procStat{state: st.State[0], ppid: st.PPID, pgrp: st.PGRP, start: st.Starttime}, nil
}

// allPids lists the processes in /proc.
func allPids() []int {
	fs, err := procFS()
	if err != nil {
		return nil
	}
	procs, err := fs.AllProcs()
	if err != nil {
		return nil
	}
	pids := make([]int, len(procs))
	for i, p := range procs {
		pids[i] = p.PID
	}
	return pids
}

// groupExists reports whether any process, zombies included, is in the
// process group.
func groupExists(pgid int) bool {
	return syscall.Kill(-pgid, 0) != syscall.ESRCH
}

// liveGroups is a view of which process groups hold a process that is not a
// zombie, shared by all units and refreshed at most every maxAge. A group
// that still exists after its processes were killed may hold only zombies:
// orphans that an init which reaps slowly (or never) keeps around. Finding
// them takes a walk through all of /proc, which is why the walk is shared
// and only done for groups that kill(2) says still exist.
type liveGroups struct {
	maxAge time.Duration

	mu   sync.Mutex
	at   time.Time
	live map[int]bool
}

// has reports whether the group has a live member as of a recent walk.
func (l *liveGroups) has(pgid int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.live == nil || time.Since(l.at) > l.maxAge {
		l.live, l.at = scanLiveGroups(), time.Now()
	}
	return l.live[pgid]
}

// scanLiveGroups walks /proc for the process groups with a non-zombie member.
func scanLiveGroups() map[int]bool {
	live := make(map[int]bool)
	for _, pid := range allPids() {
		if st, err := readProcStat(pid); err == nil && st.state != 'Z' {
			live[st.pgrp] = true
		}
	}
	return live
}

// killStale SIGKILLs the process groups recorded in pid files left in runDir
// by an earlier driver that did not stop its units (it crashed or was
// killed), and removes the files. A group is killed when its first process
// still runs with the recorded start time, or when that pid is gone: the
// kernel does not reuse a pid while a process group of that ID exists, so
// whatever is still in the group belongs to the old unit. A pid now used by a
// different process means the old group is empty.
func killStale(runDir string, log *slog.Logger) {
	tmps, _ := filepath.Glob(filepath.Join(runDir, "*.pid.tmp"))
	for _, p := range tmps {
		os.Remove(p)
	}
	paths, _ := filepath.Glob(filepath.Join(runDir, "*.pid"))
	for _, path := range paths {
		name := strings.TrimSuffix(filepath.Base(path), ".pid")
		groups, err := readPidFile(path)
		if err != nil {
			log.Warn("ignoring unreadable pid file", "unit", name, "err", err)
		}
		for _, g := range groups {
			st, err := readProcStat(g.pgid)
			if err == nil && st.start != g.start {
				continue // pid reused: the old group is gone
			}
			if err := syscall.Kill(-g.pgid, syscall.SIGKILL); err == nil {
				log.Warn("killed process group left running by a previous flotilla", "unit", name, "pgid", g.pgid)
			}
		}
		if err := os.Remove(path); err != nil {
			log.Warn("cannot remove stale pid file", "unit", name, "err", err)
		}
	}
}
