package execdriver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/flotilla/flotilla/internal/driver/service"
	"github.com/flotilla/flotilla/internal/unit"
)

// phase is where a unit is in its life; see doc.go for the transitions.
type phase int

const (
	phaseDead        phase = iota // no run: inactive/dead or failed/failed
	phaseStartPre                 // ExecStartPre= commands, one after another
	phaseStart                    // Type=oneshot: ExecStart= commands, one after another
	phaseStartPost                // ExecStartPost= commands, the main process running
	phaseRunning                  // the main process runs
	phaseExited                   // RemainAfterExit=: started and done, still active
	phaseStop                     // ExecStop= commands
	phaseStopSigterm              // KillSignal= sent, waiting for the processes to go
	phaseStopSigkill              // SIGKILL sent, waiting for the processes to go
	phaseStopPost                 // ExecStopPost= commands
	phaseAutoRestart              // waiting RestartSec= before starting again
)

// activeSub is the systemd ActiveState and SubState of a phase; result is
// the run's result, which tells inactive from failed.
func activeSub(p phase, result string) (active, sub string) {
	switch p {
	case phaseStartPre:
		return "activating", "start-pre"
	case phaseStart:
		return "activating", "start"
	case phaseStartPost:
		return "activating", "start-post"
	case phaseRunning:
		return "active", "running"
	case phaseExited:
		return "active", "exited"
	case phaseStop:
		return "deactivating", "stop"
	case phaseStopSigterm:
		return "deactivating", "stop-sigterm"
	case phaseStopSigkill:
		return "deactivating", "stop-sigkill"
	case phaseStopPost:
		return "deactivating", "stop-post"
	case phaseAutoRestart:
		return "activating", "auto-restart"
	}
	if result == "" || result == service.ResultSuccess || result == service.ResultFenced {
		return "inactive", "dead"
	}
	return "failed", "failed"
}

// pollInterval is how often a stopping unit checks whether its process
// groups are gone (they hold processes that are not the driver's children,
// whose exits it is not told of).
const pollInterval = 25 * time.Millisecond

// readerGrace is how long a supervisor that is done, its output logged,
// waits for the end of output pipes still held open by processes that
// escaped it (a last line without a newline is logged at the end).
const readerGrace = 100 * time.Millisecond

// drainLimit bounds how long a process's exit, or a supervisor that is done,
// waits for the output in the pipes to be logged: only a log write that
// hangs takes that long.
const drainLimit = 10 * time.Second

type reqKind int

const (
	reqLoad     reqKind = iota // replace the definition
	reqStart                   // start
	reqStop                    // stop
	reqQuit                    // stop, then forget the unit (Unload, Close)
	reqAbort                   // SIGKILL everything now, then forget (Close past its deadline)
	reqFence                   // SIGKILL everything now, stay loaded (a fence deadline passed)
	reqHandover                // describe the unit, then do nothing until thaw is closed
)

type request struct {
	kind  reqKind
	file  *unit.File // reqLoad
	reply chan error

	state *UnitState      // reqHandover: filled in
	thaw  <-chan struct{} // reqHandover: closed when the handover did not happen
	ctx   context.Context // reqHandover: bounds pausing the log copiers
}

// errGone is returned by call once the supervisor has finished.
var errGone = errors.New("unit unloaded")

type exited struct {
	p      *proc
	status service.ExitStatus
}

