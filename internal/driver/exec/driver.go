package execdriver

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/flotilla/flotilla/internal/driver"
	"github.com/flotilla/flotilla/internal/driver/service"
	"github.com/flotilla/flotilla/internal/health"
	"github.com/flotilla/flotilla/internal/unit"
)

var (
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("execdriver: driver closed")
	// ErrStartLimitHit is returned by Start when the unit was started more
	// than StartLimitBurst times within StartLimitInterval; the unit is then
	// failed with result start-limit-hit.
	ErrStartLimitHit = errors.New("execdriver: start request repeated too quickly")
	// ErrInUse is returned by New when another driver holds the state
	// directory.
	ErrInUse = errors.New("execdriver: state directory is in use by another driver")
)

// ErrHandingOver is returned by Load while a handover is under way (the
// supervisor is being upgraded); a later Load succeeds.
var ErrHandingOver = errors.New("execdriver: the driver is being handed over to a new binary; try again")

// errUnloading is returned for a unit that Unload or Close is stopping.
var errUnloading = errors.New("unit is being unloaded")

// DefaultMaxLogBytes is the default Config.MaxLogBytes.
const DefaultMaxLogBytes = service.DefaultMaxLogBytes

// DefaultMaxLogFiles is the default Config.MaxLogFiles.
const DefaultMaxLogFiles = service.DefaultMaxLogFiles

// minMaxLogBytes is the smallest Config.MaxLogBytes accepted.
const minMaxLogBytes = unit.MinLogMaxSize

// maxRotated is the most rotated files a unit's log may keep.
const maxRotated = unit.MaxLogMaxFiles

// abortGrace bounds how long Close waits for units it SIGKILLed once its
// context is done.
const abortGrace = 2 * time.Second

// Config configures a Driver.
type Config struct {
	// Dir is the driver's state directory (required). It holds logs/, with
	// each unit's log <unit>.log and the older <unit>.log.1, .2..., and run/, with a
	// <unit>.pid file for each unit that has processes. It is created if
	// missing; one driver at a time may use it.
	Dir string
	// Machine is the machine ID reported in every unit.Status.
	Machine string
	// Notify receives every change of a unit's status; nil drops them.
	Notify driver.Notify
	// Logger receives the driver's own log; nil discards it.
	Logger *slog.Logger
	// MaxLogBytes is the size, in bytes, at which a unit's log is rotated:
	// the file becomes <unit>.log.1 (the older ones shifting to .2 and so
	// on) and a new file is begun. 0 means DefaultMaxLogBytes (16 MiB); the
	// minimum is 1 KiB. A unit's [X-Fleet] LogMaxSize= overrides it.
	MaxLogBytes int64
	// MaxLogFiles is how many rotated files of a unit's log are kept, at
	// most unit.MaxLogMaxFiles. 0 means DefaultMaxLogFiles (1); a negative
	// value keeps none. A unit's [X-Fleet] LogMaxFiles= overrides it.
	MaxLogFiles int
	// Journald also sends every line of every unit's log to the local
	// journald (see the package documentation).
	Journald bool
	// Unloaded, if set, is told the name of each unit the driver forgets
	// (after Unload, Kill or Close), after the unit's last Notify. Like
	// Notify it must not block for long or call back into the driver.
	Unloaded func(name string)
	// CgroupRoot is where the cgroup file systems are mounted: a cgroup v2
	// hierarchy, or a directory holding cgroup v1 hierarchies named for
	// their controllers (cpu, cpuacct, memory). Empty means /sys/fs/cgroup.
	CgroupRoot string
	// CgroupParent is the path, within the cgroup hierarchies, under which
	// units with CPUQuota= or MemoryMax= get a cgroup of their own. Empty
	// means /flotilla.slice/exec-<hash of Dir>. Where cgroups cannot be
	// used, such units run without limits and say so in Status.Message.
	CgroupParent string
	// Inaccessible are paths no unit may see: the daemon's data directory
	// and key files. Run as root, the driver starts every process of every
	// unit in a mount namespace of its own where they are covered, as
	// systemd's InaccessiblePaths= does (see package unithide). Run as another
	// user, units run as that user, whom file modes (0600, 0700) do not
	// keep from the daemon's own files, and nothing is hidden.
	Inaccessible []string
	// Spawn, if set, runs each function that starts a unit's process. The
	// supervisor runs them on its main thread: a process's parent-death
	// signal is tied to the thread that started it, and the main thread is
	// the one that survives an execve (see Handover).
	Spawn func(func())
	// Checks makes the driver run each unit's [X-Check] health checks and
	// OnUnhealthy=restart itself, and report their outcome in
	// unit.Status.Health (see checks.go); the supervisor process sets it,
	// so that they go on without a daemon. Without it the agent runs them.
	Checks bool
	// ProbeRunner, if set, runs the processes of the Exec= checks (the
	// supervisor's unithide.Spawner.Run, as root with Inaccessible: one
	// mount namespace for them all); nil: each is a child of this process.
	ProbeRunner health.CommandRunner
}

