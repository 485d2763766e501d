package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/moby/moby/client"

	"github.com/flotilla/flotilla/internal/driver/service"
	"github.com/flotilla/flotilla/internal/monotime"
)

// The fence file and the watchdog's files, in the state directory.
const (
	fenceFile     = "fence.json"
	fenceLockFile = "run/fence.lock"
	fencePIDFile  = "run/fence.pid"
	fenceLogFile  = "run/fence.log"
)

// Timing of the watchdog.
const (
	fencePoll     = 100 * time.Millisecond // how often it reads the fence file
	fenceRekill   = time.Second            // how often it kills again past the deadline
	fenceIdleExit = 10 * time.Second       // it exits after this long without a fence
)

// fenceState is the fence file: the deadline (CLOCK_MONOTONIC, which every
// process on the machine reads alike) of the named units of a machine.
type fenceState struct {
	Machine  string        `json:"machine"`
	Host     string        `json:"host,omitempty"`
	Deadline monotime.Time `json:"deadline"`
	Units    []string      `json:"units"`
}

func (s fenceState) active() bool { return s.Deadline != 0 && len(s.Units) > 0 }

// fence is the driver's copy of the deadline, enforced by its own timer.
type fence struct {
	mu       sync.Mutex
	gen      uint64
	deadline monotime.Time
	names    map[string]bool
	timer    *time.Timer
	cmd      *exec.Cmd // the watchdog this driver started, reaped when it ends
}

// Fence sets the deadline of exactly the named units (driver.Fencer): when
// the machine's monotonic clock reaches it, each container of theirs is
// SIGKILLed and the unit stays loaded, inactive/dead, with Result "fenced";
// Start refuses it with ErrFenced until a later Fence leaves it out or moves
// the deadline on. A zero deadline or no names clears the fence.
//
// Two things enforce it: the driver's own timer, and the machine's fence
// watchdog, a process of its own (Config.FenceCommand, in a session of its
// own) that the driver starts when none runs. Fence writes the deadline to
// the state directory's fence.json before it returns; the watchdog reads it
// every 100ms and kills the units' containers through the engine once it has
// passed, so the deadline holds while the daemon is frozen, dead, or
// detached.
func (d *Driver) Fence(deadline monotime.Time, names []string) error {
	for _, n := range names {
		if err := service.CheckName(n); err != nil {
			return fmt.Errorf("fence: %w", err)
		}
	}
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return fmt.Errorf("fence: %w", ErrClosed)
	}
	f := &d.fence
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gen++
	if f.timer != nil {
		f.timer.Stop()
		f.timer = nil
	}
	st := fenceState{Machine: d.cfg.Machine, Host: d.cfg.Host, Deadline: deadline, Units: slices.Sorted(slices.Values(names))}
	if !st.active() {
		st = fenceState{Machine: d.cfg.Machine, Host: d.cfg.Host}
	}
	f.deadline, f.names = st.Deadline, make(map[string]bool, len(st.Units))
	for _, n := range st.Units {
		f.names[n] = true
	}
	if err := writeFence(d.cfg.Dir, st); err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	if !st.active() {
		return nil
	}
	if err := d.ensureWatchdog(); err != nil {
		d.log.Error("cannot start the fence watchdog: the fence holds only while this process runs", "err", err)
	}
	d.armFence(f.gen)
	return nil
}

// armFence kills the fenced units if the deadline has passed, or sets the
// timer for it. f.mu is held.
func (d *Driver) armFence(gen uint64) {
	f := &d.fence
	if wait := monotime.Until(f.deadline); wait > 0 {
		f.timer = time.AfterFunc(wait, func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.gen == gen {
				d.armFence(gen)
			}
		})
		return
	}
	names := slices.Sorted(maps.Keys(f.names))
	d.log.Warn("fence deadline passed; killing units", "units", len(names))
	d.mu.Lock()
	for _, n := range names {
		if c := d.units[n]; c != nil {
			c.post(msg{kind: reqFence})
		}
	}
	d.mu.Unlock()
}

// fenceDue reports whether the unit's fence deadline has passed.
func (d *Driver) fenceDue(name string) bool {
	f := &d.fence
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.names[name] && f.deadline != 0 && monotime.Now() >= f.deadline
}

func (d *Driver) stopFenceTimer() {
	f := &d.fence
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gen++
	if f.timer != nil {
		f.timer.Stop()
		f.timer = nil
	}
}

// clearFence empties the fence file (Close): the watchdog finds nothing to
// do and exits.
func (d *Driver) clearFence() {
	if err := writeFence(d.cfg.Dir, fenceState{Machine: d.cfg.Machine}); err != nil {
		d.log.Warn("cannot clear the fence file", "err", err)
	}
}

// writeFence replaces the fence file atomically.
func writeFence(dir string, st fenceState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, fenceFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o640); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, fenceFile))
}

func readFence(dir string) (fenceState, error) {
	var st fenceState
	b, err := os.ReadFile(filepath.Join(dir, fenceFile))
	if err != nil {
		return st, err
	}
	err = json.Unmarshal(b, &st)
	return st, err
}