// supervisor runs one unit. Its goroutine (run) alone touches the fields
// from file on; requests and process exits reach it through channels, and
// nothing it does blocks for long: each process is waited for by a goroutine
// of its own, and its output copied by another.
type supervisor struct {
	d    *Driver
	name string
	log  *unitLog
	slog *slog.Logger

	reqs  chan request
	exits chan exited
	done  chan struct{} // closed when run returns

	mu      sync.Mutex
	status  unit.Status // last published; written by run, read by States
	logFile *unit.File  // newest definition, for the log's settings

	notesMu  sync.Mutex
	notes    []notifyMsg   // sd_notify messages not yet acted on
	noteWake chan struct{} // a message was queued

	readers sync.WaitGroup // output copiers
	pipesMu sync.Mutex
	pipes   map[*outPipe]int // read ends still being copied, with the pid their lines are logged under

	// Owned by run.

	file         *unit.File // newest definition
	cur          *unit.File // definition of the current run; nil in phaseDead and phaseAutoRestart
	ph           phase
	main         *proc    // the main process (Type=oneshot: the running ExecStart=)
	control      *proc    // the running ExecStartPre=, ExecStartPost=, ExecStop= or ExecStopPost=
	cmds         []cmdRef // commands left in this phase
	groups       []pgroup // process groups started in this run and not seen empty
	written      []pgroup // groups in the pid file
	env          *execEnv // how this run's processes are started
	cg           unitCgroup
	result       string // first failure of this run, or success
	message      string
	mainResult   string    // main process exited during start-post with this result
	stopReq      bool      // this run is being stopped on request: it ends inactive
	pendingStart bool      // start again once stopped
	kick         bool      // a start was admitted; run it after replying
	quit         bool      // forget the unit once dead
	abort        bool      // skip to SIGKILL and skip ExecStopPost=
	fenced       bool      // this run is being killed by a fence: every process group, ending inactive/dead "fenced"
	postKilled   bool      // the ExecStopPost= command timed out and was SIGKILLed
	phaseAt      time.Time // when the current stop-sigterm or stop-sigkill began
	limiter      service.StartLimiter
	restarts     int
	renotify     bool            // notify the status at the next publish even if unchanged
	restartAt    time.Time       // phaseAutoRestart: when the timer restarts the unit
	frozen       <-chan struct{} // a handover took the unit's state: wait for this to close
	paused       []pausedPipe    // output pipes a handover paused
	timer        *time.Timer
	ticker       *time.Ticker  // while waiting for process groups to empty
	ready        bool          // READY=1 came in this run
	statusText   string        // STATUS= of this run
	wdTimer      *time.Timer   // the watchdog: fires when no WATCHDOG=1 came within wdLimit
	wdLimit      time.Duration // this run's watchdog limit; 0: none
	watchdogKill bool          // the watchdog fired: this run is being killed with SIGABRT
	chk          *unitChecks   // the current run's [X-Check] checks (Config.Checks), while active
	restarting   bool          // being restarted for being unhealthy (OnUnhealthy=restart)
	healthFrom   string        // the health to resume the checks from (a handover)

	healthMu   sync.Mutex
	healthEvs  []healthEvent // the runners' reports not yet acted on
	healthWake chan struct{} // a report was queued
}

// cmdRef is a command queued for the current phase, with the name of the
// option it comes from for messages.
type cmdRef struct {
	cmd   unit.Command
	label string
}

func newSupervisor(d *Driver, f *unit.File) *supervisor {
	s := &supervisor{
		d:     d,
		name:  f.Name,
		slog:  d.log.With("unit", f.Name),
		reqs:  make(chan request),
		exits: make(chan exited),
		done:  make(chan struct{}),
		pipes: make(map[*outPipe]int),
		file:  f,
		timer: time.NewTimer(time.Hour),

		noteWake: make(chan struct{}, 1),
		wdTimer:  time.NewTimer(time.Hour),

		healthWake: make(chan struct{}, 1),
	}
	s.timer.Stop()
	s.wdTimer.Stop()
	lim, sink := d.logSettings(d.logs, f) // Load holds d.mu
	s.log = newUnitLog(d.logPath(f.Name), lim, s.slog)
	s.log.journal = sink
	s.logFile = f
	s.status = s.compute(unit.Status{})
	return s
}

// call hands r to the supervisor and returns its answer; errGone once the
// supervisor has finished.
func (s *supervisor) call(r request) error {
	r.reply = make(chan error, 1)
	select {
	case s.reqs <- r:
		return <-r.reply
	case <-s.done:
		return errGone
	}
}

func (s *supervisor) snapshot() unit.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

func (s *supervisor) run() {
	defer s.finish()
	if s.d.cfg.Checks {
		s.syncChecks() // a unit handed over active
		s.mu.Lock()
		s.status = s.compute(s.status)
		s.mu.Unlock()
	}
	s.d.cfg.Notify(s.snapshot())
	for {
		var tick <-chan time.Time
		if s.ticker != nil {
			tick = s.ticker.C
		}
		select {
		case r := <-s.reqs:
			r.reply <- s.handle(r)
			if s.frozen != nil {
				// Handed over: the next image runs the unit, unless the
				// handover is called off.
				<-s.frozen
				s.frozen = nil
				s.resumePipes()
			}
		case ev := <-s.exits:
			s.onExit(ev)
		case <-s.timer.C:
			s.onTimeout()
		case <-tick:
			s.checkStopped()
		case <-s.noteWake:
			s.takeNotes()
		case <-s.wdTimer.C:
			s.onWatchdogTimer()
		case <-s.healthWake:
			s.takeHealth()
		}
		for s.kick { // begin may end the run at once and admit another start
			s.kick = false
			s.begin()
		}
		s.syncChecks()
		s.publish()
		if s.quit && s.ph == phaseDead {
			return
		}
	}
}