// validate checks c and fills in defaults.
func (c *Config) validate() error {
	if c.Dir == "" {
		return errors.New("execdriver: config: Dir is required")
	}
	dir, err := filepath.Abs(c.Dir)
	if err != nil {
		return fmt.Errorf("execdriver: config: Dir %q: %w", c.Dir, err)
	}
	c.Dir = dir
	switch {
	case c.MaxLogBytes == 0:
		c.MaxLogBytes = DefaultMaxLogBytes
	case c.MaxLogBytes < minMaxLogBytes:
		return fmt.Errorf("execdriver: config: MaxLogBytes %d is below the minimum of %d", c.MaxLogBytes, minMaxLogBytes)
	}
	switch {
	case c.MaxLogFiles == 0:
		c.MaxLogFiles = DefaultMaxLogFiles
	case c.MaxLogFiles < 0:
		c.MaxLogFiles = -1
	case c.MaxLogFiles > maxRotated:
		return fmt.Errorf("execdriver: config: MaxLogFiles %d is above the maximum of %d", c.MaxLogFiles, maxRotated)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Notify == nil {
		c.Notify = func(unit.Status) {}
	}
	if c.CgroupRoot == "" {
		c.CgroupRoot = "/sys/fs/cgroup"
	} else if !filepath.IsAbs(c.CgroupRoot) {
		return fmt.Errorf("execdriver: config: CgroupRoot %q is not an absolute path", c.CgroupRoot)
	}
	if c.CgroupParent == "" {
		sum := sha256.Sum256([]byte(c.Dir))
		c.CgroupParent = "/flotilla.slice/exec-" + hex.EncodeToString(sum[:6])
	} else if !filepath.IsAbs(c.CgroupParent) || filepath.Clean(c.CgroupParent) == "/" {
		return fmt.Errorf("execdriver: config: CgroupParent %q is not an absolute path below the hierarchy's root", c.CgroupParent)
	}
	c.CgroupParent = filepath.Clean(c.CgroupParent)
	return nil
}

// Driver runs units as supervised processes on this machine. It implements
// driver.Driver; see the package documentation for how a unit is run.
type Driver struct {
	cfg  Config
	log  *slog.Logger
	lock *os.File // flock on run/lock: one driver per Dir
	euid int
	pid  int    // the driver's process, named in its log lines
	home string // HOME for units without User=
	live *liveGroups

	mu     sync.Mutex
	units  map[string]*supervisor
	closed bool
	logs   LogConfig      // the machine's log settings; units may override the limits
	wg     sync.WaitGroup // one per supervisor goroutine

	fence fence
	kids  children

	// reapGate is held shared by a process's waiter from its reaping until
	// its unit has seen the exit, exclusively by a handover.
	reapGate sync.RWMutex
	handing  bool // a handover is under way: Load is refused

	cgroups *cgroupHost

	// The sd_notify socket (notify.go), bound on first use.
	notifyMu   sync.Mutex
	notifyConn *net.UnixConn
	notifyAddr string
	notifyErr  error
	notifyDone chan struct{}       // closed when its reader has returned
	notifyPids map[int]*supervisor // the processes whose messages are read, by PID
	flushSeq   uint64
	flushes    map[string]chan struct{} // notifyFlush's waits, by id
	notifyLag  time.Duration            // tests: how long the reader waits before each message
	spawnLag   time.Duration            // tests: how long a process goes unwatched after it started
	// spawning is held shared while a process that gets NOTIFY_SOCKET is
	// started and not yet watched; the reader takes it to wait for them.
	spawning sync.RWMutex
}

var (
	_ driver.Driver     = (*Driver)(nil)
	_ driver.LogRemover = (*Driver)(nil)
	_ driver.Checker    = (*Driver)(nil)
)

// New makes a driver with the state directory cfg.Dir. Process groups that
// a previous driver on the same directory left running (it crashed or was
// killed before stopping its units) are SIGKILLed first, found through their
// pid files.
func New(cfg Config) (*Driver, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	lock, err := service.LockDir(cfg.Dir, "execdriver", ErrInUse)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger.With("machine", cfg.Machine)
	killStale(filepath.Join(cfg.Dir, "run"), log)
	cgroups := detectCgroups(cfg.CgroupRoot, cfg.CgroupParent)
	log.Info("resource limits", "cgroups", cgroups.String(), "parent", cfg.CgroupParent)
	cgroups.removeStale(log)
	return newDriver(cfg, lock, log, cgroups), nil
}

// newDriver makes a driver holding the directory's lock, with no unit.
func newDriver(cfg Config, lock *os.File, log *slog.Logger, cgroups *cgroupHost) *Driver {
	d := &Driver{
		logs:  LogConfig{Limits: LogLimits{MaxBytes: cfg.MaxLogBytes, MaxFiles: max(cfg.MaxLogFiles, 0)}, Journald: cfg.Journald},
		cfg:   cfg,
		log:   log,
		lock:  lock,
		euid:  os.Geteuid(),
		pid:   os.Getpid(),
		home:  "/",
		live:  &liveGroups{maxAge: 100 * time.Millisecond},
		units: make(map[string]*supervisor),
		kids:  children{pids: make(map[int]bool)},

		notifyPids: make(map[int]*supervisor),

		cgroups: cgroups,
	}
	if u, err := user.Current(); err == nil && u.HomeDir != "" {
		d.home = u.HomeDir
	}
	return d
}

func (d *Driver) logPath(name string) string {
	return service.LogPath(d.cfg.Dir, name)
}

func (d *Driver) pidPath(name string) string {
	return filepath.Join(d.cfg.Dir, "run", name+".pid")
}

// Load makes the unit known, in state inactive/dead, or replaces the
// definition of a loaded unit. A unit that is running keeps running with the
// definition it was started with, and keeps reporting that definition's
// hash, until it next stops or restarts: a restart (by Start or by Restart=)
// uses the newest definition. Every Load is followed by a Notify of the
// unit's status, changed or not, so that a caller that loads a unit the
// driver already runs (adopting it) hears how it is.
func (d *Driver) Load(f *unit.File) error {
	if f == nil {
		return errors.New("execdriver: load: nil unit file")
	}
	if err := checkFile(f); err != nil {
		return fmt.Errorf("load %s: %w", f.Name, err)
	}
	for {
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return fmt.Errorf("load %s: %w", f.Name, ErrClosed)
		}
		if d.handing {
			d.mu.Unlock()
			return fmt.Errorf("load %s: %w", f.Name, ErrHandingOver)
		}
		s := d.units[f.Name]
		if s == nil {
			s = newSupervisor(d, f)
			d.units[f.Name] = s
			d.wg.Add(1)
			go s.run()
			d.mu.Unlock()
			return nil
		}
		d.mu.Unlock()
		err := s.call(request{kind: reqLoad, file: f})
		if errors.Is(err, errGone) {
			continue // unloaded meanwhile: load afresh
		}
		if err != nil {
			return fmt.Errorf("load %s: %w", f.Name, err)
		}
		return nil
	}
}

