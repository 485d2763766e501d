package execdriver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flotilla/flotilla/internal/driver/service"
	"github.com/flotilla/flotilla/internal/monotime"
	"github.com/flotilla/flotilla/internal/unit"
)

// A handover passes a running driver to the next image of the same process
// (the supervisor re-executing itself into a new binary; see
// internal/supervisor): Handover freezes every unit and describes it, the
// process calls execve, which keeps its PID, its children and the
// descriptors without close-on-exec, and Adopt, in the new image, goes on
// from that description. The units' processes are never touched: they
// keep their PIDs, and their output pipes are read on by the new image.

// HandoverFormat is the version of the Handover description; Adopt refuses
// another.
const HandoverFormat = 1

// ErrBusy is returned by Handover when a unit stayed in a phase that cannot
// be handed over (starting, stopping, running a control command) until the
// context ended.
var ErrBusy = errors.New("execdriver: a unit is starting or stopping")

// Handover describes a driver for the next image of its process.
type Handover struct {
	Format int    `json:"format"`
	Dir    string `json:"dir"`
	// LockFD is the descriptor of the state directory's lock, inherited.
	LockFD int         `json:"lockFD"`
	Logs   LogConfig   `json:"logs"`
	Fence  FenceState  `json:"fence"`
	Units  []UnitState `json:"units"`
}

// FenceState is the fence (see Driver.Fence).
type FenceState struct {
	Deadline int64    `json:"deadline"` // CLOCK_MONOTONIC, ns; kept across execve
	Names    []string `json:"names,omitempty"`
	Expired  bool     `json:"expired,omitempty"`
}

// UnitState is one unit, in a phase that has no timer running but
// RestartSec= and no command but the main process.
type UnitState struct {
	Name string     `json:"name"`
	File *unit.File `json:"file"`          // the newest definition
	Cur  *unit.File `json:"cur,omitempty"` // the current run's definition
	// Phase is dead, running, exited or auto-restart.
	Phase   string     `json:"phase"`
	Result  string     `json:"result,omitempty"`
	Message string     `json:"message,omitempty"`
	Since   time.Time  `json:"since"`
	Main    *ProcState `json:"main,omitempty"`
	// Groups are the process groups of the run, as in its pid file.
	Groups []GroupState `json:"groups,omitempty"`
	// Pipes are the output pipes still read: the main process's and those
	// held open by what earlier processes left running.
	Pipes        []PipeState   `json:"pipes,omitempty"`
	Restarts     int           `json:"restarts"`
	LimiterBegin time.Time     `json:"limiterBegin"`
	LimiterN     int           `json:"limiterN"`
	RestartIn    time.Duration `json:"restartIn,omitempty"` // auto-restart: what is left of RestartSec=
	Env          *EnvState     `json:"env,omitempty"`
	// Ready, StatusText and WatchdogLimit are the run's sd_notify state:
	// READY=1 came, the last STATUS=, the watchdog's limit (the watchdog
	// starts over in the new image).
	Ready         bool          `json:"ready,omitempty"`
	StatusText    string        `json:"statusText,omitempty"`
	WatchdogLimit time.Duration `json:"watchdogLimit,omitempty"`
	// Health is what the run's [X-Check] checks had decided (Config.Checks),
	// to resume them from; Restarting says the unit is being restarted
	// for being unhealthy (OnUnhealthy=restart).
	Health     string `json:"health,omitempty"`
	Restarting bool   `json:"restarting,omitempty"`
}

// ProcState is the unit's main process, a child of the process.
type ProcState struct {
	PID   int          `json:"pid"`
	Label string       `json:"label"`
	Cmd   unit.Command `json:"cmd"`
	Argv  []string     `json:"argv"`
}

// GroupState is a process group, as in a pid file.
type GroupState struct {
	PGID  int    `json:"pgid"`
	Start uint64 `json:"start"`
}

// PipeState is the read end of an output pipe: its inherited descriptor,
// the pid its lines are logged under, and what was read of it but not yet
// logged (the start of a line).
type PipeState struct {
	FD   int    `json:"fd"`
	PID  int    `json:"pid"`
	Main bool   `json:"main,omitempty"`
	Rest []byte `json:"rest,omitempty"`
}

