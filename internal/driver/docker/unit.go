package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/flotilla/flotilla/internal/driver/service"
	"github.com/flotilla/flotilla/internal/unit"
)

// errGone is returned by a unit's goroutine that has ended (unloaded).
var errGone = errors.New("unit is gone")

// errUnloading is returned for a unit being unloaded.
var errUnloading = errors.New("unit is being unloaded")

// phase is where a unit's run is.
type phase int

const (
	phDead     phase = iota // no container runs: inactive/dead or failed/failed
	phStarting              // pulling, creating, starting: activating/start
	phRunning               // active/running
	phStopping              // deactivating/stop-sigterm, then stop-sigkill
	phRestart               // waiting RestartSec=: activating/auto-restart
)

type reqKind int

const (
	reqLoad reqKind = iota + 1
	reqStart
	reqStop
	reqQuit     // Unload
	reqAbort    // Kill
	reqFence    // the fence deadline passed
	reqDetach   // end the goroutine, leave the container
	msgStarted  // the start goroutine is done
	msgRestart  // RestartSec= passed
	msgStopSlow // TimeoutStopSec= passed
	msgResignal // a signal could not be sent: send it again if still wanted
)

type msg struct {
	kind  reqKind
	file  *unit.File
	gen   int
	id    string
	sig   string
	err   error
	reply chan error
}

// ctr is a loaded unit: one goroutine owns its state and its container.
type ctr struct {
	d    *Driver
	name string
	log  *unitLog
	slog *slog.Logger

	in   chan msg
	poke chan struct{}
	done chan struct{}

	mu     sync.Mutex
	status unit.Status

	// Owned by the goroutine.
	file      *unit.File // the newest definition
	runFile   *unit.File // the definition of the container
	id        string     // the container, "" when none
	created   int64      // its creation time (adoption)
	ph        phase
	failed    bool
	sigkill   bool // the stop needed SIGKILL
	result    string
	message   string
	pid       int
	startedAt string // State.StartedAt of the run followed
	// health is the run's health by its image's HEALTHCHECK, in
	// Flotilla's words (unknown, healthy, unhealthy); "" without one.
	health    string
	exitSeen  bool // the run's exit was handled
	gen       int  // of the start under way
	cancel    context.CancelFunc
	timer     *time.Timer
	limiter   service.StartLimiter
	restarts  int
	stopAsked bool
	again     bool // a Start came while stopping
	quit      bool // Unload: forget once dead
	abort     bool // Kill
	detach    bool
	copyDone  chan struct{}

	sinceMu sync.Mutex
	since   time.Time // the engine time of the last line of output copied
}

func newCtr(d *Driver, f *unit.File) *ctr {
	c := &ctr{d: d, name: f.Name, file: f, runFile: f,
		in: make(chan msg), poke: make(chan struct{}, 1), done: make(chan struct{}),
		slog: d.log.With("unit", f.Name)}
	c.log = &unitLog{path: d.logPath(f.Name)}
	c.log.limits(d.cfg.MaxLogBytes, d.cfg.MaxLogFiles, f)
	c.status = unit.Status{Name: f.Name, Hash: f.Hash, Machine: d.cfg.Machine, Load: "loaded", Active: "inactive", Sub: "dead", Since: time.Now()}
	return c
}

// call sends a request to the goroutine and waits for its answer.
func (c *ctr) call(m msg) error {
	m.reply = make(chan error, 1)
	select {
	case c.in <- m:
	case <-c.done:
		return errGone
	}
	select {
	case err := <-m.reply:
		return err
	case <-c.done:
		select {
		case err := <-m.reply:
			return err
		default:
			return errGone
		}
	}
}

// post sends a message without waiting; dropped if the goroutine ended.
// A container whose start ends after its unit was killed or unloaded is
// removed: nothing else knows of it.
func (c *ctr) post(m msg) {
	go func() {
		select {
		case c.in <- m:
		case <-c.done:
			if m.kind == msgStarted && m.id != "" && !c.detach {
				ctx, cancel := context.WithTimeout(context.Background(), c.d.cfg.APITimeout)
				defer cancel()
				if err := c.d.remove(ctx, m.id); err != nil {
					c.slog.Warn("cannot remove the container of a unit gone while it started", "container", m.id, "err", err)
				}
			}
		}
	}()
}

func (c *ctr) pokeIt() {
	select {
	case c.poke <- struct{}{}:
	default:
	}
}

// stopGoroutine ends the goroutine and leaves the container (Detach).
func (c *ctr) stopGoroutine() { c.call(msg{kind: reqDetach}) }