// checkFile rejects what the driver cannot run.
func checkFile(f *unit.File) error {
	if err := service.CheckName(f.Name); err != nil {
		return err
	}
	svc := &f.Service
	switch svc.Type {
	case "", "simple", "exec", "notify", "notify-reload", "idle", "dbus":
		if len(svc.ExecStart) != 1 {
			return fmt.Errorf("Type=%s needs exactly one ExecStart=, got %d", cmp.Or(svc.Type, "simple"), len(svc.ExecStart))
		}
	case "oneshot":
	case "forking":
		return errors.New("Type=forking is not supported by the exec driver: run the daemon in the foreground with Type=simple")
	default:
		return fmt.Errorf("unknown Type=%s", svc.Type)
	}
	for _, cmds := range [][]unit.Command{svc.ExecStartPre, svc.ExecStart, svc.ExecStartPost, svc.ExecStop, svc.ExecStopPost} {
		for _, c := range cmds {
			if len(c.Argv) == 0 || c.Argv[0] == "" {
				return errors.New("empty command line")
			}
		}
	}
	switch svc.Restart {
	case "", "no", "always", "on-success", "on-failure", "on-abnormal", "on-abort", "on-watchdog":
	default:
		return fmt.Errorf("unknown Restart=%s", svc.Restart)
	}
	switch svc.KillMode {
	case "", "control-group", "mixed", "process", "none":
	default:
		return fmt.Errorf("unknown KillMode=%s", svc.KillMode)
	}
	if _, err := service.ParseSignal(svc.KillSignal); err != nil {
		return fmt.Errorf("KillSignal=: %w", err)
	}
	return nil
}