// EnvState is how the run's processes are started (execEnv).
type EnvState struct {
	Cred *syscall.Credential `json:"cred,omitempty"`
	Dir  string              `json:"dir"`
	Base []string            `json:"base"`
}

// The phases a unit may be handed over in.
var handoverPhases = map[phase]string{
	phaseDead:        "dead",
	phaseRunning:     "running",
	phaseExited:      "exited",
	phaseAutoRestart: "auto-restart",
}

func phaseNamed(name string) (phase, bool) {
	for p, n := range handoverPhases {
		if n == name {
			return p, true
		}
	}
	return 0, false
}

// Validate checks that h can be adopted, naming what is wrong.
func (h *Handover) Validate() error {
	if h.Format != HandoverFormat {
		return fmt.Errorf("handover format %d, this build reads %d", h.Format, HandoverFormat)
	}
	if h.LockFD < 0 {
		return fmt.Errorf("handover: lock descriptor %d", h.LockFD)
	}
	seen := map[string]bool{}
	fds := map[int]bool{h.LockFD: true}
	for i, u := range h.Units {
		where := fmt.Sprintf("handover: unit %d (%q)", i, u.Name)
		if err := service.CheckName(u.Name); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if seen[u.Name] {
			return fmt.Errorf("%s: listed twice", where)
		}
		seen[u.Name] = true
		if u.File == nil || u.File.Name != u.Name {
			return fmt.Errorf("%s: no unit file of that name", where)
		}
		ph, ok := phaseNamed(u.Phase)
		if !ok {
			return fmt.Errorf("%s: phase %q cannot be handed over", where, u.Phase)
		}
		switch ph {
		case phaseRunning:
			if u.Main == nil || u.Main.PID <= 1 {
				return fmt.Errorf("%s: running without a main process", where)
			}
			fallthrough
		case phaseExited:
			if u.Cur == nil || u.Env == nil {
				return fmt.Errorf("%s: %s without the run's definition and environment", where, u.Phase)
			}
		default:
			if u.Main != nil || u.Cur != nil {
				return fmt.Errorf("%s: %s with a run", where, u.Phase)
			}
		}
		if u.Main != nil && ph != phaseRunning {
			return fmt.Errorf("%s: a main process in phase %s", where, u.Phase)
		}
		for _, p := range u.Pipes {
			if p.FD < 0 || fds[p.FD] {
				return fmt.Errorf("%s: pipe descriptor %d", where, p.FD)
			}
			fds[p.FD] = true
			if p.Main && (u.Main == nil || p.PID != u.Main.PID) {
				return fmt.Errorf("%s: main pipe of pid %d, not of the main process", where, p.PID)
			}
		}
		for _, g := range u.Groups {
			if g.PGID <= 1 {
				return fmt.Errorf("%s: process group %d", where, g.PGID)
			}
		}
	}
	return nil
}

