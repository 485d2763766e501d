package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"

	"github.com/flotilla/flotilla/internal/driver"
	"github.com/flotilla/flotilla/internal/driver/service"
	"github.com/flotilla/flotilla/internal/unit"
)

var (
	// ErrClosed is returned by every method called after Close or Detach.
	ErrClosed = errors.New("docker driver: closed")
	// ErrStartLimitHit is returned by Start when the unit was started more
	// than StartLimitBurst times within StartLimitInterval.
	ErrStartLimitHit = errors.New("docker driver: start request repeated too quickly")
	// ErrInUse is returned by New when another driver holds the state
	// directory.
	ErrInUse = errors.New("docker driver: state directory is in use by another driver")
	// ErrFenced is returned by Start for a unit whose fence deadline has
	// passed.
	ErrFenced = errors.New("docker driver: unit is fenced: its LostAfter= deadline has passed")
)

// Defaults of Config.
const (
	DefaultMaxLogBytes = service.DefaultMaxLogBytes
	DefaultMaxLogFiles = service.DefaultMaxLogFiles
	DefaultPullTimeout = 2 * time.Minute
	DefaultAPITimeout  = 30 * time.Second
	// DefaultParallelStarts is the default Config.ParallelStarts.
	DefaultParallelStarts = 16
)

// Config configures a Driver.
type Config struct {
	// Machine is the machine ID: it is put in every unit.Status and on
	// every container (LabelMachine), and a driver adopts the containers
	// with its machine's label. Required.
	Machine string
	// Dir is the driver's state directory (required): logs/ holds each
	// unit's log, run/ the driver's lock and markers, fence.json the fence
	// the watchdog enforces. One driver at a time may use it.
	Dir string
	// Notify receives every change of a unit's status; nil drops them.
	Notify driver.Notify
	// Logger receives the driver's own log; nil discards it.
	Logger *slog.Logger
	// Host is the engine's address (unix:///var/run/docker.sock,
	// tcp://...); empty means DOCKER_HOST, or the default socket.
	Host string
	// Labels are put on every container besides the driver's own (a test
	// marks its containers this way).
	Labels map[string]string
	// MaxLogBytes and MaxLogFiles bound each unit's log as the exec
	// driver's do (0: DefaultMaxLogBytes, DefaultMaxLogFiles; a negative
	// MaxLogFiles keeps no rotated file). A unit's [X-Fleet] LogMaxSize= and
	// LogMaxFiles= override them.
	MaxLogBytes int64
	MaxLogFiles int
	// PullTimeout bounds pulling a unit's image that is not on the machine
	// (default DefaultPullTimeout).
	PullTimeout time.Duration
	// APITimeout bounds every other call to the engine (default
	// DefaultAPITimeout).
	APITimeout time.Duration
	// ParallelStarts is how many starts (image check, create, start) ask
	// the engine at once; the others wait their turn in activating/start
	// (default DefaultParallelStarts).
	ParallelStarts int
	// FenceCommand is the watchdog's command line, to which "--dir Dir" is
	// appended (see Fence). Default: this executable with "docker-fence".
	FenceCommand []string
	// FenceEnv is added to the watchdog's environment.
	FenceEnv []string
	// Inaccessible are paths no container may mount (the daemon's data
	// directory and key files): a unit whose [X-Container] Volumes= binds
	// one of them, a path inside one, or a directory holding one (such as
	// /) fails to start.
	Inaccessible []string
}