// lookup returns the unit's supervisor; ErrUnknownUnit when it has none,
// ErrClosed after Close.
func (d *Driver) lookup(name string) (*supervisor, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	if s := d.units[name]; s != nil {
		return s, nil
	}
	return nil, driver.ErrUnknownUnit
}

// Start begins starting the unit: it returns once the start is under way (or
// refused) and the outcome arrives through Notify. A unit that is active or
// activating is left alone; one that is stopping starts again once stopped.
// It fails with ErrStartLimitHit when the unit started too often (see
// unit.Service.StartLimitBurst).
func (d *Driver) Start(name string) error {
	if d.fenced(name) {
		return fmt.Errorf("start %s: %w", name, ErrFenced)
	}
	return d.request("start", name, reqStart)
}

// Stop begins stopping the unit; a unit that is not running is left alone.
// The outcome arrives through Notify.
func (d *Driver) Stop(name string) error {
	return d.request("stop", name, reqStop)
}

func (d *Driver) request(op, name string, kind reqKind) error {
	s, err := d.lookup(name)
	if err == nil {
		err = s.call(request{kind: kind})
	}
	if errors.Is(err, errGone) {
		err = driver.ErrUnknownUnit
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, name, err)
	}
	return nil
}

// Unload stops the unit if it runs, waits until it has stopped, and forgets
// it. Its log stays and Journal still reads it. When ctx is done first,
// Unload returns ctx's error and the unit goes on stopping and is forgotten
// when stopped.
func (d *Driver) Unload(ctx context.Context, name string) error {
	s, err := d.lookup(name)
	if err == nil {
		err = s.call(request{kind: reqQuit})
	}
	if errors.Is(err, errGone) {
		return nil // forgotten meanwhile
	}
	if err != nil {
		return fmt.Errorf("unload %s: %w", name, err)
	}
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("unload %s: %w", name, ctx.Err())
	}
}

// Kill ends a unit at once (SIGKILL to its processes, no ExecStop=, no stop
// timeout), waits for it to end, and forgets it (driver.Killer).
func (d *Driver) Kill(ctx context.Context, name string) error {
	s, err := d.lookup(name)
	if err == nil {
		err = s.call(request{kind: reqAbort})
	}
	if errors.Is(err, errGone) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kill %s: %w", name, err)
	}
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kill %s: %w", name, ctx.Err())
	}
}

// States returns the status of every loaded unit, sorted by name.
func (d *Driver) States() []unit.Status {
	d.mu.Lock()
	sups := make([]*supervisor, 0, len(d.units))
	for _, s := range d.units {
		sups = append(sups, s)
	}
	d.mu.Unlock()
	out := make([]unit.Status, 0, len(sups))
	for _, s := range sups {
		out = append(out, s.snapshot())
	}
	slices.SortFunc(out, func(a, b unit.Status) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Journal writes the last lines of the unit's log to w (all when lines < 0),
// reading into the rotated file when needed, and with follow keeps writing
// lines as they are appended until ctx is done, when it returns nil. A
// unit's log outlives the unit: the journal of an unloaded unit is its
// history. A name that was never loaded and has no log is
// driver.ErrUnknownUnit.
func (d *Driver) Journal(ctx context.Context, name string, lines int, follow bool, w io.Writer) error {
	d.mu.Lock()
	loaded := d.units[name] != nil
	d.mu.Unlock()
	return service.ReadJournal(ctx, d.cfg.Dir, name, lines, follow, w, loaded)
}

// Close stops every unit, all at once, each as Stop does (ExecStop=, the
// kill signal, TimeoutStopSec=, ExecStopPost=), waits for them, and releases
// the state directory. When ctx is done first, what still runs is SIGKILLed
// without further ExecStopPost= and Close returns ctx's error.
func (d *Driver) Close(ctx context.Context) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.stopFence()
	sups := make([]*supervisor, 0, len(d.units))
	for _, s := range d.units {
		sups = append(sups, s)
	}
	d.mu.Unlock()

	for _, s := range sups {
		s.call(request{kind: reqQuit})
	}
	all := make(chan struct{})
	go func() { d.wg.Wait(); close(all) }()
	var err error
	select {
	case <-all:
	case <-ctx.Done():
		err = fmt.Errorf("execdriver: close: %w", ctx.Err())
		for _, s := range sups {
			s.call(request{kind: reqAbort})
		}
		select {
		case <-all:
		case <-time.After(abortGrace + time.Second):
			d.log.Error("units still running after SIGKILL; giving up on them")
		}
	}
	d.cgroups.removeParent()
	d.closeNotify()
	d.lock.Close()
	return err
}
