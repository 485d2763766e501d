package systemddriver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"github.com/flotilla/flotilla/internal/driver"
	"github.com/flotilla/flotilla/internal/driver/service"
	"github.com/flotilla/flotilla/internal/unit"
)

var (
	// ErrClosed is returned by every method called after Close or Detach.
	ErrClosed = errors.New("systemddriver: driver closed")
	// ErrFenced is returned by Start for a unit whose fence deadline has
	// passed: it may not run until a later Fence moves its deadline on.
	ErrFenced = errors.New("systemddriver: unit is fenced: its LostAfter= deadline has passed")
	// ErrNotOurs is returned by Load when systemd reads the unit from a
	// file other than the one the driver wrote (one of the same name in
	// /etc/systemd/system takes precedence over /run/systemd/system).
	ErrNotOurs = errors.New("systemddriver: systemd reads the unit from another file")
)

// DefaultUnitDir is where systemd reads runtime units.
const DefaultUnitDir = "/run/systemd/system"

// DefaultStateDir is the default Config.StateDir.
const DefaultStateDir = "/run/flotilla/systemd"

// callTimeout bounds one D-Bus call that queues a job or reads state.
const callTimeout = 30 * time.Second

// hashKey starts the header line that carries a unit's hash.
const hashKey = "# X-Flotilla-Hash="

// headerLine is the first line of every file the driver writes.
const headerLine = "# Written by flotilla's systemd driver; removed when the unit is unloaded."

// Config configures a Driver.
type Config struct {
	// Machine is the machine ID reported in every unit.Status.
	Machine string
	// Notify receives every change of a unit's status; nil drops them.
	Notify driver.Notify
	// Logger receives the driver's own log; nil discards it.
	Logger *slog.Logger
	// UnitDir is where unit files are written; default DefaultUnitDir. It
	// must be a directory systemd reads units from.
	UnitDir string
	// StateDir holds the driver's own records: started/<unit> marks a unit
	// the agent started (driver.StartRecorder). Default
	// DefaultStateDir; like UnitDir it belongs on /run, which a reboot
	// clears along with the units.
	StateDir string
	// Systemctl and Journalctl are the programs the fence service and
	// Journal run; default: found in PATH, else /bin/systemctl and
	// /bin/journalctl.
	Systemctl, Journalctl string
	// DialTimeout bounds connecting to systemd; default 10s.
	DialTimeout time.Duration
	// Inaccessible are paths no unit may see (the daemon's data directory
	// and key files): every service and socket the driver writes gets
	// them in InaccessiblePaths=, each "-" prefixed (a missing path is
	// no error).
	Inaccessible []string
}