func (c *Config) validate() error {
	if c.Machine == "" {
		return errors.New("docker driver: config: Machine is required")
	}
	if c.Dir == "" {
		return errors.New("docker driver: config: Dir is required")
	}
	dir, err := filepath.Abs(c.Dir)
	if err != nil {
		return fmt.Errorf("docker driver: config: Dir %q: %w", c.Dir, err)
	}
	c.Dir = dir
	switch {
	case c.MaxLogBytes == 0:
		c.MaxLogBytes = DefaultMaxLogBytes
	case c.MaxLogBytes < unit.MinLogMaxSize:
		return fmt.Errorf("docker driver: config: MaxLogBytes %d is below the minimum of %d", c.MaxLogBytes, unit.MinLogMaxSize)
	}
	switch {
	case c.MaxLogFiles == 0:
		c.MaxLogFiles = DefaultMaxLogFiles
	case c.MaxLogFiles < 0:
		c.MaxLogFiles = 0
	case c.MaxLogFiles > unit.MaxLogMaxFiles:
		return fmt.Errorf("docker driver: config: MaxLogFiles %d is above the maximum of %d", c.MaxLogFiles, unit.MaxLogMaxFiles)
	}
	if c.PullTimeout <= 0 {
		c.PullTimeout = DefaultPullTimeout
	}
	if c.ParallelStarts <= 0 {
		c.ParallelStarts = DefaultParallelStarts
	}
	if c.APITimeout <= 0 {
		c.APITimeout = DefaultAPITimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Notify == nil {
		c.Notify = func(unit.Status) {}
	}
	if len(c.FenceCommand) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("docker driver: config: no FenceCommand and no executable: %w", err)
		}
		c.FenceCommand = []string{exe, "docker-fence"}
	}
	return nil
}

// Driver runs container units through the Docker Engine API. It implements
// driver.Driver, driver.Killer, driver.Fencer, driver.Detacher and
// driver.LogRemover; see the package documentation.
type Driver struct {
	cfg  Config
	log  *slog.Logger
	cli  *client.Client
	lock *os.File
	pid  int

	starts chan struct{} // a slot per start asking the engine
	calls  chan struct{} // a slot per other call to the engine

	ctx    context.Context // done at Close or Detach
	cancel context.CancelFunc

	mu     sync.Mutex
	units  map[string]*ctr
	closed bool
	wg     sync.WaitGroup // unit goroutines
	bg     sync.WaitGroup // the event loop and log copies

	fence fence
}

var (
	_ driver.Driver     = (*Driver)(nil)
	_ driver.Killer     = (*Driver)(nil)
	_ driver.Fencer     = (*Driver)(nil)
	_ driver.Detacher   = (*Driver)(nil)
	_ driver.LogRemover = (*Driver)(nil)
)

// newClient connects to the engine at host (or DOCKER_HOST), negotiating
// the API version down to the engine's.
func newClient(host string) (*client.Client, error) {
	opts := []client.Opt{client.FromEnv}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	return client.New(opts...)
}

// New connects to the engine, takes the state directory, and adopts the
// containers of cfg.Machine that an earlier driver left: each becomes a
// loaded unit again, as its labels describe it, reported by States before
// New returns, and nothing is restarted (a container found exited, which
// was not stopped on request, ends its run as if seen exiting: its
// Restart= applies).
func New(cfg Config) (*Driver, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	lock, err := service.LockDir(cfg.Dir, "docker driver", ErrInUse)
	if err != nil {
		return nil, err
	}
	cli, err := newClient(cfg.Host)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("docker driver: %w", err)
	}
	d := &Driver{cfg: cfg, log: cfg.Logger.With("driver", "docker", "machine", cfg.Machine), cli: cli, lock: lock,
		pid: os.Getpid(), units: map[string]*ctr{}, starts: make(chan struct{}, cfg.ParallelStarts),
		calls: make(chan struct{}, parallelCalls)}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	fail := func(err error) (*Driver, error) {
		d.cancel()
		cli.Close()
		lock.Close()
		return nil, err
	}
	pctx, cancel := context.WithTimeout(d.ctx, cfg.APITimeout)
	_, err = cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true})
	cancel()
	if err != nil {
		return fail(fmt.Errorf("docker driver: the engine does not answer: %w", err))
	}
	// The fence an earlier driver on this directory set holds until the
	// agent sets another: a container it killed is not restarted.
	if st, err := readFence(cfg.Dir); err == nil && st.Machine == cfg.Machine && st.active() {
		d.fence.deadline, d.fence.names = st.Deadline, map[string]bool{}
		for _, n := range st.Units {
			d.fence.names[n] = true
		}
	}
	// Subscribe before listing, so that no change between the two is missed.
	sub := d.subscribe("")
	if err := d.adopt(); err != nil {
		return fail(err)
	}
	d.bg.Add(1)
	go d.watch(sub)
	return d, nil
}