// finish releases what the unit holds once it is dead and forgotten.
func (s *supervisor) finish() {
	s.timer.Stop()
	s.wdTimer.Stop()
	// Log the output still in the pipes (the unit's processes are gone, so
	// that is all of theirs), wait a little for the pipes' end, then cut off
	// pipes held open by processes that escaped the unit's process groups.
	s.pipesMu.Lock()
	pipes := slices.Collect(maps.Keys(s.pipes))
	s.pipesMu.Unlock()
	limit := time.After(drainLimit)
	for _, p := range pipes {
		select {
		case <-p.drain():
		case <-limit:
		}
	}
	copied := make(chan struct{})
	go func() { s.readers.Wait(); close(copied) }()
	select {
	case <-copied:
	case <-time.After(readerGrace):
		s.pipesMu.Lock()
		for p := range s.pipes {
			p.Close()
		}
		s.pipesMu.Unlock()
		<-copied
	}
	s.log.close()
	if s.d.cfg.Unloaded != nil {
		// Before the unit leaves the map: a Load of the same name meanwhile
		// waits for done, so its first status follows this.
		s.d.cfg.Unloaded(s.name)
	}
	s.d.mu.Lock()
	if s.d.units[s.name] == s {
		delete(s.d.units, s.name)
	}
	s.d.mu.Unlock()
	close(s.done)
	s.d.wg.Done()
}

// compute derives the unit's status from the supervisor's state; prev is the
// last published status, for Since.
func (s *supervisor) compute(prev unit.Status) unit.Status {
	def := s.file
	if s.cur != nil {
		def = s.cur
	}
	st := unit.Status{
		Name:    s.name,
		Hash:    def.Hash,
		Machine: s.d.cfg.Machine,
		Load:    "loaded",
		Result:  s.result,
		Message: s.message,
		Since:   prev.Since,
	}
	st.Active, st.Sub = activeSub(s.ph, s.result)
	st.Health = s.health(st.Active)
	if s.watchdogKill && s.ph == phaseStopSigterm {
		st.Sub = "stop-watchdog"
	}
	if st.Message == "" && s.cur != nil {
		st.Message = s.statusText // STATUS=, while the run has not failed
	}
	if s.main != nil {
		st.PID = s.main.pid
	}
	if st.Active != prev.Active || st.Since.IsZero() {
		st.Since = time.Now()
	}
	return st
}

// publish records the status and notifies it if it changed.
func (s *supervisor) publish() {
	s.mu.Lock()
	prev := s.status
	st := s.compute(prev)
	changed := st != prev || s.renotify
	s.renotify = false
	s.status = st
	s.mu.Unlock()
	if changed {
		s.d.cfg.Notify(st)
	}
}

// event logs one of the driver's own messages about the unit to the unit's
// log, as systemd logs its own to the journal.
func (s *supervisor) event(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.log.line("flotilla", s.d.pid, []byte(msg))
	s.slog.Debug(msg)
}

// describe is how messages name the unit: its Description=, as systemd does.
func (s *supervisor) describe() string {
	def := s.file
	if s.cur != nil {
		def = s.cur
	}
	return cmp.Or(def.Description, s.name)
}

func (s *supervisor) handle(r request) error {
	switch r.kind {
	case reqLoad:
		if s.quit {
			return errUnloading
		}
		s.file = r.file
		s.mu.Lock()
		s.logFile = r.file
		s.mu.Unlock()
		s.applyLogConfig()
		s.renotify = true // each Load is answered with the unit's status, even unchanged
	case reqStart:
		if s.quit {
			return errUnloading
		}
		switch s.ph {
		case phaseDead:
			s.restarts = 0
			return s.start()
		case phaseStop, phaseStopSigterm, phaseStopSigkill, phaseStopPost:
			s.pendingStart = true
		}
	case reqStop:
		s.pendingStart, s.restarting = false, false
		s.stop()
	case reqQuit:
		s.quit, s.pendingStart, s.restarting = true, false, false
		s.stop()
	case reqFence:
		s.pendingStart, s.restarting = false, false
		switch s.ph {
		case phaseDead:
		case phaseAutoRestart:
			s.fenced = true
			s.stop()
		default:
			s.event("%s: No word from a current leader before the LostAfter= deadline. Killing.", s.name)
			s.slog.Warn("fence deadline passed; killing unit")
			s.fenced, s.abort, s.stopReq = true, true, true
			s.enterStopSigkill()
		}
	case reqHandover:
		st, err := s.handoverState(r.ctx)
		if err != nil {
			return err
		}
		s.pauseChecks() // the next image resumes them
		st.Health, st.Restarting = s.healthFrom, s.restarting
		*r.state = st
		s.frozen = r.thaw
	case reqAbort:
		s.quit, s.abort, s.pendingStart, s.restarting = true, true, false, false
		switch s.ph {
		case phaseDead:
		case phaseAutoRestart:
			s.stop()
		default:
			s.stopReq = true
			s.enterStopSigkill()
		}
	}
	return nil
}

