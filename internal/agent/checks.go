package agent

import (
	"os/exec"

	"github.com/flotilla/flotilla/internal/driver"
	"github.com/flotilla/flotilla/internal/health"
	"github.com/flotilla/flotilla/internal/unit"
)

// The agent runs a unit's [X-Check] probes (internal/health) while the
// driver reports the unit active with the file it was assigned: from the
// report that says it became active, until one says it is not, or it is
// unloaded (which a change of its file is: unloaded, then loaded again).
// The unit's health goes to the leader with its state (statusesLocked):
//
//   - not active: none (""), but "unhealthy" while the result of its run
//     is "watchdog" (its WatchdogSec= passed without WATCHDOG=1: the
//     driver is killing it, it waits to restart, or it failed), until it
//     starts again;
//   - active, with [X-Check]: what its checks decided, "unknown" until
//     they have;
//   - active, without [X-Check], whose driver judges its health (a Docker
//     image's HEALTHCHECK): what the driver says;
//   - active, without [X-Check]: "healthy". For Type=notify and
//     notify-reload that means READY=1 came: the drivers that run them
//     (exec, and systemd itself) keep such a unit activating/start until
//     it does, and the agent holds them to that. The rule lives here,
//     where the file is known, so that the leader, the API and the CLI
//     show what the agent says and need not know the file.
//
// OnUnhealthy=restart: when the checks turn unhealthy the agent stops the
// unit through its driver, and starts it again once the driver reports it
// stopped (so that no driver is asked to start a unit still stopping),
// unless the leader meanwhile wants it stopped. The unit stays unhealthy
// through the restart (while stopping, stopped and starting too) until its
// new checks pass, the first of them an Interval after it is active again:
// so the leader sees one turn to unhealthy however the agent's reports are
// gathered, and a restart is once per turn (a unit that still fails is
// not restarted again until it has been healthy).
//
// A driver may run a unit's checks itself (driver.Checker: the exec driver
// in the machine's supervisor, so that they go on while no daemon runs),
// by the same rules (internal/driver/exec/checks.go). The agent then runs
// none for it and reports the Health of the driver's statuses: what its
// checks decided while active, "unhealthy" while the driver restarts it
// (OnUnhealthy=restart); the watchdog's rule above still applies. A
// restarted daemon so reports an adopted unit's health at once, not
// "unknown" until new checks decide.

// ProbeCommand builds the process of an [X-Check] Exec= probe of unit f, as
// the unit's own processes are built (Config.ProbeCommand).
type ProbeCommand func(f *unit.File, c unit.Command) (*exec.Cmd, error)

// resultWatchdog is the Result of a run its watchdog ended (systemd's, and
// the exec driver's).
const resultWatchdog = "watchdog"

// checkRun is a unit's checks being run.
type checkRun struct {
	hash    string // the file they are of
	runner  *health.Runner
	state   string
	restart bool // OnUnhealthy=restart
}

// healthLocked is unit name's health as reported to the leader, given its
// report s. Callers hold mu.
func (a *Agent) healthLocked(name string, s report) string {
	if a.restarting[name] || a.restarted[name] && a.haves[name].Applied == unit.Launched {
		return health.Unhealthy
	}
	byDriver := a.driverChecksLocked(name)
	if s.states[1] != "active" {
		if s.states[3] == resultWatchdog { // a start begins a run with another result
			return health.Unhealthy
		}
		if byDriver && s.states[4] == health.Unhealthy {
			return health.Unhealthy // restarted by its driver for being unhealthy
		}
		return ""
	}
	if c := a.checks[name]; c != nil {
		return c.state
	}
	if h := s.states[4]; h != "" && (byDriver || a.files[name] == nil || a.files[name].Check == nil) {
		// The driver's own judgement: of the [X-Check] it runs, or
		// Docker's HEALTHCHECK, over which [X-Check] wins.
		return h
	}
	if f := a.files[name]; f != nil && f.Check != nil && f.Hash == s.hash {
		return health.Unknown // its checks are about to start
	}
	return health.Healthy
}