// filters selects this machine's containers.
func (d *Driver) filters() client.Filters {
	return make(client.Filters).Add("label", LabelMachine+"="+d.cfg.Machine)
}

// subscription is one stream of the engine's events.
type subscription struct {
	client.EventsResult
	cancel context.CancelFunc
}

// subscribe opens the engine's event stream for this machine's containers'
// starts, deaths, removals and health changes (an image's HEALTHCHECK),
// from since (an engine timestamp) or now.
func (d *Driver) subscribe(since string) subscription {
	ctx, cancel := context.WithCancel(d.ctx)
	f := d.filters().Add("type", "container").Add("event", "start", "die", "destroy", "health_status")
	return subscription{EventsResult: d.cli.Events(ctx, client.EventsListOptions{Filters: f, Since: since}), cancel: cancel}
}

// watch follows the event stream, poking the unit of each event so that it
// looks at its container; it resubscribes when the stream breaks, from the
// last event seen, and pokes every unit then.
func (d *Driver) watch(sub subscription) {
	defer d.bg.Done()
	var last events.Message
	for {
		err := d.follow(sub, &last)
		sub.cancel()
		if d.ctx.Err() != nil {
			return
		}
		d.log.Warn("engine event stream broke; resubscribing", "err", err)
		select {
		case <-time.After(time.Second):
		case <-d.ctx.Done():
			return
		}
		since := ""
		if last.TimeNano != 0 {
			since = fmt.Sprintf("%d.%09d", last.TimeNano/1e9, last.TimeNano%1e9)
		}
		sub = d.subscribe(since)
		d.mu.Lock()
		for _, c := range d.units {
			c.pokeIt()
		}
		d.mu.Unlock()
	}
}

func (d *Driver) follow(sub subscription, last *events.Message) error {
	for {
		select {
		case m := <-sub.Messages:
			*last = m
			d.mu.Lock()
			c := d.units[m.Actor.Attributes[LabelUnit]]
			d.mu.Unlock()
			if c != nil {
				c.pokeIt()
			}
		case err := <-sub.Err:
			if err == nil {
				err = errors.New("stream ended")
			}
			return err
		case <-d.ctx.Done():
			return d.ctx.Err()
		}
	}
}

// adopt makes a unit of every container of this machine.
func (d *Driver) adopt() error {
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.APITimeout)
	defer cancel()
	list, err := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: d.filters()})
	if err != nil {
		return fmt.Errorf("docker driver: list containers: %w", err)
	}
	for _, s := range list.Items {
		name, raw := s.Labels[LabelUnit], s.Labels[LabelFile]
		f, err := unit.ParseStored(name, raw)
		if err == nil {
			err = checkFile(f)
		}
		if err != nil {
			d.log.Warn("leaving alone a container of this machine whose unit cannot be read", "container", s.ID, "unit", name, "err", err)
			continue
		}
		if c := d.units[name]; c != nil {
			d.log.Warn("a unit has two containers; adopting the newer", "unit", name, "containers", []string{c.id, s.ID})
			if s.Created < c.created {
				continue
			}
			c.stopGoroutine()
		}
		ins, err := d.cli.ContainerInspect(ctx, s.ID, client.ContainerInspectOptions{})
		if err != nil {
			d.log.Warn("cannot inspect a container to adopt", "container", s.ID, "err", err)
			continue
		}
		c := newCtr(d, f)
		c.created = s.Created
		c.adopt(f, ins.Container)
		d.units[name] = c
		d.wg.Add(1)
		go c.run()
	}
	if len(d.units) > 0 {
		d.log.Info("adopted the containers of this machine", "units", len(d.units))
	}
	return nil
}

