package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// The steady cost of [X-Check] health checks (without --check, of units
// without checks: the daemon's own idle cost, to subtract) (`flotilla bench driver
// --check tcp|http|exec --hold 60s`): once every unit is active, the bench
// waits one check interval (every unit's checks running), then measures
// for Hold the CPU time of the daemon, of the supervisor (which runs the
// units and, with the exec driver, their checks), of the probe processes
// either started (Exec=: their reaped children, and the probe spawner of
// either, run as root, with its reaped children), and of the bench's own
// TCP listener (TCP=: the other end of every probe), as a share of one
// core. The probes' time is split into Flotilla's (the spawner's own: its
// forks, waits and replies) and the commands' (the reaped children's
// cutime and cstime: each from its fork to its exit, so with the exec).

// checkUnit is the unit file of a run with checks of kind check ("tcp"
// or "http" against addr, or "exec" running /bin/true) every interval.
func checkUnit(check, addr string, interval time.Duration) (string, error) {
	head := "[Unit]\nDescription=flotilla bench unit with health checks\n\n[Service]\nExecStart=/bin/sleep infinity\n\n[X-Check]\n"
	iv := fmt.Sprintf("Interval=%dms\n", interval.Milliseconds())
	switch check {
	case "tcp":
		return head + "TCP=" + addr + "\n" + iv, nil
	case "http":
		return head + "HTTP=http://" + addr + "/health\n" + iv, nil
	case "exec":
		return head + "Exec=/bin/true\n" + iv, nil
	}
	return "", fmt.Errorf("--check %q: want tcp, http or exec", check)
}

// checkListener is the TCP listener the units' TCP= and HTTP= checks
// connect to: it accepts and closes each connection, or with http serves
// it (200 to every GET), counting them.
type checkListener struct {
	ln       net.Listener
	accepted atomic.Int64
	done     chan struct{}
	srv      *http.Server
}

func listenForChecks(withHTTP bool) (*checkListener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &checkListener{ln: ln, done: make(chan struct{})}
	if withHTTP {
		l.srv = &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }),
			ConnState: func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					l.accepted.Add(1)
				}
			},
			ReadHeaderTimeout: 10 * time.Second,
		}
		go func() {
			defer close(l.done)
			l.srv.Serve(ln)
		}()
		return l, nil
	}
	go func() {
		defer close(l.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			l.accepted.Add(1)
			c.Close()
		}
	}()
	return l, nil
}

func (l *checkListener) Close() {
	if l.srv != nil {
		l.srv.Close()
	}
	l.ln.Close()
	<-l.done
}

// HoldReport is what the hold measured: CPU seconds over HoldSeconds, and
// as a share of one core (percent).
type HoldReport struct {
	Check            string  `json:"check"`
	IntervalSeconds  float64 `json:"interval_seconds"`
	HoldSeconds      float64 `json:"hold_seconds"`
	DaemonCPUSeconds float64 `json:"daemon_cpu_seconds"`
	// ProbesCPUSeconds is the CPU time of the daemon's children reaped
	// during the hold and of its probe spawner (as root) and the children
	// that reaped: the Exec= probes.
	ProbesCPUSeconds float64 `json:"probes_cpu_seconds"`
	// SpawnerCPUSeconds is the probe spawners' own part of it (Flotilla's
	// cost), CommandsCPUSeconds the rest: the reaped children, the check
	// commands themselves (the user's cost).
	SpawnerCPUSeconds    float64 `json:"spawner_cpu_seconds"`
	CommandsCPUSeconds   float64 `json:"commands_cpu_seconds"`
	SupervisorCPUSeconds float64 `json:"supervisor_cpu_seconds"`
	// ListenerCPUSeconds is the bench process's CPU time during the hold:
	// its TCP listener accepting the TCP= probes' connections.
	ListenerCPUSeconds float64 `json:"listener_cpu_seconds"`
	// HostBusySeconds is what the whole host spent busy meanwhile (other
	// work included).
	HostBusySeconds float64 `json:"host_busy_seconds"`
	// ChecksPercent is daemon + probes + supervisor + listener, per cent
	// of one core; DaemonPercent the daemon and the probes alone;
	// CheckerPercent the daemon, the supervisor and the probes: what runs
	// the checks, without their other end (the listener).
	ChecksPercent  float64 `json:"checks_percent_of_a_core"`
	DaemonPercent  float64 `json:"daemon_and_probes_percent_of_a_core"`
	CheckerPercent float64 `json:"checker_percent_of_a_core"`
	// SupervisorPercent is the supervisor and its probe spawner (what
	// Flotilla spends running the checks, the daemon's idle cost aside);
	// FlotillaPercent adds the daemon; CommandsPercent is the check
	// commands' own processes. CheckerPercent is FlotillaPercent +
	// CommandsPercent.
	SupervisorPercent float64 `json:"supervisor_percent_of_a_core"`
	FlotillaPercent   float64 `json:"flotilla_percent_of_a_core"`
	CommandsPercent   float64 `json:"commands_percent_of_a_core"`
	// Connections is how many connections the listener accepted (TCP=);
	// Healthy how many units were healthy at the end.
	Connections int64 `json:"connections,omitempty"`
	Healthy     int   `json:"healthy"`
}

