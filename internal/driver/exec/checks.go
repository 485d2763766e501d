package execdriver

import (
	"context"
	"os/exec"
	"strings"

	"github.com/flotilla/flotilla/internal/driver/service"
	"github.com/flotilla/flotilla/internal/health"
	"github.com/flotilla/flotilla/internal/spawn"
	"github.com/flotilla/flotilla/internal/unit"
)

// With Config.Checks the driver runs each unit's [X-Check] health checks
// itself (internal/health), as the agent does for the other drivers (see
// internal/agent/checks.go, whose rules these are), and reports their
// outcome in unit.Status.Health. The machine's supervisor process does
// this, so that the checks, and OnUnhealthy=restart, go on while no
// daemon is connected, and a daemon that connects hears the health at
// once with the units' states.
//
// A unit's checks run while it is active with a definition that has
// [X-Check]: from the status that says it became active until one says it
// is not, each run's checks in a runner of their own. Its Health is what
// they decided ("unknown" until they have); "" for a unit without checks
// or not active, which the agent judges by its rules (healthy while
// active, unhealthy after its watchdog fired).
//
// OnUnhealthy=restart: when the checks turn unhealthy the driver stops the
// unit and starts it again once stopped (as a Stop then a Start would),
// unless a Stop, an unload or a fence comes meanwhile. The unit stays
// unhealthy through the restart (stopping, stopped, starting) until the
// new run's checks pass, the first of them an Interval after it is active
// again; so a restart is once per turn: a unit that still fails is not
// restarted again until it has been healthy.

// unitChecks are the checks of a unit's run.
type unitChecks struct {
	hash    string // the definition they are of
	runner  *health.Runner
	state   string
	restart bool // OnUnhealthy=restart
}

// healthEvent is a change of health a runner reported.
type healthEvent struct {
	run    *unitChecks
	state  string
	reason error
}

// RunsChecks reports whether the driver runs units' [X-Check] health
// checks itself (Config.Checks), for every unit (driver.Checker).
func (d *Driver) RunsChecks(string) bool { return d.cfg.Checks }

// syncChecks starts or stops the unit's checks to match its phase and
// definition; the unit's goroutine calls it before each publish.
func (s *supervisor) syncChecks() {
	if !s.d.cfg.Checks {
		return
	}
	active, _ := activeSub(s.ph, s.result)
	want := active == "active" && !s.quit && s.cur != nil && s.cur.Check != nil
	if s.chk != nil && (!want || s.chk.hash != s.cur.Hash) {
		if r := s.chk.runner; r != nil {
			go r.Stop() // it may be queueing a report: never wait for it here
		}
		s.chk = nil
	}
	if s.restarting && s.ph == phaseDead {
		s.restarting = false // the restart did not start the unit (a start limit, a failed run)
	}
	if !want {
		s.healthFrom = "" // of a run that is over
		return
	}
	if s.chk != nil {
		return
	}
	c := s.cur.Check
	probes, err := health.Probes(c, s.probeCommand(s.cur, s.env), s.d.runProbe)
	if err != nil {
		// The parser checked the URLs; one that net/url refuses still
		// leaves the unit unhealthy, never silently healthy.
		s.slog.Error("health check cannot run", "err", err)
		s.chk = &unitChecks{hash: s.cur.Hash, state: health.Unhealthy}
		s.restarting, s.healthFrom = false, ""
		return
	}
	run := &unitChecks{hash: s.cur.Hash, restart: c.OnUnhealthy == "restart"}
	report := func(state string, reason error) { s.queueHealth(healthEvent{run, state, reason}) }
	switch {
	case s.restarting:
		run.state = health.Unhealthy
		run.runner = health.Start(c, probes, nil, true, report)
	case s.healthFrom != "":
		run.state = s.healthFrom
		run.runner = health.Resume(c, probes, nil, s.healthFrom, s.status.Since, report)
	default:
		run.state = health.Unknown
		run.runner = health.Start(c, probes, nil, false, report)
	}
	s.restarting, s.healthFrom = false, ""
	s.chk = run
}

// pauseChecks stops the unit's checks and waits for their runner, keeping
// their health for a Resume (a handover).
func (s *supervisor) pauseChecks() {
	if s.chk == nil {
		return
	}
	if r := s.chk.runner; r != nil {
		r.Stop()
	}
	s.healthFrom = s.chk.state
	s.chk = nil
	s.healthMu.Lock()
	s.healthEvs = nil
	s.healthMu.Unlock()
}

// queueHealth hands a runner's report to the unit's goroutine; it never
// blocks, so that a runner being stopped can always return.
func (s *supervisor) queueHealth(ev healthEvent) {
	s.healthMu.Lock()
	s.healthEvs = append(s.healthEvs, ev)
	s.healthMu.Unlock()
	select {
	case s.healthWake <- struct{}{}:
	default:
	}
}