func (d *Driver) logPath(name string) string { return filepath.Join(d.cfg.Dir, "logs", name+".log") }

func (d *Driver) stopMarker(name string) string {
	return filepath.Join(d.cfg.Dir, "run", name+".stopped")
}

// api is a context for one engine call.
func (d *Driver) api() (context.Context, context.CancelFunc) {
	return context.WithTimeout(d.ctx, d.cfg.APITimeout)
}

// Load makes the unit known, in state inactive/dead, or replaces the
// definition of a loaded unit: a running container keeps the definition it
// was made from, and its hash, until its next start. Every Load is followed
// by a Notify of the unit's status.
func (d *Driver) Load(f *unit.File) error {
	if f == nil {
		return errors.New("docker driver: load: nil unit file")
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
		c := d.units[f.Name]
		if c == nil {
			c = newCtr(d, f)
			d.units[f.Name] = c
			d.wg.Add(1)
			go c.run()
			d.mu.Unlock()
			if err := c.call(msg{kind: reqLoad, file: f}); err != nil && !errors.Is(err, errGone) { // notifies its status
				return fmt.Errorf("load %s: %w", f.Name, err)
			}
			return nil
		}
		d.mu.Unlock()
		err := c.call(msg{kind: reqLoad, file: f})
		if errors.Is(err, errGone) {
			continue
		}
		if err != nil {
			return fmt.Errorf("load %s: %w", f.Name, err)
		}
		return nil
	}
}

func (d *Driver) lookup(name string) (*ctr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	if c := d.units[name]; c != nil {
		return c, nil
	}
	return nil, driver.ErrUnknownUnit
}

func (d *Driver) request(op, name string, m msg) error {
	c, err := d.lookup(name)
	if err == nil {
		err = c.call(m)
	}
	if errors.Is(err, errGone) {
		err = driver.ErrUnknownUnit
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, name, err)
	}
	return nil
}

// Start begins starting the unit: pulling its image if the machine lacks
// it, making its container and starting it. It returns once that is under
// way; the outcome arrives through Notify. It fails with ErrStartLimitHit
// when the unit started too often and with ErrFenced past its fence.
func (d *Driver) Start(name string) error {
	if d.fenceDue(name) {
		return fmt.Errorf("start %s: %w", name, ErrFenced)
	}
	return d.request("start", name, msg{kind: reqStart})
}

// Stop begins stopping the unit: its KillSignal=, then SIGKILL after
// TimeoutStopSec=, sent by the engine.
func (d *Driver) Stop(name string) error {
	return d.request("stop", name, msg{kind: reqStop})
}

// Unload stops the unit, waits until it has stopped, removes its container
// and forgets it. Its log stays.
func (d *Driver) Unload(ctx context.Context, name string) error {
	return d.end(ctx, "unload", name, reqQuit)
}

// Kill removes the unit's container at once (the engine SIGKILLs it; no
// stop timeout) and forgets the unit (driver.Killer).
func (d *Driver) Kill(ctx context.Context, name string) error {
	return d.end(ctx, "kill", name, reqAbort)
}

func (d *Driver) end(ctx context.Context, op, name string, kind reqKind) error {
	c, err := d.lookup(name)
	if err == nil {
		err = c.call(msg{kind: kind})
	}
	if errors.Is(err, errGone) || errors.Is(err, driver.ErrUnknownUnit) && op == "kill" {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, name, err)
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s %s: %w", op, name, ctx.Err())
	}
}