// start admits a start of the newest definition, or refuses it when the
// start limit is hit. The processes are started by begin, after the request
// was answered.
func (s *supervisor) start() error {
	svc := &s.file.Service
	if !s.limiter.Allow(time.Now(), svc.StartLimitBurst, svc.StartLimitInterval) {
		s.event("%s: Start request repeated too quickly.", s.name)
		s.event("%s: Failed with result '%s'.", s.name, service.ResultStartLimitHit)
		s.event("Failed to start %s.", s.describe())
		s.ph, s.result = phaseDead, service.ResultStartLimitHit
		s.message = fmt.Sprintf("start request repeated too quickly: more than %d starts within %s", svc.StartLimitBurst, svc.StartLimitInterval)
		s.slog.Warn("start limit hit", "burst", svc.StartLimitBurst, "interval", svc.StartLimitInterval)
		return ErrStartLimitHit
	}
	s.cur = s.file
	s.ph = phaseStartPre
	s.result, s.message, s.mainResult = service.ResultSuccess, "", ""
	s.stopReq, s.postKilled, s.fenced, s.abort = false, false, false, false
	s.ready, s.statusText, s.wdLimit, s.watchdogKill = false, "", 0, false
	s.cmds = refs(s.cur.Service.ExecStartPre, "ExecStartPre")
	s.kick = true
	return nil
}

// begin prepares the run's execution environment and starts its first
// process.
func (s *supervisor) begin() {
	svc := &s.cur.Service
	s.event("Starting %s...", s.describe())
	s.slog.Info("starting unit", "hash", s.cur.Hash)
	env, err := s.d.prepare(svc)
	if err != nil {
		s.event("%s: Failed to prepare the environment: %v", s.name, err)
		s.fail(service.ResultExitCode, err.Error())
		s.enterDead()
		return
	}
	s.env = env
	if svc.CPUQuotaPercent > 0 || svc.MemoryMax > 0 {
		cg, err := s.d.cgroups.newUnitCgroup(s.name, svc.CPUQuotaPercent, svc.MemoryMax)
		if err != nil {
			s.limitsNotEnforced(err)
		} else {
			s.cg = cg
		}
	}
	s.setTimer(svc.TimeoutStartSec)
	s.advance()
}

func (s *supervisor) limitsNotEnforced(err error) {
	s.message = "resource limits not enforced: " + err.Error()
	s.event("%s: Resource limits not enforced: %v", s.name, err)
	s.slog.Warn("resource limits not enforced", "err", err)
}

func refs(cmds []unit.Command, label string) []cmdRef {
	out := make([]cmdRef, len(cmds))
	for i, c := range cmds {
		out[i] = cmdRef{cmd: c, label: label}
	}
	return out
}

// advance starts the next command of the current phase, or moves on to the
// next phase when none is left.
func (s *supervisor) advance() {
	for {
		switch s.ph {
		case phaseStartPre, phaseStart, phaseStartPost:
			if len(s.cmds) > 0 {
				c := s.cmds[0]
				s.cmds = s.cmds[1:]
				if err := s.spawn(c, s.ph == phaseStart); err != nil {
					if c.cmd.IgnoreFailure {
						continue
					}
					s.fail(service.ResultExitCode, fmt.Sprintf("%s: %v", c.label, err))
					s.enterStopSigterm()
				}
				return
			}
			switch {
			case s.ph == phaseStartPre && s.cur.Service.Type == "oneshot":
				s.ph, s.cmds = phaseStart, refs(s.cur.Service.ExecStart, "ExecStart")
			case s.ph == phaseStartPre:
				main := cmdRef{cmd: s.cur.Service.ExecStart[0], label: "ExecStart"}
				if err := s.spawn(main, true); err != nil {
					s.fail(service.ResultExitCode, fmt.Sprintf("ExecStart: %v", err))
					s.enterStopSigterm()
					return
				}
				if notifyType(s.cur) && !s.ready {
					s.ph = phaseStart // until READY=1 (onReady)
					return
				}
				s.ph, s.cmds = phaseStartPost, refs(s.cur.Service.ExecStartPost, "ExecStartPost")
			case s.ph == phaseStart && s.cur.Service.Type != "oneshot":
				return // a Type=notify unit waiting for READY=1
			case s.ph == phaseStart:
				s.ph, s.cmds = phaseStartPost, refs(s.cur.Service.ExecStartPost, "ExecStartPost")
			default:
				s.enterRunning()
				return
			}
		case phaseStop, phaseStopPost:
			if len(s.cmds) > 0 {
				c := s.cmds[0]
				s.cmds = s.cmds[1:]
				if s.spawn(c, false) != nil {
					continue
				}
				return
			}
			if s.ph == phaseStop {
				s.enterStopSigterm()
			} else {
				s.enterDead()
			}
			return
		default:
			return
		}
	}
}