// takeHealth acts on the runners' reports: the unit's goroutine calls it.
func (s *supervisor) takeHealth() {
	s.healthMu.Lock()
	evs := s.healthEvs
	s.healthEvs = nil
	s.healthMu.Unlock()
	for _, ev := range evs {
		if ev.run != s.chk {
			continue // of checks stopped meanwhile
		}
		ev.run.state = ev.state
		switch {
		case ev.state != health.Unhealthy:
			s.slog.Info("unit health", "health", ev.state)
		case ev.run.restart && !s.restarting && !s.quit && (s.ph == phaseRunning || s.ph == phaseExited):
			s.event("%s: Unhealthy: %v. Restarting it (OnUnhealthy=restart).", s.name, ev.reason)
			s.slog.Warn("unit unhealthy; restarting it (OnUnhealthy=restart)", "reason", ev.reason)
			s.restarting, s.pendingStart = true, true // before stop, which may end the run at once
			s.stop()
		default:
			s.event("%s: Unhealthy: %v.", s.name, ev.reason)
			s.slog.Warn("unit unhealthy", "reason", ev.reason)
		}
	}
}

// health is the unit's Health in its status.
func (s *supervisor) health(active string) string {
	switch {
	case s.restarting:
		return health.Unhealthy
	case s.chk != nil:
		return s.chk.state
	case s.d.cfg.Checks && active == "active" && s.cur != nil && s.cur.Check != nil:
		return health.Unknown // about to start
	}
	return ""
}

// probeCommand builds the processes of the Exec= probes of f, a run of
// which started with env (nil: worked out at each probe), as the run's
// own processes are: its environment (Environment=, and EnvironmentFile=
// read at each probe), its variables expanded, as User=/Group=, in
// WorkingDirectory=, in a process group of their own that is killed with
// the driver. What does not change between probes (the environment of a
// unit without EnvironmentFile=, each command's expansion and program)
// is worked out once.
func (s *supervisor) probeCommand(f *unit.File, env *execEnv) health.CommandFunc {
	d := s.d
	svc := &f.Service
	hidden := d.cfg.Inaccessible
	type built struct {
		path string
		argv []string
	}
	var fixed []string        // the environment, when it is fixed
	var cmds map[string]built // by argv joined with NULs, when fixed
	if env != nil && len(svc.EnvironmentFiles) == 0 {
		if e, err := service.UnitEnviron(env.base, svc, hidden...); err == nil {
			fixed = e.List()
			pathVar, _ := e.Get("PATH")
			cmds = make(map[string]built, len(f.Check.Exec))
			for _, c := range f.Check.Exec {
				argv := service.ExpandArgv(c.Argv, e)
				if path, err := service.LookPath(argv[0], pathVar); err == nil {
					cmds[strings.Join(c.Argv, "\x00")] = built{path, argv}
				}
			}
		}
	}
	return func(c unit.Command) (*exec.Cmd, error) {
		ee := env
		if ee == nil {
			var err error
			if ee, err = d.prepare(svc); err != nil {
				return nil, err
			}
		}
		b, ok := cmds[strings.Join(c.Argv, "\x00")]
		vars := fixed
		if !ok {
			e, err := service.UnitEnviron(ee.base, svc, hidden...)
			if err != nil {
				return nil, err
			}
			b.argv = service.ExpandArgv(c.Argv, e)
			pathVar, _ := e.Get("PATH")
			if b.path, err = service.LookPath(b.argv[0], pathVar); err != nil {
				return nil, err
			}
			vars = e.List()
		}
		return d.probeCmd(b.path, b.argv, vars, ee, hidden), nil
	}
}

// maxProbeOutput is how much of a probe's output runProbe keeps (as
// unithide.Spawner does).
const maxProbeOutput = 4096

// runProbe runs an Exec= probe's process to its end: through
// Config.ProbeRunner when set (it hides the paths), or as a child of this
// process (internal/spawn), counted among the driver's children (a
// subreaper's orphan reaping must leave it alone) until it is reaped, its
// exit and its output waited for through the runtime's poller, not a
// thread blocked in wait. The first maxProbeOutput bytes of its output go
// to x.Stdout. When ctx ends first its process group is SIGKILLed.
func (d *Driver) runProbe(ctx context.Context, x *exec.Cmd) error {
	if d.cfg.ProbeRunner != nil {
		return d.cfg.ProbeRunner(ctx, x)
	}
	a := &spawn.Attr{Path: x.Path, Argv: x.Args, Env: x.Env, Dir: x.Dir}
	if sa := x.SysProcAttr; sa != nil {
		a.Cred, a.Unshareflags = sa.Credential, sa.Unshareflags
	}
	d.kids.lock.RLock()
	p, err := spawn.Start(a, maxProbeOutput)
	if err == nil {
		d.kids.add(p.Pid)
	}
	d.kids.lock.RUnlock()
	if err != nil {
		return err
	}
	defer d.kids.remove(p.Pid)
	ws, out, err := p.Wait(ctx)
	if x.Stdout != nil && len(out) > 0 {
		x.Stdout.Write(out)
	}
	if err != nil {
		return err
	}
	return spawn.Err(ws)
}