func (c *ctr) snapshot() unit.Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// event logs one of the driver's own messages to the unit's log.
func (c *ctr) event(format string, args ...any) {
	m := fmt.Sprintf(format, args...)
	c.log.line(time.Now(), "flotilla", c.d.pid, []byte(m))
	c.slog.Debug(m)
}

func (c *ctr) describe() string {
	if c.file.Description != "" {
		return c.file.Description
	}
	return c.name
}

// notify computes the status and hands it to Notify if it changed (or
// always, with force).
func (c *ctr) notify(force bool) {
	st := unit.Status{Name: c.name, Machine: c.d.cfg.Machine, Load: "loaded", PID: c.pid, Result: c.result, Message: c.message}
	st.Hash = c.file.Hash
	if c.ph != phDead && c.runFile != nil {
		st.Hash = c.runFile.Hash
	}
	switch c.ph {
	case phDead:
		st.Active, st.Sub = "inactive", "dead"
		if c.failed {
			st.Active, st.Sub = "failed", "failed"
		}
	case phStarting:
		st.Active, st.Sub = "activating", "start"
	case phRunning:
		st.Active, st.Sub, st.Health = "active", "running", c.health
	case phStopping:
		st.Active, st.Sub = "deactivating", "stop-sigterm"
		if c.sigkill {
			st.Sub = "stop-sigkill"
		}
	case phRestart:
		st.Active, st.Sub = "activating", "auto-restart"
	}
	c.mu.Lock()
	prev := c.status
	st.Since = prev.Since
	if st.Active != prev.Active {
		st.Since = time.Now()
	}
	changed := st != prev
	c.status = st
	c.mu.Unlock()
	if changed || force {
		c.d.cfg.Notify(st)
	}
}

// run is the unit's goroutine.
func (c *ctr) run() {
	defer c.d.wg.Done()
	defer close(c.done)
	for {
		select {
		case m := <-c.in:
			err := c.handle(m)
			if m.reply != nil {
				m.reply <- err
			}
		case <-c.poke:
			c.refresh()
		}
		if c.detach {
			c.stopTimer()
			if c.cancel != nil {
				c.cancel()
			}
			c.log.close()
			return
		}
		if c.quit && c.ph == phDead {
			c.forget()
			return
		}
	}
}

func (c *ctr) handle(m msg) error {
	switch m.kind {
	case reqLoad:
		c.file = m.file
		c.log.limits(c.d.cfg.MaxLogBytes, c.d.cfg.MaxLogFiles, m.file)
		if c.ph == phDead {
			c.runFile = m.file
		}
		c.notify(true)
	case reqStart:
		if c.quit {
			return errUnloading
		}
		switch c.ph {
		case phStopping:
			c.again = true
		case phRestart:
			c.stopTimer()
			return c.begin()
		case phDead:
			return c.begin()
		}
	case reqStop:
		c.again = false
		c.stop()
	case reqQuit:
		c.quit, c.again = true, false
		c.stop()
	case reqAbort:
		c.quit, c.abort, c.again = true, true, false
		c.kill()
	case reqFence:
		c.fenced()
	case reqDetach:
		c.detach = true
	case msgStarted:
		if m.gen == c.gen && c.ph == phStarting {
			c.started(m.id, m.err)
		}
	case msgRestart:
		if m.gen == c.gen && c.ph == phRestart {
			c.timer = nil
			c.begin()
		}
	case msgResignal:
		if m.id == c.id && (c.ph == phStopping || c.d.fenceDue(c.name) && c.ph == phRunning) {
			c.signal(m.sig)
		}
	case msgStopSlow:
		if m.gen == c.gen && c.ph == phStopping && !c.sigkill {
			c.sigkill = true
			c.event("%s: State 'stop-sigterm' timed out. Killing.", c.name)
			c.notify(false)
			c.killContainer()
		}
	}
	return nil
}

func (c *ctr) stopTimer() {
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
}