// enterRunning ends a successful start.
func (s *supervisor) enterRunning() {
	s.timer.Stop()
	svc := &s.cur.Service
	if svc.Type == "oneshot" {
		s.event("Finished %s.", s.describe())
		if svc.RemainAfterExit {
			s.ph = phaseExited
			return
		}
		s.enterStopSigterm() // whatever the commands left behind
		return
	}
	s.event("Started %s.", s.describe())
	s.slog.Info("unit started", "pid", s.main.pidOrZero())
	s.ph = phaseRunning
	if s.main == nil { // it exited, cleanly, during start-post
		s.mainGone(cmp.Or(s.mainResult, service.ResultSuccess))
	}
}

func (p *proc) pidOrZero() int {
	if p == nil {
		return 0
	}
	return p.pid
}

// stop handles a stop request.
func (s *supervisor) stop() {
	switch s.ph {
	case phaseDead:
		return
	case phaseAutoRestart:
		s.timer.Stop()
		s.stopReq = true
		s.enterDead()
		return
	}
	if s.stopReq {
		return // already stopping on request
	}
	s.stopReq = true
	switch s.ph {
	case phaseStartPre, phaseStart, phaseStartPost:
		s.event("Stopping %s...", s.describe())
		s.enterStopSigterm()
	case phaseRunning, phaseExited:
		s.event("Stopping %s...", s.describe())
		s.slog.Info("stopping unit")
		s.enterStop()
	}
	// In the stop phases of a failed run the stop carries on; stopReq makes
	// it end inactive, without a restart.
}

func (s *supervisor) enterStop() {
	s.ph = phaseStop
	s.cmds = refs(s.cur.Service.ExecStop, "ExecStop")
	s.setTimer(s.cur.Service.TimeoutStopSec)
	s.advance()
}

// fail records a failure of the run; the first one is the run's result.
func (s *supervisor) fail(result, message string) {
	if result == service.ResultSuccess {
		return
	}
	if s.result == service.ResultSuccess || s.result == "" {
		s.result = result
		s.message = message
	}
}

func (s *supervisor) killMode() string {
	if s.fenced {
		return "control-group" // a fenced unit must leave nothing running
	}
	return cmp.Or(s.cur.Service.KillMode, "control-group")
}

// enterStopSigterm sends KillSignal= to what runs: the whole process groups
// under KillMode=control-group, only the main and control processes
// otherwise. When nothing runs it goes straight on.
func (s *supervisor) enterStopSigterm() {
	if s.abort {
		s.enterStopSigkill()
		return
	}
	s.cmds = nil
	s.ph, s.phaseAt = phaseStopSigterm, time.Now()
	s.pruneGroups()
	if s.stopped() {
		s.afterSigterm()
		return
	}
	sig := s.stopSignal()
	s.signal(sig, s.killMode() == "control-group")
	if sig != syscall.SIGKILL && sig != syscall.SIGCONT {
		s.signal(syscall.SIGCONT, s.killMode() == "control-group")
	}
	s.setTimer(s.cur.Service.TimeoutStopSec)
	s.startPolling()
}

// enterStopSigkill sends SIGKILL: to the whole process groups (and cgroup)
// unless KillMode=process.
func (s *supervisor) enterStopSigkill() {
	s.cmds = nil
	s.ph, s.phaseAt = phaseStopSigkill, time.Now()
	s.signal(syscall.SIGKILL, s.killMode() != "process" && s.killMode() != "none")
	timeout := s.cur.Service.TimeoutStopSec
	if s.abort && (timeout <= 0 || timeout > abortGrace) { // includes unit.Infinity
		timeout = abortGrace
	}
	s.setTimer(timeout)
	s.startPolling()
}

// signal sends sig to the main and control processes, or with groups to all
// the process groups of the run and its cgroup.
func (s *supervisor) signal(sig syscall.Signal, groups bool) {
	if groups {
		for _, g := range s.groups {
			syscall.Kill(-g.pgid, sig)
		}
		if s.cg != nil {
			s.cg.signal(sig)
		}
	}
	for _, p := range []*proc{s.main, s.control} {
		if p != nil {
			syscall.Kill(p.pid, sig)
		}
	}
}

// stopped reports whether what the current stop phase waits for is gone.
func (s *supervisor) stopped() bool {
	if s.main != nil || s.control != nil {
		return false
	}
	switch s.killMode() {
	case "process", "none":
		return true
	case "mixed":
		if s.ph == phaseStopSigterm {
			return true // the rest of the groups get SIGKILL next
		}
	}
	// A group that still exists a while after the signal may hold only
	// zombies, orphans the init has yet to reap: look closer.
	closer := time.Since(s.phaseAt) > 4*pollInterval
	for _, g := range s.groups {
		if groupExists(g.pgid) && (!closer || s.d.live.has(g.pgid)) {
			return false
		}
	}
	return s.cg == nil || !s.cg.populated()
}