func (c *Config) validate() error {
	if c.UnitDir == "" {
		c.UnitDir = DefaultUnitDir
	}
	if !filepath.IsAbs(c.UnitDir) {
		return fmt.Errorf("systemddriver: config: UnitDir %q is not an absolute path", c.UnitDir)
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	if !filepath.IsAbs(c.StateDir) {
		return fmt.Errorf("systemddriver: config: StateDir %q is not an absolute path", c.StateDir)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Notify == nil {
		c.Notify = func(unit.Status) {}
	}
	find := func(name string) string {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		return "/bin/" + name
	}
	if c.Systemctl == "" {
		c.Systemctl = find("systemctl")
	}
	if c.Journalctl == "" {
		c.Journalctl = find("journalctl")
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 10 * time.Second
	}
	return nil
}

// sdUnit is what the driver knows of one loaded unit.
type sdUnit struct {
	hash    string
	typ     string // service, socket, timer, ...
	props   props
	status  unit.Status
	removed bool // unloaded: no more notifications
}

// props are the systemd properties a status is made of.
type props struct {
	Load, Active, Sub string
	Started           bool  // the unit has left inactive at least once
	ChangeUsec        int64 // StateChangeTimestamp, µs since the epoch
	PID               int
	Result            string
	Fragment          string
	NeedReload        bool // the unit's file changed since systemd read it
	LoadError         string
}

// Driver runs units as the machine's systemd units. See the package
// documentation.
type Driver struct {
	cfg       Config
	log       *slog.Logger
	conn      *sddbus.Conn
	sigconn   *dbus.Conn // the signals' own connection, if on the system bus (subscribe)
	userspace int64      // systemd's UserspaceTimestampMonotonic, µs

	mu     sync.Mutex
	units  map[string]*sdUnit
	closed bool

	rmu     sync.Mutex // serializes reading and applying state
	reloads reloader
	fence   fence

	jobs    chan struct{} // a place for each job queued and not yet ended (queueJob)
	updates chan *sddbus.PropertiesUpdate
	errs    chan error
	stop    chan struct{}
	watched sync.WaitGroup
}

var (
	_ driver.Driver   = (*Driver)(nil)
	_ driver.Killer   = (*Driver)(nil)
	_ driver.Detacher = (*Driver)(nil)
	_ driver.Fencer   = (*Driver)(nil)

	_ driver.StartRecorder = (*Driver)(nil)
)

// New connects to the machine's systemd, subscribes to its signals and
// adopts the units an earlier driver wrote to cfg.UnitDir, as they are.
func New(cfg Config) (*Driver, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	for _, dir := range []string{cfg.UnitDir, filepath.Join(cfg.StateDir, "started")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("systemddriver: %w", err)
		}
	}
	// The connection lives as long as the context it was dialled with, so
	// that context is cancelled only should the dial take too long.
	dialCtx, cancelDial := context.WithCancel(context.Background())
	timer := time.AfterFunc(cfg.DialTimeout, cancelDial)
	conn, err := sddbus.NewWithContext(dialCtx)
	if !timer.Stop() && err == nil {
		conn.Close()
		err = fmt.Errorf("no answer within %v", cfg.DialTimeout)
	}
	if err != nil {
		cancelDial()
		return nil, fmt.Errorf("systemddriver: connect to systemd over D-Bus: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	d := &Driver{
		cfg:     cfg,
		log:     cfg.Logger.With("machine", cfg.Machine),
		conn:    conn,
		units:   map[string]*sdUnit{},
		updates: make(chan *sddbus.PropertiesUpdate, 8192),
		jobs:    make(chan struct{}, maxJobs),
		errs:    make(chan error, 1),
		stop:    make(chan struct{}),
	}
	d.reloads.conn = conn
	fail := func(err error) (*Driver, error) {
		if d.sigconn != nil {
			d.sigconn.Close()
			d.watched.Wait()
		}
		conn.Close()
		return nil, fmt.Errorf("systemddriver: %w", err)
	}
	if err := d.subscribe(); err != nil {
		return fail(fmt.Errorf("subscribe to systemd's signals: %w", err))
	}
	us, err := conn.GetManagerProperty("UserspaceTimestampMonotonic")
	if err != nil {
		return fail(fmt.Errorf("read systemd's UserspaceTimestampMonotonic: %w", err))
	}
	if d.userspace, err = parseVariantInt(us); err != nil {
		return fail(fmt.Errorf("read systemd's UserspaceTimestampMonotonic: %w", err))
	}
	adopted, err := d.scan()
	if err != nil {
		return fail(err)
	}
	if err := d.findFenceTimers(ctx); err != nil {
		return fail(err)
	}
	d.watched.Add(1)
	go d.watch()
	for _, name := range adopted {
		d.refresh(name, nil)
	}
	if len(adopted) > 0 {
		d.log.Info("adopted the units systemd runs for us", "units", len(adopted))
	}
	return d, nil
}

// parseVariantInt reads an integer from a D-Bus variant's text form ("@t 123").
func parseVariantInt(s string) (int64, error) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0, fmt.Errorf("empty value")
	}
	var n int64
	if _, err := fmt.Sscan(f[len(f)-1], &n); err != nil {
		return 0, fmt.Errorf("value %q: %w", s, err)
	}
	return n, nil
}

// scan finds the files the driver wrote in UnitDir and takes their units.
func (d *Driver) scan() ([]string, error) {
	ents, err := os.ReadDir(d.cfg.UnitDir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if !e.Type().IsRegular() || unit.ValidateName(e.Name()) != nil {
			continue
		}
		hash, ok := readHeader(filepath.Join(d.cfg.UnitDir, e.Name()))
		if !ok {
			continue
		}
		d.units[e.Name()] = &sdUnit{hash: hash, typ: unit.TypeOf(e.Name())}
		names = append(names, e.Name())
	}
	return names, nil
}