// clockTicks is the unit of /proc/PID/stat's times (sysconf(_SC_CLK_TCK),
// 100 on Linux).
const clockTicks = 100

// cpuSample is the CPU times the hold compares.
type cpuSample struct {
	daemon, spawner, commands, sup, self, host time.Duration
	at                                         time.Time
}

// reaped is the CPU time of st's reaped children.
func reaped(st procfs.ProcStat) time.Duration {
	return time.Duration(st.CUTime+st.CSTime) * time.Second / clockTicks
}

func (d *benchDaemon) sample() cpuSample {
	s := cpuSample{at: time.Now()}
	if p, err := procfs.NewProc(d.proc.pid()); err == nil {
		if st, err := p.Stat(); err == nil {
			s.daemon = seconds(st.CPUTime())
			s.commands = reaped(st)
		}
	}
	sup := d.supervisorPID()
	if sup > 0 {
		if p, err := procfs.NewProc(sup); err == nil {
			if st, err := p.Stat(); err == nil {
				s.sup = seconds(st.CPUTime())
				// Its reaped children: the Exec= probes it ran (the units,
				// sleeping, do not end during the hold).
				s.commands += reaped(st)
			}
		}
	}
	// The probe spawners (as root), children of the daemon or of the
	// supervisor, and the probes they reaped.
	if procs, err := procfs.AllProcs(); err == nil {
		for _, p := range procs {
			st, err := p.Stat()
			if err != nil || st.PPID != d.proc.pid() && (sup <= 0 || st.PPID != sup) {
				continue
			}
			if args, err := p.CmdLine(); err == nil && len(args) > 0 && args[0] == "flotilla-unit-spawner" {
				s.spawner += seconds(st.CPUTime())
				s.commands += reaped(st)
			}
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	s.host, _ = readHostBusy()
	return s
}

// hold measures the checks' cost; see above.
func (d *benchDaemon) hold(ctx context.Context, cfg *DriverConfig, l *checkListener, prog *progress) (*HoldReport, error) {
	prog.phase("letting every unit's checks begin (%v)", cfg.CheckInterval)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(cfg.CheckInterval):
	}
	prog.phase("measuring the checks' CPU for %v", cfg.Hold)
	var conns0 int64
	if l != nil {
		conns0 = l.accepted.Load()
	}
	if cfg.ProfileDir != "" {
		d.proc.cmd.Process.Signal(syscall.SIGUSR1) // start the CPU profile
		defer d.proc.cmd.Process.Signal(syscall.SIGUSR2)
	}
	s0 := d.sample()
	deadline := time.Now().Add(cfg.Hold)
	for time.Now().Before(deadline) {
		if err := d.proc.exited(); err != nil {
			return nil, err
		}
		prog.status("%.0f s of %.0f s", time.Until(deadline).Seconds(), cfg.Hold.Seconds())
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(min(time.Second, time.Until(deadline))):
		}
	}
	s1 := d.sample()
	el := s1.at.Sub(s0.at)
	daemon, sup, spawner := s1.daemon-s0.daemon, s1.sup-s0.sup, s1.spawner-s0.spawner
	commands, self := s1.commands-s0.commands, s1.self-s0.self
	r := &HoldReport{
		Check: cmp.Or(cfg.Check, "no"), IntervalSeconds: cfg.CheckInterval.Seconds(), HoldSeconds: round3(el.Seconds()),
		DaemonCPUSeconds:     round3(daemon.Seconds()),
		ProbesCPUSeconds:     round3((spawner + commands).Seconds()),
		SpawnerCPUSeconds:    round3(spawner.Seconds()),
		CommandsCPUSeconds:   round3(commands.Seconds()),
		SupervisorCPUSeconds: round3(sup.Seconds()),
		ListenerCPUSeconds:   round3(self.Seconds()),
		HostBusySeconds:      round3((s1.host - s0.host).Seconds()),
	}
	if l != nil {
		r.Connections = l.accepted.Load() - conns0
	}
	pct := func(d time.Duration) float64 { return round3(100 * d.Seconds() / el.Seconds()) }
	r.ChecksPercent = pct(daemon + spawner + commands + sup + self)
	r.DaemonPercent = pct(daemon + spawner + commands)
	r.CheckerPercent = pct(daemon + spawner + commands + sup)
	r.SupervisorPercent = pct(sup + spawner)
	r.FlotillaPercent = pct(daemon + sup + spawner)
	r.CommandsPercent = pct(commands)
	n, err := countHealthy(ctx, "http://"+d.api)
	if err != nil {
		return nil, err
	}
	r.Healthy = n
	return r, nil
}

// countHealthy counts the bench's units the leader says are healthy.
func countHealthy(ctx context.Context, base string) (int, error) {
	hc := (*runTLS)(nil).httpClient(time.Minute)
	var l struct {
		States []struct {
			Name   string `json:"name"`
			Health string `json:"health"`
		} `json:"states"`
	}
	if err := getJSON(ctx, hc, base+"/v1/unit-states", &l); err != nil {
		return 0, err
	}
	n := 0
	for _, s := range l.States {
		if s.Health == "healthy" {
			n++
		}
	}
	return n, nil
}