// checkStopped moves a stop on once what it waits for is gone.
func (s *supervisor) checkStopped() {
	if s.ph != phaseStopSigterm && s.ph != phaseStopSigkill {
		return
	}
	if !s.stopped() {
		return
	}
	if s.ph == phaseStopSigterm {
		s.afterSigterm()
		return
	}
	s.enterStopPost()
}

func (s *supervisor) afterSigterm() {
	if s.killMode() == "mixed" {
		s.pruneGroups()
		if len(s.groups) > 0 || (s.cg != nil && s.cg.populated()) {
			s.enterStopSigkill()
			return
		}
	}
	s.enterStopPost()
}

func (s *supervisor) enterStopPost() {
	s.stopPolling()
	s.timer.Stop()
	switch s.killMode() {
	case "process", "none":
		s.groups = nil // what the main process left behind is not ours to stop
		s.writePidFile()
	}
	if s.abort {
		s.enterDead()
		return
	}
	s.ph = phaseStopPost
	s.cmds = refs(s.cur.Service.ExecStopPost, "ExecStopPost")
	s.setTimer(s.cur.Service.TimeoutStopSec)
	s.advance()
}

// enterDead ends the run: it cleans up, then restarts the unit or leaves it
// inactive or failed.
func (s *supervisor) enterDead() {
	s.stopPolling()
	s.timer.Stop()
	s.wdTimer.Stop()
	if s.cur != nil && s.killMode() != "process" && s.killMode() != "none" {
		s.pruneGroups()
		for _, g := range s.groups { // left behind by ExecStopPost=
			syscall.Kill(-g.pgid, syscall.SIGKILL)
		}
	}
	s.groups = nil
	s.writePidFile()
	if s.cg != nil {
		if err := s.cg.remove(); err != nil {
			s.slog.Warn("cannot remove unit cgroup", "cgroup", s.cg.where(), "err", err)
		}
		s.cg = nil
	}
	def := cmp.Or(s.cur, s.file)
	s.cur, s.env, s.cmds = nil, nil, nil
	s.ph = phaseDead

	switch {
	case s.fenced:
		s.result, s.message = service.ResultFenced, service.FencedMessage
		s.event("Killed %s: no word from a current leader before the LostAfter= deadline.", s.describe())
	case s.stopReq:
		s.result = service.ResultSuccess
		s.event("Stopped %s.", s.describe())
		s.slog.Info("unit stopped")
	case !s.quit && !s.pendingStart && service.ShouldRestart(def.Service.Restart, s.result):
		if s.result != service.ResultSuccess {
			s.event("%s: Failed with result '%s'.", s.name, s.result)
		}
		s.ph = phaseAutoRestart
		s.restartAt = time.Now().Add(def.Service.RestartSec)
		s.timer.Reset(max(def.Service.RestartSec, time.Millisecond))
		return
	case s.result == service.ResultSuccess:
		s.event("%s: Deactivated successfully.", s.name)
		s.slog.Info("unit exited")
	default:
		s.event("%s: Failed with result '%s'.", s.name, s.result)
		s.slog.Warn("unit failed", "result", s.result, "message", s.message)
	}
	if s.pendingStart && !s.quit {
		s.pendingStart = false
		s.restarts = 0
		s.start()
	}
}

// onTimeout handles the expiry of the current phase's timer.
func (s *supervisor) onTimeout() {
	switch s.ph {
	case phaseStartPre, phaseStart, phaseStartPost:
		s.event("%s: Start operation timed out. Terminating.", s.name)
		s.fail(service.ResultTimeout, fmt.Sprintf("start timed out after %s", s.cur.Service.TimeoutStartSec))
		s.enterStopSigterm()
	case phaseStop:
		s.event("%s: Stopping timed out. Terminating.", s.name)
		s.enterStopSigterm()
	case phaseStopSigterm:
		s.event("%s: State 'stop-sigterm' timed out. Killing.", s.name)
		if s.stopReq {
			s.message = fmt.Sprintf("stop timed out after %s: killed with SIGKILL", s.cur.Service.TimeoutStopSec)
		} else {
			s.fail(service.ResultTimeout, fmt.Sprintf("stop timed out after %s: killed with SIGKILL", s.cur.Service.TimeoutStopSec))
		}
		s.enterStopSigkill()
	case phaseStopSigkill:
		s.event("%s: Processes still around after SIGKILL. Ignoring.", s.name)
		s.slog.Error("processes survived SIGKILL; abandoning them")
		s.main, s.control, s.groups = nil, nil, nil
		s.writePidFile()
		s.enterStopPost()
	case phaseStopPost:
		if s.postKilled || s.control == nil {
			s.control = nil
			s.enterDead()
			return
		}
		s.event("%s: State 'stop-post' timed out. Killing.", s.name)
		s.postKilled = true
		syscall.Kill(-s.control.pid, syscall.SIGKILL)
		s.cmds = nil
		s.setTimer(s.cur.Service.TimeoutStopSec)
	case phaseAutoRestart:
		s.restarts++
		s.event("%s: Scheduled restart job, restart counter is at %d.", s.name, s.restarts)
		s.event("Stopped %s.", s.describe())
		s.slog.Info("restarting unit", "restarts", s.restarts)
		s.start()
	}
}