// begin starts a run: the start limit, the fence, then the start goroutine.
func (c *ctr) begin() error {
	svc := &c.file.Service
	if !c.limiter.Allow(time.Now(), svc.StartLimitBurst, svc.StartLimitInterval) {
		c.event("%s: Start request repeated too quickly.", c.name)
		c.event("%s: Failed with result '%s'.", c.name, service.ResultStartLimitHit)
		c.ph, c.failed, c.result, c.message, c.pid = phDead, true, service.ResultStartLimitHit, "start request repeated too quickly", 0
		c.notify(false)
		return ErrStartLimitHit
	}
	if c.d.fenceDue(c.name) {
		c.ph, c.failed, c.result, c.message, c.pid = phDead, false, service.ResultFenced, service.FencedMessage, 0
		c.notify(false)
		return ErrFenced
	}
	os.Remove(c.d.stopMarker(c.name))
	c.runFile = c.file
	c.gen++
	c.ph, c.failed, c.sigkill, c.stopAsked, c.exitSeen = phStarting, false, false, false, false
	c.result, c.message, c.pid = "", "", 0
	c.notify(false)
	c.event("Starting %s...", c.describe())
	ctx, cancel := context.WithCancel(c.d.ctx)
	c.cancel = cancel
	gen, f, old := c.gen, c.runFile, c.id
	go func() {
		// At most Config.ParallelStarts starts ask the engine at once;
		// TimeoutStartSec= counts from when this one does.
		select {
		case c.d.starts <- struct{}{}:
		case <-ctx.Done():
			c.post(msg{kind: msgStarted, gen: gen, err: ctx.Err()})
			return
		}
		sctx := ctx
		if t := svc.TimeoutStartSec; t > 0 && t < unit.Infinity {
			var cancel context.CancelFunc
			sctx, cancel = context.WithTimeout(ctx, t)
			defer cancel()
		}
		id, err := c.d.startContainer(sctx, f, old)
		<-c.d.starts
		if errors.Is(sctx.Err(), context.DeadlineExceeded) && err != nil {
			err = fmt.Errorf("%w: TimeoutStartSec=%s passed: %v", errStartTimeout, svc.TimeoutStartSec, err)
		}
		c.post(msg{kind: msgStarted, gen: gen, id: id, err: err})
	}()
	return nil
}

var errStartTimeout = errors.New("start timed out")

// started handles the end of the start goroutine.
func (c *ctr) started(id string, err error) {
	c.health = "" // a new run: its HEALTHCHECK has not spoken yet
	c.cancel()
	c.cancel = nil
	if id != "" {
		c.id = id
	}
	if err != nil {
		if c.stopAsked {
			c.exitedWith(service.ResultSuccess, "")
			return
		}
		res := service.ResultResources
		if errors.Is(err, errStartTimeout) {
			res = service.ResultTimeout
		}
		c.event("%s: Failed to start: %v", c.name, err)
		c.end(res, err.Error())
		return
	}
	ins, ierr := c.d.inspect(c.id)
	if ierr != nil {
		// Started, but the engine is too busy to say how: running until
		// an inspect says otherwise.
		c.slog.Warn("cannot inspect the started container; trying again", "err", ierr)
		c.ph, c.startedAt, c.pid = phRunning, "", 0
		c.startCopy()
		c.event("Started %s.", c.describe())
		c.notify(false)
		time.AfterFunc(retryDelay, c.pokeIt)
		if c.stopAsked {
			c.stop()
		}
		return
	}
	st := ins.Container.State
	c.startedAt, c.pid = st.StartedAt, st.Pid
	c.ph = phRunning
	c.startCopy()
	c.event("Started %s.", c.describe())
	c.notify(false)
	if c.stopAsked {
		c.stop()
		return
	}
	if !st.Running {
		c.exited(st)
	}
}

// refresh looks at the container after an event and follows its state.
func (c *ctr) refresh() {
	if c.id == "" || c.ph == phStarting {
		c.notify(false)
		return
	}
	ins, err := c.d.inspect(c.id)
	if err != nil {
		if !isNotFound(err) {
			if c.d.ctx.Err() == nil {
				c.slog.Warn("cannot inspect the unit's container; trying again", "err", err)
				time.AfterFunc(retryDelay, c.pokeIt)
			}
			return
		}
		// Removed behind the driver's back.
		if c.ph == phRunning || c.ph == phStopping {
			c.event("%s: Container %s was removed.", c.name, shortID(c.id))
			c.exitedWith(service.ResultSignal, "container removed")
		}
		c.id = ""
		return
	}
	st := ins.Container.State
	if h := dockerHealth(st); h != c.health && st.Running {
		c.health = h
		defer c.notify(false)
	}
	switch {
	case st.Running && st.StartedAt != c.startedAt:
		// Started anew behind the driver's back (docker start): follow it.
		c.startedAt, c.pid, c.exitSeen = st.StartedAt, st.Pid, false
		if c.ph == phDead || c.ph == phRestart {
			c.stopTimer()
			c.ph, c.result, c.message, c.failed = phRunning, "", "", false
		}
		c.startCopy()
		c.notify(false)
	case !st.Running && (c.ph == phRunning || c.ph == phStopping):
		c.exited(st)
	}
}