// handoverState describes the unit and pauses its output copiers; the
// unit's goroutine calls it. A unit in another phase than those of
// handoverPhases, or with a control process, is ErrBusy.
func (s *supervisor) handoverState(ctx context.Context) (UnitState, error) {
	name, ok := handoverPhases[s.ph]
	if !ok || s.control != nil {
		active, sub := activeSub(s.ph, s.result)
		return UnitState{}, fmt.Errorf("%w: %s is %s/%s", ErrBusy, s.name, active, sub)
	}
	if s.cg != nil {
		return UnitState{}, fmt.Errorf("%s runs in a cgroup of its own (CPUQuota= or MemoryMax=), which an upgrade in place does not carry over: restart the unit, or the supervisor, to run it on the new binary", s.name)
	}
	if s.quit {
		return UnitState{}, fmt.Errorf("%w: %s is being unloaded", ErrBusy, s.name)
	}
	s.mu.Lock()
	since := s.status.Since
	s.mu.Unlock()
	limBegin, limN := s.limiter.State()
	u := UnitState{
		Name: s.name, File: s.file, Cur: s.cur, Phase: name, Result: s.result, Message: s.message, Since: since,
		Restarts: s.restarts, LimiterBegin: limBegin, LimiterN: limN,
		Ready: s.ready, StatusText: s.statusText, WatchdogLimit: s.wdLimit,
	}
	if s.ph == phaseAutoRestart {
		u.RestartIn = max(time.Until(s.restartAt), 0)
	}
	if s.env != nil {
		u.Env = &EnvState{Cred: s.env.cred, Dir: s.env.dir, Base: s.env.base}
	}
	if s.main != nil {
		u.Main = &ProcState{PID: s.main.pid, Label: s.main.label, Cmd: s.main.cmd, Argv: s.main.argv}
	}
	for _, g := range s.groups {
		u.Groups = append(u.Groups, GroupState{PGID: g.pgid, Start: g.start})
	}

	s.pipesMu.Lock()
	pipes := maps.Clone(s.pipes)
	s.pipesMu.Unlock()
	for p := range pipes {
		p.pause()
	}
	s.paused = s.paused[:0]
	var waitErr error
	for p, pid := range pipes {
		pp := pausedPipe{out: p, pid: pid}
		if s.main != nil && p == s.main.out {
			pp.copied = s.main.copied
		}
		select {
		case pp.rest = <-p.rest:
			pp.done = true
		case <-p.closed:
			continue // ended before it paused: nothing to hand over
		case <-ctx.Done():
			waitErr = fmt.Errorf("%s: its log copier did not pause: %w", s.name, ctx.Err())
		}
		s.paused = append(s.paused, pp)
	}
	if waitErr != nil {
		s.resumePipes()
		return UnitState{}, waitErr
	}
	for _, pp := range s.paused {
		fd, err := FdOf(pp.out.f)
		if err != nil {
			s.resumePipes()
			return UnitState{}, fmt.Errorf("%s: output pipe: %w", s.name, err)
		}
		u.Pipes = append(u.Pipes, PipeState{FD: fd, PID: pp.pid, Main: s.main != nil && pp.out == s.main.out, Rest: pp.rest})
	}
	slices.SortFunc(u.Pipes, func(a, b PipeState) int { return a.FD - b.FD })
	return u, nil
}

// pausedPipe is an output pipe whose copier a handover paused.
type pausedPipe struct {
	out    *outPipe
	pid    int
	copied chan struct{}
	rest   []byte
	done   bool // the copier has paused and handed over rest
}

// resumePipes starts again the copiers a handover paused (it did not
// happen).
func (s *supervisor) resumePipes() {
	for _, pp := range s.paused {
		pp.out.resume()
		if pp.done {
			s.copyPipe(pp.out, pp.pid, pp.copied, pp.rest)
			continue
		}
		go func() { // still pausing: restart it once it has
			select {
			case rest := <-pp.out.rest:
				pp.out.resume()
				s.copyPipe(pp.out, pp.pid, pp.copied, rest)
			case <-pp.out.closed:
			}
		}()
	}
	s.paused = nil
}

// FdOf returns the descriptor of f (a file, or a listener or connection of
// package net) without making it blocking (as os.File's Fd does).
func FdOf(f syscall.Conn) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	if err := rc.Control(func(u uintptr) { fd = int(u) }); err != nil {
		return -1, err
	}
	return fd, nil
}

// SetCloexec sets or clears close-on-exec on fd.
func SetCloexec(fd int, on bool) error {
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil {
		return err
	}
	if on {
		flags |= unix.FD_CLOEXEC
	} else {
		flags &^= unix.FD_CLOEXEC
	}
	_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags)
	return err
}