// tryLock takes the watchdog's lock if it is free.
func tryLock(dir string) (*os.File, bool, error) {
	f, err := os.OpenFile(filepath.Join(dir, fenceLockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return f, true, nil
}

// ensureWatchdog starts the machine's watchdog unless one holds its lock.
// The fence file is written first: a watchdog about to exit for want of a
// fence reads it again after letting go of the lock, so one of the two
// always sees the fence. f.mu is held.
func (d *Driver) ensureWatchdog() error {
	lk, free, err := tryLock(d.cfg.Dir)
	if err != nil || !free {
		return err
	}
	lk.Close()
	logf, err := os.OpenFile(filepath.Join(d.cfg.Dir, fenceLogFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := append(slices.Clone(d.cfg.FenceCommand[1:]), "--dir", d.cfg.Dir)
	cmd := exec.Command(d.cfg.FenceCommand[0], args...)
	cmd.Env = append(os.Environ(), d.cfg.FenceEnv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	d.log.Info("started the fence watchdog", "pid", cmd.Process.Pid)
	go cmd.Wait()
	return nil
}

// ServeFenceArgs runs the fence watchdog with the command line "--dir DIR"
// (what the driver appends to Config.FenceCommand); it returns the exit
// status.
func ServeFenceArgs(args []string, log *slog.Logger) int {
	if len(args) != 2 || args[0] != "--dir" || args[1] == "" {
		fmt.Fprintf(os.Stderr, "docker-fence: want --dir DIR, got %q\n", args)
		return 2
	}
	if err := ServeFence(context.Background(), args[1], log); err != nil {
		log.Error("fence watchdog failed", "err", err)
		return 1
	}
	return 0
}

// ServeFence is the machine's fence watchdog over the driver state
// directory dir: it kills the containers of the units named in dir's fence
// file once the deadline there has passed, and again every second while it
// stays passed, until the file changes. It exits when another watchdog
// holds dir's lock, and once the file has held no fence for 10s.
func ServeFence(ctx context.Context, dir string, log *slog.Logger) error {
	lk, ok, err := tryLock(dir)
	if err != nil {
		return err
	}
	if !ok {
		log.Info("another fence watchdog runs; exiting", "dir", dir)
		return nil
	}
	defer func() { lk.Close() }()
	os.WriteFile(filepath.Join(dir, fencePIDFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
	st, _ := readFence(dir)
	cli, err := newClient(st.Host)
	if err != nil {
		return err
	}
	defer cli.Close()
	log.Info("fence watchdog running", "dir", dir, "pid", os.Getpid())
	idle := time.Now()
	var killedAt time.Time
	var killedFor fenceState
	for ctx.Err() == nil {
		st, err := readFence(dir)
		if err != nil || !st.active() {
			if time.Since(idle) < fenceIdleExit {
				sleep(ctx, fencePoll)
				continue
			}
			// Let go, then look once more: a driver that wrote a fence
			// after this read finds the lock free and starts another.
			lk.Close()
			if st, err := readFence(dir); err != nil || !st.active() {
				log.Info("no fence for a while; exiting")
				return nil
			}
			if lk, ok, err = tryLock(dir); err != nil || !ok {
				return err
			}
			idle = time.Now()
			continue
		}
		idle = time.Now()
		if wait := monotime.Until(st.Deadline); wait > 0 {
			sleep(ctx, min(wait, fencePoll))
			continue
		}
		if killedFor.Deadline != st.Deadline || !slices.Equal(killedFor.Units, st.Units) || time.Since(killedAt) >= fenceRekill {
			killFenced(ctx, cli, st, log)
			killedAt, killedFor = time.Now(), st
		}
		sleep(ctx, fencePoll)
	}
	return nil
}

// killFenced SIGKILLs the running containers of the fenced units.
func killFenced(ctx context.Context, cli *client.Client, st fenceState, log *slog.Logger) {
	actx, cancel := context.WithTimeout(ctx, DefaultAPITimeout)
	defer cancel()
	f := make(client.Filters).Add("label", LabelMachine+"="+st.Machine).Add("status", "running")
	list, err := cli.ContainerList(actx, client.ContainerListOptions{Filters: f})
	if err != nil {
		log.Error("cannot list the machine's containers", "err", err)
		return
	}
	for _, s := range list.Items {
		name := s.Labels[LabelUnit]
		if !slices.Contains(st.Units, name) {
			continue
		}
		if _, err := cli.ContainerKill(actx, s.ID, client.ContainerKillOptions{Signal: "SIGKILL"}); err != nil && !isNotFound(err) {
			log.Error("cannot kill a fenced container", "unit", name, "container", s.ID, "err", err)
			continue
		}
		log.Warn("fence deadline passed: killed the unit's container", "unit", name, "container", shortID(s.ID),
			"late", monotime.Since(st.Deadline).Round(time.Millisecond))
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