// dockerHealth is a container's health by its image's HEALTHCHECK, in
// Flotilla's words: starting is unknown; "" without a HEALTHCHECK.
func dockerHealth(st *container.State) string {
	if st == nil || st.Health == nil {
		return ""
	}
	switch st.Health.Status {
	case container.Healthy:
		return "healthy"
	case container.Unhealthy:
		return "unhealthy"
	case container.Starting:
		return "unknown"
	}
	return ""
}

// exited handles the end of the container's run.
func (c *ctr) exited(st *container.State) {
	if c.exitSeen {
		return
	}
	c.exitSeen = true
	code, sig := st.ExitCode, syscall.Signal(0)
	if code > 128 && code <= 128+64 {
		// The engine reports a process killed by signal N as 128+N.
		code, sig = 0, syscall.Signal(code-128)
	}
	res, status := service.ExitResult(code, sig)
	if st.OOMKilled {
		res, status = service.ResultOOMKill, status+" (out of memory: MemoryMax= reached)"
	}
	c.event("%s: Main process exited, %s", c.name, status)
	c.exitedWith(res, "Main process exited, "+status)
}

func (c *ctr) exitedWith(res, message string) {
	c.pid = 0
	c.stopTimer()
	switch {
	case c.d.fenceDue(c.name):
		c.event("Killed %s: no word from a current leader before the LostAfter= deadline.", c.describe())
		c.ph, c.failed, c.result, c.message = phDead, false, service.ResultFenced, service.FencedMessage
		c.notify(false)
	case c.stopAsked:
		c.ph, c.failed, c.result, c.message = phDead, false, service.ResultSuccess, ""
		if c.sigkill {
			c.message = "stopped with SIGKILL after TimeoutStopSec="
		}
		c.event("Stopped %s.", c.describe())
		c.notify(false)
		c.afterStop()
	default:
		c.end(res, message)
	}
}

// end ends a run that failed or ended on its own: Restart= decides whether
// it starts again after RestartSec=.
func (c *ctr) end(res, message string) {
	c.result, c.message, c.pid = res, message, 0
	if !c.quit && service.ShouldRestart(c.file.Service.Restart, res) {
		c.restarts++
		c.ph = phRestart
		c.event("%s: Scheduled restart job, restart counter is at %d.", c.name, c.restarts)
		gen := c.gen
		c.timer = time.AfterFunc(c.file.Service.RestartSec, func() { c.post(msg{kind: msgRestart, gen: gen}) })
		c.notify(false)
		return
	}
	c.ph = phDead
	c.failed = res != service.ResultSuccess
	if c.failed {
		c.event("%s: Failed with result '%s'.", c.name, res)
	} else {
		c.event("%s: Deactivated successfully.", c.name)
	}
	c.notify(false)
}

// afterStop starts again a unit that was asked to start while stopping.
func (c *ctr) afterStop() {
	if c.again && !c.quit {
		c.again = false
		c.begin()
	}
}

// stop begins a stop that was asked for.
func (c *ctr) stop() {
	if c.ph != phDead {
		if f, err := os.Create(c.d.stopMarker(c.name)); err == nil {
			f.Close()
		}
	}
	switch c.ph {
	case phStarting:
		c.stopAsked = true
		c.cancel()
	case phRunning:
		// The driver sends KillSignal= and, TimeoutStopSec= later, SIGKILL
		// itself (each a short call) rather than hold a call to the engine
		// open for the whole stop.
		c.stopAsked = true
		c.ph = phStopping
		c.event("Stopping %s...", c.describe())
		c.notify(false)
		c.signal(killSignal(&c.runFile.Service))
		if t := c.runFile.Service.TimeoutStopSec; t > 0 && t < unit.Infinity {
			gen := c.gen
			c.timer = time.AfterFunc(t, func() { c.post(msg{kind: msgStopSlow, gen: gen}) })
		}
	case phRestart:
		c.stopTimer()
		c.ph, c.failed = phDead, false
		c.event("Stopped %s.", c.describe())
		c.notify(false)
	}
}

// kill removes the container at once (Kill).
func (c *ctr) kill() {
	if c.cancel != nil {
		c.cancel()
	}
	c.stopTimer()
	was := c.ph
	c.removeContainer()
	if was != phDead {
		c.ph, c.result, c.message, c.failed, c.pid = phDead, service.ResultSignal, "killed", false, 0
		c.event("Killed %s.", c.describe())
		c.notify(false)
	}
}