// States returns the status of every loaded unit, sorted by name.
func (d *Driver) States() []unit.Status {
	d.mu.Lock()
	cs := make([]*ctr, 0, len(d.units))
	for _, c := range d.units {
		cs = append(cs, c)
	}
	d.mu.Unlock()
	out := make([]unit.Status, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.snapshot())
	}
	slices.SortFunc(out, func(a, b unit.Status) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Journal writes the last lines of the unit's log (the container's output
// and the driver's messages) and with follow keeps writing new ones until
// ctx is done. The log of an unloaded unit stays readable.
func (d *Driver) Journal(ctx context.Context, name string, lines int, follow bool, w io.Writer) error {
	if err := service.CheckName(name); err != nil {
		return fmt.Errorf("journal %s: %w", name, err)
	}
	d.mu.Lock()
	loaded := d.units[name] != nil
	d.mu.Unlock()
	return service.ReadJournal(ctx, d.cfg.Dir, name, lines, follow, w, loaded)
}

// RemoveLog removes the log of a unit that is not loaded
// (driver.LogRemover).
func (d *Driver) RemoveLog(name string) error {
	if err := service.CheckName(name); err != nil {
		return fmt.Errorf("remove log %s: %w", name, err)
	}
	d.mu.Lock()
	loaded := d.units[name] != nil
	d.mu.Unlock()
	if loaded {
		return fmt.Errorf("remove log %s: the unit is loaded", name)
	}
	return removeLogs(d.logPath(name))
}

// Close stops every unit at once, as Unload does, removing their
// containers, clears the fence and releases the state directory. When ctx
// is done first, the containers left are removed by force (SIGKILL) and
// Close returns ctx's error.
func (d *Driver) Close(ctx context.Context) error {
	cs, ok := d.shut()
	if !ok {
		return nil
	}
	d.clearFence()
	for _, c := range cs {
		c.call(msg{kind: reqQuit})
	}
	var err error
	if !waitAll(ctx, &d.wg) {
		err = fmt.Errorf("docker driver: close: %w", ctx.Err())
		for _, c := range cs {
			c.call(msg{kind: reqAbort})
		}
		wctx, cancel := context.WithTimeout(context.Background(), d.cfg.APITimeout)
		waitAll(wctx, &d.wg)
		cancel()
	}
	d.release()
	return err
}

// Detach releases the driver and leaves every container as it is, to be
// adopted by the next driver on the same machine and directory
// (driver.Detacher). The fence watchdog, a process of its own, keeps
// enforcing the last fence.
func (d *Driver) Detach(ctx context.Context) error {
	cs, ok := d.shut()
	if !ok {
		return nil
	}
	for _, c := range cs {
		c.stopGoroutine()
	}
	var err error
	if !waitAll(ctx, &d.wg) {
		err = fmt.Errorf("docker driver: detach: %w", ctx.Err())
	}
	d.release()
	return err
}

// shut marks the driver closed and returns its units; false if it was.
func (d *Driver) shut() ([]*ctr, bool) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, false
	}
	d.closed = true
	cs := make([]*ctr, 0, len(d.units))
	for _, c := range d.units {
		cs = append(cs, c)
	}
	d.mu.Unlock()
	d.stopFenceTimer() // not under d.mu: the fence's timer takes d.mu under its own lock
	return cs, true
}

func (d *Driver) release() {
	d.cancel()
	d.bg.Wait()
	d.cli.Close()
	d.lock.Close()
}

// waitAll waits for wg until ctx is done; it reports whether wg finished.
func waitAll(ctx context.Context, wg *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// parallelCalls bounds the driver's calls to the engine (inspect, signal,
// remove) at once, so that a thousand units stopping together do not send
// the engine a thousand requests together.
const parallelCalls = 32

// slot waits for a free call slot; release gives it back.
func (d *Driver) slot(ctx context.Context) (release func(), err error) {
	select {
	case d.calls <- struct{}{}:
		return func() { <-d.calls }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// inspect inspects a container within a call slot.
func (d *Driver) inspect(id string) (client.ContainerInspectResult, error) {
	ctx, cancel := d.api()
	defer cancel()
	release, err := d.slot(ctx)
	if err != nil {
		return client.ContainerInspectResult{}, err
	}
	defer release()
	return d.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
}

// isNotFound reports whether the engine said no such container or image.
func isNotFound(err error) bool { return cerrdefs.IsNotFound(err) }