// onExit handles the exit of a process the supervisor started.
func (s *supervisor) onExit(ev exited) {
	p := ev.p
	if p == s.main && s.ph == phaseStart && notifyType(s.cur) && !s.ready {
		// A READY=1 it sent just before it exited counts.
		s.d.notifyFlush()
		s.takeNotes()
	}
	isMain := p == s.main
	s.unwatchNotify(p.pid)
	switch {
	case isMain:
		s.main = nil
	case p == s.control:
		s.control = nil
	default:
		return // abandoned after it survived SIGKILL
	}
	s.pruneGroups()
	s.writePidFile()

	if isMain && s.ph == phaseStart && notifyType(s.cur) {
		// Gone before READY=1: a failure even when it exited cleanly.
		res := ev.status.Result(true)
		if res == service.ResultSuccess {
			s.event("%s: Main process exited before READY=1, %s", s.name, ev.status)
			s.fail(service.ResultProtocol, "main process exited before READY=1, "+ev.status.String())
		} else {
			s.mainFailed(ev.status, res)
		}
		s.enterStopSigterm()
		return
	}

	switch s.ph {
	case phaseStartPost:
		if isMain {
			res := ev.status.Result(true)
			if res != service.ResultSuccess {
				s.mainFailed(ev.status, res)
				s.enterStopSigterm()
				return
			}
			s.mainResult = res // carry on; enterRunning finds the main process gone
			return
		}
		fallthrough
	case phaseStartPre, phaseStart:
		if res := ev.status.Result(false); res != service.ResultSuccess {
			if !p.cmd.IgnoreFailure {
				s.event("%s: %s process exited, %s", s.name, controlOrMain(isMain), ev.status)
				if !s.outOfMemory(p.label+"="+p.argv[0], ev.status) {
					s.fail(res, fmt.Sprintf("%s=%s: %s", p.label, p.argv[0], ev.status))
				}
				s.enterStopSigterm()
				return
			}
			s.event("%s: %s process exited, %s (ignored)", s.name, controlOrMain(isMain), ev.status)
		}
		s.advance()
	case phaseRunning:
		res := ev.status.Result(true)
		if res != service.ResultSuccess {
			s.mainFailed(ev.status, res)
		}
		s.mainGone(res)
	case phaseStop, phaseStopPost:
		if isMain {
			return // gone during ExecStop=, as asked
		}
		if ev.status.Result(false) != service.ResultSuccess && !p.cmd.IgnoreFailure {
			s.event("%s: Control process exited, %s", s.name, ev.status)
		}
		s.advance()
	case phaseStopSigterm, phaseStopSigkill:
		if isMain && ev.status.Signal == syscall.SIGKILL {
			s.event("%s: Main process exited, %s", s.name, ev.status)
		}
		s.checkStopped()
	}
}

func controlOrMain(main bool) string {
	if main {
		return "Main"
	}
	return "Control"
}

func (s *supervisor) mainFailed(st service.ExitStatus, res string) {
	s.event("%s: Main process exited, %s", s.name, st)
	if s.outOfMemory("main process", st) {
		return
	}
	s.fail(res, "main process exited, "+st.String())
}

// outOfMemory fails the run with result oom-kill when the kernel's OOM
// killer killed a process in the unit's cgroup (the one that failed, or one
// of its children) and reports whether it did: it names the failure for
// what it is, as systemd does, rather than as the signal or exit code it
// showed as. (Unlike systemd's OOMPolicy=stop, an OOM kill that does not
// end the run does not stop the unit.)
func (s *supervisor) outOfMemory(what string, st service.ExitStatus) bool {
	if s.cg == nil {
		return false
	}
	n := s.cg.oomKills()
	if n == 0 {
		return false
	}
	s.event("%s: A process of this unit has been killed by the OOM killer.", s.name)
	s.fail(service.ResultOOMKill, fmt.Sprintf("ran out of memory: the kernel's OOM killer killed %d process(es) of the unit over MemoryMax=%d; %s exited, %s",
		n, s.cur.Service.MemoryMax, what, st))
	return true
}