// fenced kills the container at the fence deadline; it stays loaded.
func (c *ctr) fenced() {
	switch c.ph {
	case phRunning, phStopping:
		c.killContainer()
	case phStarting:
		c.stopAsked = true
		c.cancel()
	case phRestart:
		c.stopTimer()
		c.event("Killed %s: no word from a current leader before the LostAfter= deadline.", c.describe())
		c.ph, c.failed, c.result, c.message = phDead, false, service.ResultFenced, service.FencedMessage
		c.notify(false)
	}
}

func (c *ctr) killContainer() { c.signal("SIGKILL") }

// signal sends a signal to the container's main process, in the
// background; the event of its death (or a poke, if it was not running)
// follows.
func (c *ctr) signal(sig string) {
	if c.id == "" {
		return
	}
	id := c.id
	go func() {
		ctx, cancel := c.d.api()
		defer cancel()
		release, err := c.d.slot(ctx)
		if err != nil {
			return
		}
		defer release()
		if _, err := c.d.cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: sig}); err != nil && !isNotFound(err) && !cerrdefs.IsConflict(err) && c.d.ctx.Err() == nil {
			// An engine too busy to answer in time: ask again while
			// the unit still wants its container dead.
			c.slog.Warn("signalling the container failed; trying again", "signal", sig, "err", err)
			time.AfterFunc(retryDelay, func() { c.post(msg{kind: msgResignal, id: id, sig: sig}) })
			return
		}
		c.pokeIt()
	}()
}

// retryDelay is how long the driver waits before asking the engine again
// after a call failed (an inspect or a signal).
const retryDelay = time.Second

func (c *ctr) removeContainer() {
	if c.id == "" {
		return
	}
	ctx, cancel := c.d.api()
	defer cancel()
	release, err := c.d.slot(ctx)
	if err != nil {
		return
	}
	defer release()
	if _, err := c.d.cli.ContainerRemove(ctx, c.id, client.ContainerRemoveOptions{Force: true}); err != nil && !isNotFound(err) {
		c.slog.Warn("removing the container failed", "container", c.id, "err", err)
		return
	}
	c.id = ""
}

// forget ends an unloaded unit: its container is removed, its log closed
// once the output is copied.
func (c *ctr) forget() {
	c.removeContainer()
	os.Remove(c.d.stopMarker(c.name))
	if c.copyDone != nil {
		select {
		case <-c.copyDone:
		case <-time.After(2 * time.Second):
		}
	}
	c.log.close()
	c.d.mu.Lock()
	if c.d.units[c.name] == c {
		delete(c.d.units, c.name)
	}
	c.d.mu.Unlock()
}

// startCopy begins copying the container's output to the unit's log, once
// the previous copy has ended.
func (c *ctr) startCopy() {
	prev, done := c.copyDone, make(chan struct{})
	c.copyDone = done
	id, pid := c.id, c.pid
	c.d.bg.Add(1)
	go func() {
		defer c.d.bg.Done()
		defer close(done)
		if prev != nil {
			<-prev
		}
		c.sinceMu.Lock()
		since := c.since
		c.sinceMu.Unlock()
		last, err := copyOutput(c.d.ctx, c.d.cli, id, c.name, pid, since, c.log)
		if err != nil && c.d.ctx.Err() == nil && !isNotFound(err) {
			c.slog.Warn("copying the container's output failed", "err", err)
		}
		c.sinceMu.Lock()
		if last.After(c.since) {
			c.since = last
		}
		c.sinceMu.Unlock()
	}()
}

// adopt takes over a container an earlier driver left (New).
func (c *ctr) adopt(f *unit.File, ins container.InspectResponse) {
	c.id, c.runFile = ins.ID, f
	c.since = lastOutput(c.d.logPath(c.name), c.name)
	st := ins.State
	c.startedAt = st.StartedAt
	switch {
	case st.Running || st.Paused || st.Restarting:
		c.ph, c.pid = phRunning, st.Pid
		c.startCopy()
		if _, err := os.Stat(c.d.stopMarker(c.name)); err == nil {
			// The last driver was stopping it: carry on.
			c.stop()
		}
	case st.Status == container.StateCreated:
		c.ph = phDead
	default:
		c.startCopy() // what it wrote before it ended
		if _, err := os.Stat(c.d.stopMarker(c.name)); err == nil {
			c.ph, c.result = phDead, service.ResultSuccess
			c.exitSeen = true
			break
		}
		// It ended while no driver was here: as if seen now.
		c.ph = phRunning
		c.exited(st)
	}
	c.mu.Lock()
	c.status = unit.Status{}
	if t, err := time.Parse(time.RFC3339Nano, st.StartedAt); err == nil && c.ph == phRunning {
		c.status.Active, c.status.Since = "active", t // active since the container started
	}
	c.mu.Unlock()
	c.notify(false)
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