// readHeader returns the hash in the header of a file the driver wrote;
// false for any other file.
func readHeader(path string) (string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 4096))
	if !sc.Scan() || sc.Text() != headerLine || !sc.Scan() {
		return "", false
	}
	hash, ok := strings.CutPrefix(sc.Text(), hashKey)
	return hash, ok
}

// content is the file Load writes for f: with InaccessiblePaths= of
// hidden appended to a service or socket, in a section of its own (systemd
// merges repeated sections, and adds to a list option set before).
func content(f *unit.File, hidden []string) []byte {
	var b bytes.Buffer
	b.WriteString(headerLine + "\n" + hashKey + f.Hash + "\n")
	b.WriteString(f.Raw)
	if !strings.HasSuffix(f.Raw, "\n") {
		b.WriteByte('\n')
	}
	section := map[string]string{"service": "Service", "socket": "Socket"}[unit.TypeOf(f.Name)]
	if section != "" && len(hidden) > 0 {
		b.WriteString("\n# Added by Flotilla: what units may not see.\n[" + section + "]\nInaccessiblePaths=")
		for i, p := range hidden {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.Quote("-" + p))
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func (d *Driver) path(name string) string { return filepath.Join(d.cfg.UnitDir, name) }

// Load writes the unit's file and reports the unit as systemd has loaded
// it; it is LoadBatch of one file.
func (d *Driver) Load(f *unit.File) error {
	return d.LoadBatch([]*unit.File{f})[0]
}

// check refuses a file the driver cannot load.
func (d *Driver) check(f *unit.File) error {
	if f == nil {
		return errors.New("systemddriver: load: nil unit file")
	}
	if err := unit.ValidateName(f.Name); err != nil || unit.IsTemplate(f.Name) || strings.ContainsRune(f.Name, '/') {
		return fmt.Errorf("systemddriver: load: %q is not the name of a unit systemd can run", f.Name)
	}
	// systemd reads EnvironmentFile= as root, outside the unit's
	// namespace: one inside a hidden path would hand it to the unit.
	for _, ef := range f.Service.EnvironmentFiles {
		p := ef.Path
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		if h := service.HiddenBy(p, d.cfg.Inaccessible); h != "" {
			return fmt.Errorf("systemddriver: load %s: EnvironmentFile=%s is inside %s, which Flotilla keeps from every unit", f.Name, ef.Path, h)
		}
	}
	return nil
}

// writeFile replaces path with data atomically.
func writeFile(path string, data []byte) error {
	tmp := filepath.Join(filepath.Dir(path), ".flotilla-"+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// forget drops a unit from the driver's map; later signals are ignored.
func (d *Driver) forget(name string) {
	d.mu.Lock()
	if u := d.units[name]; u != nil {
		u.removed = true
		delete(d.units, name)
	}
	d.mu.Unlock()
}

func (d *Driver) lookup(name string) (*sdUnit, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	if u := d.units[name]; u != nil {
		return u, nil
	}
	return nil, driver.ErrUnknownUnit
}

// Start queues a start job for the unit (mode "replace"); the outcome
// arrives through Notify. A fenced unit is refused with ErrFenced.
func (d *Driver) Start(name string) error {
	if _, err := d.lookup(name); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	if d.fenced(name) {
		return fmt.Errorf("start %s: %w", name, ErrFenced)
	}
	if err := os.WriteFile(d.startedPath(name), nil, 0o644); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := d.queueJob(ctx, "start", name); err != nil {
		os.Remove(d.startedPath(name))
		return fmt.Errorf("start %s: %w", name, err)
	}
	return nil
}

func (d *Driver) startedPath(name string) string {
	return filepath.Join(d.cfg.StateDir, "started", name)
}

// Started reports whether the unit's last Start was not undone by Stop,
// Unload or Kill (driver.StartRecorder): systemd may run a unit nobody
// started through the driver (a socket's service), which the agent must
// not take as one it launched. The record is a file, so a new driver knows
// what the last one started.
func (d *Driver) Started(name string) (started, known bool) {
	_, err := os.Stat(d.startedPath(name))
	return err == nil, true
}

// Stop queues a stop job for the unit; the outcome arrives through Notify.
func (d *Driver) Stop(name string) error {
	if _, err := d.lookup(name); err != nil {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	os.Remove(d.startedPath(name))
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := d.queueJob(ctx, "stop", name); err != nil {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	return nil
}

// stopJob queues a stop job and returns a channel that receives its result.
func (d *Driver) stopJob(ctx context.Context, name string) (<-chan string, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return d.queueJob(cctx, "stop", name)
}

// Unload stops the unit, waits for the stop job to finish, removes the
// unit's file and forgets it. When ctx is done first, Unload returns ctx's
// error; the unit goes on stopping and is removed once stopped.
func (d *Driver) Unload(ctx context.Context, name string) error {
	return d.unload(ctx, "unload", name, false)
}

// Kill ends the unit at once (driver.Killer): it queues the stop job and
// SIGKILLs every process of the unit, so neither ExecStop= nor the stop
// timeout delays it, then removes the unit as Unload does.
func (d *Driver) Kill(ctx context.Context, name string) error {
	err := d.unload(ctx, "kill", name, true)
	if errors.Is(err, driver.ErrUnknownUnit) {
		return nil
	}
	return err
}

func (d *Driver) unload(ctx context.Context, op, name string, kill bool) error {
	if _, err := d.lookup(name); err != nil {
		return fmt.Errorf("%s %s: %w", op, name, err)
	}
	ch, err := d.stopJob(ctx, name)
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, name, err)
	}
	if kill {
		d.killAll(ctx, name, true)
	}
	done := make(chan error, 1)
	go func() {
		<-ch
		done <- d.remove(name)
	}()
	// A kill is sent again until the stop job is done: the job may fork
	// ExecStop= (or ExecStopPost=) after the first SIGKILL reached the
	// unit's processes, and would then wait for it (on a loaded host,
	// ExecStop=/bin/sleep 60 outlived a kill's 20 s).
	var again <-chan time.Time
	if kill {
		tick := time.NewTicker(killAgain)
		defer tick.Stop()
		again = tick.C
	}
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("%s %s: %w", op, name, err)
			}
			return nil
		case <-again:
			d.killAll(ctx, name, false) // the unit may be gone by now
		case <-ctx.Done():
			return fmt.Errorf("%s %s: %w", op, name, ctx.Err())
		}
	}
}

// killAgain is how often a kill sends SIGKILL to a unit's processes while
// its stop job runs.
const killAgain = 500 * time.Millisecond

// killAll sends SIGKILL to every process of unit name (main, control and
// any other in its cgroup); warn logs a failure.
func (d *Driver) killAll(ctx context.Context, name string, warn bool) {
	kctx, cancel := context.WithTimeout(ctx, callTimeout)
	err := d.conn.KillUnitWithTarget(kctx, name, sddbus.All, int32(syscall.SIGKILL))
	cancel()
	if warn && err != nil && !isNoProcess(err) {
		d.log.Warn("SIGKILL a unit's processes", "unit", name, "err", err)
	}
}

// isNoProcess reports whether a KillUnit error says there was nothing to kill.
func isNoProcess(err error) bool {
	s := err.Error()
	return strings.Contains(s, "No main process") || strings.Contains(s, "No control process") ||
		strings.Contains(s, "not loaded") || strings.Contains(s, "No process to kill") || strings.Contains(s, "processes to kill")
}

// remove forgets a stopped unit, removes its file, clears a failed state
// and reloads systemd.
func (d *Driver) remove(name string) error {
	if err := d.unlink(name); err != nil {
		return err
	}
	return d.reloads.do()
}

// unlink forgets a stopped unit, removes its file and clears a failed
// state; systemd still holds it until the next reload.
func (d *Driver) unlink(name string) error {
	d.forget(name)
	os.Remove(d.startedPath(name))
	if err := os.Remove(d.path(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	d.conn.ResetFailedUnitContext(ctx, name) // not failed: nothing to reset
	cancel()
	return nil
}

// States returns the status of every loaded unit, sorted by name.
func (d *Driver) States() []unit.Status {
	d.mu.Lock()
	out := make([]unit.Status, 0, len(d.units))
	for _, u := range d.units {
		if u.status.Name != "" {
			out = append(out, u.status)
		}
	}
	d.mu.Unlock()
	slices.SortFunc(out, func(a, b unit.Status) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Journal writes the unit's last journald entries to w (all when lines <
// 0) and with follow keeps writing new ones until ctx is done, when it
// returns nil. It runs journalctl (see the package documentation). A unit
// that is not loaded and has no entries is driver.ErrUnknownUnit.
func (d *Driver) Journal(ctx context.Context, name string, lines int, follow bool, w io.Writer) error {
	if err := unit.ValidateName(name); err != nil {
		return fmt.Errorf("journal %s: %w", name, err)
	}
	d.mu.Lock()
	loaded := d.units[name] != nil
	d.mu.Unlock()
	if !loaded {
		out, err := exec.CommandContext(ctx, d.cfg.Journalctl, "-u", name, "-o", "cat", "-n", "1", "-q", "--no-pager").Output()
		if err != nil {
			return fmt.Errorf("journal %s: journalctl: %w", name, err)
		}
		if len(out) == 0 {
			return fmt.Errorf("journal %s: %w", name, driver.ErrUnknownUnit)
		}
	}
	args := []string{"-u", name, "-o", "cat", "-q", "--no-pager"}
	if lines >= 0 {
		args = append(args, "-n", fmt.Sprint(lines))
	} else {
		args = append(args, "--no-tail")
	}
	if follow {
		args = append(args, "-f")
	}
	cmd := exec.Command(d.cfg.Journalctl, args...)
	cmd.Stdout = w
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("journal %s: %w", name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			return fmt.Errorf("journal %s: journalctl: %w: %s", name, err, strings.TrimSpace(stderr.String()))
		}
		return nil
	case <-ctx.Done():
		cmd.Process.Kill()
		<-exited
		if follow {
			return nil
		}
		return fmt.Errorf("journal %s: %w", name, ctx.Err())
	}
}

// Close stops every unit, all at once, and waits for their stop jobs;
// then removes their files, disarms the fence and closes the connection.
// When ctx is done first, what still runs is SIGKILLed and Close returns
// ctx's error.
func (d *Driver) Close(ctx context.Context) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	names := make([]string, 0, len(d.units))
	for n := range d.units {
		names = append(names, n)
	}
	d.mu.Unlock()
	var chans []<-chan string
	for _, n := range names {
		ch, err := d.stopJob(ctx, n)
		if err != nil {
			d.log.Warn("stop a unit on close", "unit", n, "err", err)
			continue
		}
		chans = append(chans, ch)
	}
	var err error
	for _, ch := range chans {
		select {
		case <-ch:
		case <-ctx.Done():
			err = fmt.Errorf("systemddriver: close: %w", ctx.Err())
		}
		if err != nil {
			break
		}
	}
	if err != nil {
		for _, n := range names {
			kctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			d.conn.KillUnitWithTarget(kctx, n, sddbus.All, int32(syscall.SIGKILL))
			cancel()
		}
	}
	for _, n := range names {
		if rerr := d.unlink(n); rerr != nil && err == nil {
			err = fmt.Errorf("systemddriver: close: %w", rerr)
		}
	}
	if rerr := d.reloads.do(); rerr != nil && err == nil {
		err = fmt.Errorf("systemddriver: close: reload systemd: %w", rerr)
	}
	d.Fence(0, nil)
	d.shut()
	return err
}

// Detach closes the connection to systemd and leaves every unit, and the
// fence timer, to systemd (driver.Detacher): the next driver adopts them.
func (d *Driver) Detach(ctx context.Context) error {
	d.shut()
	return nil
}

// shut stops the watcher and closes the connection.
func (d *Driver) shut() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	d.mu.Unlock()
	close(d.stop)
	if d.sigconn != nil {
		d.sigconn.Close() // ends forward
	}
	d.watched.Wait()
	d.conn.Close()
}

// reloader batches daemon-reloads: callers that arrive while a reload runs
// share the next one, which begins after their files were written.
type reloader struct {
	conn    *sddbus.Conn
	mu      sync.Mutex
	next    *reloadBatch
	running bool
}

type reloadBatch struct {
	done chan struct{}
	err  error
}

func (r *reloader) do() error {
	r.mu.Lock()
	if r.next == nil {
		r.next = &reloadBatch{done: make(chan struct{})}
	}
	b := r.next
	if !r.running {
		r.running = true
		go r.loop()
	}
	r.mu.Unlock()
	<-b.done
	return b.err
}

func (r *reloader) loop() {
	for {
		r.mu.Lock()
		b := r.next
		r.next = nil
		if b == nil {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 2*callTimeout)
		b.err = r.conn.ReloadContext(ctx)
		cancel()
		close(b.done)
	}
}