// mainGone handles the main process having exited on its own while the unit
// was up: RemainAfterExit= keeps a clean exit active; otherwise what it left
// behind is stopped (without ExecStop=, which addresses a main process that
// is no more) and the run ends.
func (s *supervisor) mainGone(res string) {
	if res == service.ResultSuccess && s.cur.Service.RemainAfterExit {
		s.ph = phaseExited
		return
	}
	s.fail(res, "")
	s.enterStopSigterm()
}

// pruneGroups forgets the process groups that have emptied.
func (s *supervisor) pruneGroups() {
	s.groups = slices.DeleteFunc(s.groups, func(g pgroup) bool { return !groupExists(g.pgid) })
}

func (s *supervisor) writePidFile() {
	if slices.Equal(s.groups, s.written) {
		return
	}
	if err := writePidFile(s.d.pidPath(s.name), s.groups); err != nil {
		s.slog.Error("cannot write pid file", "err", err)
		return
	}
	s.written = slices.Clone(s.groups)
}

// setTimer arms the phase's timer; d <= 0 or unit.Infinity is no timeout.
func (s *supervisor) setTimer(d time.Duration) {
	if d <= 0 || d == unit.Infinity {
		s.timer.Stop()
		return
	}
	s.timer.Reset(d)
}

func (s *supervisor) startPolling() {
	if s.ticker == nil {
		s.ticker = time.NewTicker(pollInterval)
	}
}

func (s *supervisor) stopPolling() {
	if s.ticker != nil {
		s.ticker.Stop()
		s.ticker = nil
	}
}

// spawn starts a command of the current phase: as the main process (which
// the status shows) or as the control process.
func (s *supervisor) spawn(c cmdRef, asMain bool) error {
	var extra []string
	if !asMain && s.main != nil {
		extra = append(extra, "MAINPID="+strconv.Itoa(s.main.pid))
	}
	nenv, err := s.notifyEnv(asMain)
	if err != nil {
		s.event("%s: Failed to run '%s' task: %v", s.name, c.label, err)
		return err
	}
	extra = append(extra, nenv...)
	if nenv != nil {
		// Until the process is watched (watchNotify), the socket's reader
		// waits for it before it drops a message from an unknown process.
		s.d.spawning.RLock()
		defer s.d.spawning.RUnlock()
	}
	p, g, err := s.startProcess(c, extra, s.cg)
	if err != nil && s.cg != nil && errors.Is(err, errCgroupPlacement) {
		// Never let cgroups stop a unit from starting.
		s.limitsNotEnforced(fmt.Errorf("start in cgroup %s: %w", s.cg.where(), err))
		s.cg.remove()
		s.cg = nil
		p, g, err = s.startProcess(c, extra, nil)
	}
	if err != nil {
		s.event("%s: Failed to run '%s' task: %v", s.name, c.label, err)
		s.slog.Warn("cannot start process", "command", c.label, "err", err)
		return err
	}
	if asMain {
		s.main = p
	} else {
		s.control = p
	}
	if s.d.spawnLag > 0 {
		time.Sleep(s.d.spawnLag) // tests: a process that speaks before it is watched
	}
	s.watchNotify(p.pid)
	if asMain && s.cur.Service.Type != "oneshot" {
		s.armWatchdog()
	}
	s.groups = append(s.groups, g)
	s.writePidFile()
	go s.wait(p)
	return nil
}

// wait reaps p and reports its exit to the supervisor once all it wrote is
// logged (for the order of the log: the unit's end follows its output).
//
// From the reaping until the exit is handed to the unit's goroutine it
// holds the driver's reap gate shared: a handover (Driver.Handover) takes
// it exclusively, so no process is reaped whose exit the unit has not
// seen, and none is reaped after the units' state was taken (the next
// process image reaps them).
func (s *supervisor) wait(p *proc) {
	awaitExit(p.pid)
	s.d.reapGate.RLock()
	defer s.d.reapGate.RUnlock()
	st, err := p.os.Wait()
	s.d.kids.remove(p.pid)
	select {
	case <-p.copied:
	case <-p.out.drain():
	case <-time.After(drainLimit):
	}
	status := service.ExitStatus{Signal: syscall.SIGKILL}
	if err == nil {
		status = service.ExitStatusOf(st.Sys().(syscall.WaitStatus))
	} else {
		s.slog.Error("cannot wait for a process; taking it as killed", "pid", p.pid, "err", err)
	}
	ev := exited{p: p, status: status}
	select {
	case s.exits <- ev:
	case <-s.done:
	}
}

// trackPipe registers (add) or forgets an output pipe, so that finish can cut
// off pipes held open by escaped processes.
func (s *supervisor) trackPipe(r *outPipe, pid int, add bool) {
	s.pipesMu.Lock()
	defer s.pipesMu.Unlock()
	if add {
		s.pipes[r] = pid
	} else {
		delete(s.pipes, r)
	}
}