// syncChecksLocked starts or stops unit name's checks to match its latest
// report and assigned file; the runners it returns are to be stopped by
// the caller once it has let mu go (stopChecks). Callers hold mu.
func (a *Agent) syncChecksLocked(name string, stop []*health.Runner) []*health.Runner {
	cur := a.checks[name]
	s, reported := a.statuses[name]
	_, loaded := a.haves[name]
	active := loaded && reported && s.states[1] == "active" && !a.checksStopped && !a.driverChecksLocked(name)
	if cur != nil && (!active || cur.hash != s.hash) {
		delete(a.checks, name)
		if loaded {
			a.dirty[name] = true
		}
		stop = append(stop, cur.runner)
		cur = nil
	}
	if !active || cur != nil {
		return stop
	}
	f := a.files[name]
	if f == nil || f.Check == nil || f.Hash != s.hash {
		return stop
	}
	c := f.Check
	var cmd health.CommandFunc
	if pc := a.cfg.ProbeCommand; pc != nil {
		cmd = func(x unit.Command) (*exec.Cmd, error) { return pc(f, x) }
	}
	probes, err := health.Probes(c, cmd, a.cfg.ProbeRunner)
	if err != nil {
		// The parser checked the URLs; one that net/url refuses still
		// leaves the unit unhealthy, never silently healthy.
		a.log.Error("health check cannot run", "unit", name, "err", err)
		a.checks[name] = &checkRun{hash: s.hash, state: health.Unhealthy}
		a.dirty[name] = true
		return stop
	}
	restarted := a.restarted[name]
	delete(a.restarted, name)
	run := &checkRun{hash: s.hash, state: health.Unknown, restart: c.OnUnhealthy == "restart"}
	if restarted {
		run.state = health.Unhealthy
	}
	a.checks[name] = run
	a.dirty[name] = true
	run.runner = health.Start(c, probes, a.cfg.Now, restarted, func(state string, reason error) { a.healthChanged(name, run, state, reason) })
	return stop
}

// driverChecksLocked reports whether unit name's driver runs its
// [X-Check] itself (driver.Checker: the exec driver in the machine's
// supervisor process, where they go on while no daemon runs), reporting
// their outcome, and OnUnhealthy=restart, in the unit's status. Callers
// hold mu.
func (a *Agent) driverChecksLocked(name string) bool {
	c, ok := a.cfg.Driver.(driver.Checker)
	return ok && c.RunsChecks(name)
}

// stopChecks stops runners syncChecksLocked let go, without waiting for
// them: one may be reporting, and its report may be what stops it.
func stopChecks(stop []*health.Runner) {
	for _, r := range stop {
		if r != nil {
			go r.Stop()
		}
	}
}

// healthChanged takes a change of unit name's health from its checks run.
func (a *Agent) healthChanged(name string, run *checkRun, state string, reason error) {
	a.mu.Lock()
	if a.checks[name] != run {
		a.mu.Unlock()
		return // stopped meanwhile
	}
	run.state = state
	a.dirty[name] = true
	restart := state == health.Unhealthy && run.restart && a.haves[name].Applied == unit.Launched && !a.restarting[name]
	if restart {
		a.restarting[name] = true
	}
	a.mu.Unlock()
	a.wake()
	switch {
	case restart:
		a.log.Warn("unit unhealthy; restarting it (OnUnhealthy=restart)", "unit", name, "reason", reason)
		go func() {
			if err := a.cfg.Driver.Stop(name); err != nil {
				a.failed("restart of an unhealthy unit: stop failed", name, err)
				a.mu.Lock()
				delete(a.restarting, name)
				a.mu.Unlock()
			}
		}()
	case state == health.Unhealthy:
		a.log.Warn("unit unhealthy", "unit", name, "reason", reason)
	default:
		a.log.Info("unit health", "unit", name, "health", state)
	}
}

// restartLocked reports whether unit name, stopped for being unhealthy,
// is to be started again now that its report s says it no longer runs
// (the leader still wants it launched). Callers hold mu.
func (a *Agent) restartLocked(name string, s unit.Status) bool {
	if !a.restarting[name] || s.Running() {
		return false
	}
	delete(a.restarting, name)
	if a.haves[name].Applied != unit.Launched {
		return false
	}
	a.restarted[name] = true // until its new checks run
	return true
}

// restartUnhealthy starts unit name again after restartLocked said so.
func (a *Agent) restartUnhealthy(name string) {
	go func() {
		if err := a.cfg.Driver.Start(name); err != nil {
			a.failed("restart of an unhealthy unit: start failed", name, err)
			a.mu.Lock()
			delete(a.restarted, name)
			a.dirty[name] = true
			a.mu.Unlock()
			a.wake()
			return
		}
		a.log.Info("restarted an unhealthy unit", "unit", name)
	}()
}

// stopAllChecks stops every unit's checks (Run's end) and waits for them.
func (a *Agent) stopAllChecks() {
	a.mu.Lock()
	a.checksStopped = true
	var stop []*health.Runner
	for name, c := range a.checks {
		stop = append(stop, c.runner)
		delete(a.checks, name)
	}
	a.mu.Unlock()
	for _, r := range stop {
		if r != nil {
			r.Stop()
		}
	}
}