// Handover freezes every unit and describes the driver for the next image
// of this process (see Adopt), with the descriptors it needs (the lock,
// the output pipes) made inheritable across execve. Until resume is
// called nothing changes: no unit starts or stops, no process is reaped,
// Load is refused. Call resume when the execve failed: the units go on as
// if nothing happened. It fails, having resumed, when a unit stays
// starting or stopping (ErrBusy) until ctx ends.
func (d *Driver) Handover(ctx context.Context) (h *Handover, resume func(), err error) {
	d.mu.Lock()
	if d.closed || d.handing {
		d.mu.Unlock()
		return nil, nil, fmt.Errorf("handover: %w", ErrClosed)
	}
	d.handing = true
	d.mu.Unlock()
	// No process reaped from now on whose exit its unit has not seen.
	for !d.reapGate.TryLock() {
		select {
		case <-ctx.Done():
			d.mu.Lock()
			d.handing = false
			d.mu.Unlock()
			return nil, nil, fmt.Errorf("handover: a process exit is being handled: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	thaw := make(chan struct{})
	var inherited []int
	resume = func() {
		for _, fd := range inherited {
			SetCloexec(fd, true)
		}
		close(thaw)
		d.reapGate.Unlock()
		d.mu.Lock()
		d.handing = false
		d.mu.Unlock()
	}
	fail := func(err error) (*Handover, func(), error) {
		resume()
		return nil, nil, fmt.Errorf("handover: %w", err)
	}

	lockFD, err := FdOf(d.lock)
	if err != nil {
		return fail(fmt.Errorf("lock: %w", err))
	}
	h = &Handover{Format: HandoverFormat, Dir: d.cfg.Dir, LockFD: lockFD, Logs: d.LogConfig()}
	f := &d.fence
	f.mu.Lock()
	h.Fence = FenceState{Deadline: int64(f.deadline), Names: slices.Sorted(maps.Keys(f.names)), Expired: f.expired}
	f.mu.Unlock()

	d.mu.Lock()
	sups := slices.SortedFunc(maps.Values(d.units), func(a, b *supervisor) int { return strings.Compare(a.name, b.name) })
	d.mu.Unlock()
	for _, s := range sups {
		for {
			var st UnitState
			err := s.call(request{kind: reqHandover, state: &st, thaw: thaw, ctx: ctx})
			if errors.Is(err, ErrBusy) && ctx.Err() == nil {
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
				continue
			}
			if errors.Is(err, errGone) {
				break // unloaded meanwhile
			}
			if err != nil {
				return fail(err)
			}
			h.Units = append(h.Units, st)
			break
		}
	}
	fds := []int{lockFD}
	for _, u := range h.Units {
		for _, p := range u.Pipes {
			fds = append(fds, p.FD)
		}
	}
	for _, fd := range fds {
		if err := SetCloexec(fd, false); err != nil {
			return fail(fmt.Errorf("descriptor %d: %w", fd, err))
		}
		inherited = append(inherited, fd)
	}
	return h, resume, nil
}

// Adopt makes the driver a Handover describes, in the new image of the
// process that made it: it takes the state directory's lock from the
// inherited descriptor (killing nothing: the units' processes are this
// process's children still) and goes on running each unit where it was,
// waiting for its main process and reading its output pipes.
func Adopt(cfg Config, h *Handover) (*Driver, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := h.Validate(); err != nil {
		return nil, err
	}
	if filepath.Clean(h.Dir) != cfg.Dir {
		return nil, fmt.Errorf("handover: of directory %s, not %s", h.Dir, cfg.Dir)
	}
	lockPath := filepath.Join(cfg.Dir, "run", "lock")
	var fst, pst unix.Stat_t
	if err := unix.Fstat(h.LockFD, &fst); err != nil {
		return nil, fmt.Errorf("handover: lock descriptor %d: %w", h.LockFD, err)
	}
	if err := unix.Stat(lockPath, &pst); err != nil || fst.Dev != pst.Dev || fst.Ino != pst.Ino {
		return nil, fmt.Errorf("handover: descriptor %d is not %s", h.LockFD, lockPath)
	}
	// Check every inherited descriptor before touching any, so that a
	// handover refused here leaves them as they were for the previous
	// binary to adopt instead.
	for _, u := range h.Units {
		for _, p := range u.Pipes {
			var st unix.Stat_t
			if err := unix.Fstat(p.FD, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
				return nil, fmt.Errorf("handover: unit %s: descriptor %d is not an inherited pipe (%v)", u.Name, p.FD, err)
			}
		}
	}
	lock := os.NewFile(uintptr(h.LockFD), lockPath)
	// The lock is held by the open file the descriptor refers to, which
	// this process kept: taking it again succeeds at once.
	if err := syscall.Flock(h.LockFD, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return nil, fmt.Errorf("handover: lock %s: %w", lockPath, err)
	}
	log := cfg.Logger.With("machine", cfg.Machine)
	cgroups := detectCgroups(cfg.CgroupRoot, cfg.CgroupParent)
	d := newDriver(cfg, lock, log, cgroups)
	if err := h.Logs.Validate(); err == nil {
		d.logs = h.Logs
	}
	d.mu.Lock()
	for _, u := range h.Units {
		s := newSupervisor(d, u.File)
		if err := s.restore(u); err != nil {
			d.mu.Unlock()
			return nil, fmt.Errorf("handover: unit %s: %w", u.Name, err)
		}
		d.units[u.Name] = s
	}
	for _, s := range d.units {
		d.wg.Add(1)
		go s.run()
	}
	d.mu.Unlock()
	if h.Fence.Deadline != 0 && len(h.Fence.Names) > 0 {
		f := &d.fence
		f.mu.Lock()
		f.gen++
		f.deadline = monotime.Time(h.Fence.Deadline)
		f.names = make(map[string]bool, len(h.Fence.Names))
		for _, n := range h.Fence.Names {
			f.names[n] = true
		}
		d.armFence(f.gen) // kills at once what a passed deadline covers
		f.mu.Unlock()
	}
	SetCloexec(h.LockFD, true) // no unit's process inherits it
	log.Info("adopted the units of the previous image", "units", len(h.Units))
	return d, nil
}

// restore sets the unit's state from u, a unit of a handover, and starts
// reading its pipes and waiting for its main process.
func (s *supervisor) restore(u UnitState) error {
	ph, _ := phaseNamed(u.Phase)
	s.cur, s.ph = u.Cur, ph
	s.result, s.message = u.Result, u.Message
	s.restarts = u.Restarts
	s.limiter = service.RestoreStartLimiter(u.LimiterBegin, u.LimiterN)
	for _, g := range u.Groups {
		s.groups = append(s.groups, pgroup{pgid: g.PGID, start: g.Start})
	}
	s.written = slices.Clone(s.groups)
	if u.Env != nil {
		s.env = &execEnv{cred: u.Env.Cred, dir: u.Env.Dir, base: u.Env.Base}
	}
	var mainOut *outPipe
	var mainCopied chan struct{}
	for _, p := range u.Pipes {
		if err := unix.SetNonblock(p.FD, true); err != nil {
			return fmt.Errorf("pipe descriptor %d: %w", p.FD, err)
		}
		SetCloexec(p.FD, true)
		out := newOutPipe(os.NewFile(uintptr(p.FD), fmt.Sprintf("%s output of %d", s.name, p.PID)))
		var copied chan struct{}
		if p.Main {
			mainOut, mainCopied = out, make(chan struct{})
			copied = mainCopied
		}
		s.copyPipe(out, p.PID, copied, p.Rest)
	}
	if u.Main != nil {
		proc0, err := os.FindProcess(u.Main.PID)
		if err != nil {
			return fmt.Errorf("main process %d: %w", u.Main.PID, err)
		}
		if mainOut == nil { // its pipe had ended: nothing more to log
			mainOut = &outPipe{ended: true, rest: make(chan []byte, 1), closed: make(chan struct{})}
			mainCopied = make(chan struct{})
			close(mainCopied)
		}
		p := &proc{pid: u.Main.PID, label: u.Main.Label, cmd: u.Main.Cmd, argv: u.Main.Argv, os: proc0, out: mainOut, copied: mainCopied}
		s.main = p
		s.d.kids.add(p.pid)
		go s.wait(p)
		// The socket's name is the previous image's: bind it again, for
		// the messages of the main process.
		if s.cur != nil && unit.NotifyAccessOf(&s.cur.Service) != "none" {
			s.d.notifyMu.Lock()
			_, err := s.d.notifySocketLocked()
			s.d.notifyMu.Unlock()
			if err != nil {
				s.slog.Error("sd_notify messages of the unit are lost", "err", err)
			}
			s.watchNotify(p.pid)
		}
		if s.wdLimit = u.WatchdogLimit; s.wdLimit > 0 && ph == phaseRunning {
			s.wdTimer.Reset(s.wdLimit)
		}
	}
	s.ready, s.statusText = u.Ready, u.StatusText
	s.healthFrom, s.restarting = u.Health, u.Restarting
	if ph == phaseAutoRestart {
		s.restartAt = time.Now().Add(u.RestartIn)
		s.timer.Reset(max(u.RestartIn, time.Millisecond))
	}
	active, _ := activeSub(ph, u.Result)
	s.status = s.compute(unit.Status{Active: active, Since: u.Since})
	return nil
}
