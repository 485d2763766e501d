package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/freeport"
	"github.com/flotilla/flotilla/internal/limits"
)

// DriverConfig configures `flotilla bench driver`: one real daemon (embedded
// etcd, engine and agent in one process, as `flotilla dev`) running its
// units with Driver, which starts and then stops Units units.
type DriverConfig struct {
	// Binary is the flotilla binary the daemon runs (default: this
	// process's executable).
	Binary string
	// Driver is passed as is to the daemon's --driver flag (default exec).
	Driver string
	// Units is the number of units started then stopped, 1 to MaxDriverUnits
	// (default 1000).
	Units int
	// UnitFile is the text of every unit (default DefaultDriverUnit: a
	// service running /bin/sleep infinity). A driver that runs other kinds
	// of unit (containers) is given one it runs.
	UnitFile string
	// Baseline, if set, is also timed on the same host: "exec" starts Units
	// /bin/sleep infinity processes from the bench, one after another,
	// then stops them (SIGTERM, reaped), the floor for any driver;
	// "command" runs BaselineStart for each unit, one after another, then
	// BaselineStop for each (a plain systemd-run or docker run loop).
	Baseline string
	// BaselineStart and BaselineStop are the commands of the "command"
	// baseline, split at spaces, with each {} replaced by the unit's name
	// (bench-0001 and so on), run without a shell: for example
	// "systemd-run --unit {} /bin/sleep infinity" and "systemctl stop {}",
	// or "docker run -d --name {} IMAGE" and "docker rm -f {}".
	BaselineStart, BaselineStop string
	// Timeout bounds each of the waits: for every unit active, for every
	// unit stopped (default 5m).
	Timeout time.Duration
	// Check, "tcp", "http" or "exec", gives every unit an [X-Check]
	// section (TCP= to a listener of the bench's, HTTP= GET of it, or
	// Exec=/bin/true) run every
	// CheckInterval (default 5s); Hold, once every unit is active, is how
	// long the checks' CPU is measured (see HoldReport). Not with UnitFile.
	Check         string
	CheckInterval time.Duration
	Hold          time.Duration
	// ProfileDir, with Hold, keeps the daemon's CPU and heap profiles of
	// the hold there (the daemon's --profile-dir).
	ProfileDir string
	// JSON prints the report as one JSON object on one line.
	JSON bool
	// Out receives the report (default os.Stdout); Progress the progress
	// (default os.Stderr).
	Out, Progress io.Writer
}

// MaxDriverUnits is the largest DriverConfig.Units.
const MaxDriverUnits = 100_000

// DefaultDriverUnit is the unit `flotilla bench driver` starts by default.
const DefaultDriverUnit = "[Unit]\nDescription=flotilla bench unit\n\n[Service]\nExecStart=/bin/sleep infinity\n"

func (c *DriverConfig) validate() error {
	if c.Driver == "" {
		c.Driver = "exec"
	}
	if c.Units == 0 {
		c.Units = 1000
	}
	if c.Units < 1 || c.Units > MaxDriverUnits {
		return fmt.Errorf("--units %d: want 1 to %d", c.Units, MaxDriverUnits)
	}
	switch {
	case c.Check != "" && c.UnitFile != "":
		return errors.New("--check makes the unit file: leave out --unit-file")
	case c.Check != "" && c.Check != "tcp" && c.Check != "http" && c.Check != "exec":
		return fmt.Errorf("--check %q: want tcp, http or exec", c.Check)
	case c.Hold < 0:
		return fmt.Errorf("--hold %v: want a positive duration", c.Hold)
	case c.CheckInterval < 0:
		return fmt.Errorf("--check-interval %v: want a positive duration", c.CheckInterval)
	}
	if c.CheckInterval == 0 {
		c.CheckInterval = 5 * time.Second
	}
	if c.UnitFile == "" && c.Check == "" {
		c.UnitFile = DefaultDriverUnit
	}
	switch c.Baseline {
	case "", "exec":
		if c.BaselineStart != "" || c.BaselineStop != "" {
			return errors.New("--baseline-start and --baseline-stop go with --baseline command")
		}
	case "command":
		if len(strings.Fields(c.BaselineStart)) == 0 || len(strings.Fields(c.BaselineStop)) == 0 {
			return errors.New("--baseline command needs --baseline-start and --baseline-stop")
		}
	default:
		return fmt.Errorf("--baseline %q: want exec or command", c.Baseline)
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Minute
	}
	if c.Timeout < 0 {
		return fmt.Errorf("--timeout %v: want a positive duration", c.Timeout)
	}
	if c.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find the flotilla binary to run the daemon with: %w", err)
		}
		c.Binary = exe
	}
	if c.Out == nil {
		c.Out = os.Stdout
	}
	if c.Progress == nil {
		c.Progress = os.Stderr
	}
	return nil
}

// DriverReport is what `flotilla bench driver` measured.
type DriverReport struct {
	Driver   string `json:"driver"`
	Units    int    `json:"units"`
	HostCPUs int    `json:"host_cpus"`
	// StartSeconds runs from the start request (every unit, desired state
	// launched) until the leader saw the last unit active; StopSeconds from
	// the stop request (desired state loaded) until it saw the last unit
	// inactive (or failed, as some drivers show a process ended by its stop
	// signal). Both by the leader's clock (each unit's observedAt).
	StartSeconds float64 `json:"start_seconds"`
	StopSeconds  float64 `json:"stop_seconds"`
	// Active counts the units seen active, Failed those that failed to
	// start; Stopped those seen inactive or failed after the stop, of which
	// StopFailed failed.
	Active     int `json:"active"`
	Failed     int `json:"failed"`
	Stopped    int `json:"stopped"`
	StopFailed int `json:"stop_failed,omitempty"`
	// CPU time of the daemon and of the processes it started to run units
	// (the exec driver's supervisor), during the start and during the stop.
	DaemonStartCPUSeconds     float64 `json:"daemon_start_cpu_seconds"`
	DaemonStopCPUSeconds      float64 `json:"daemon_stop_cpu_seconds"`
	SupervisorStartCPUSeconds float64 `json:"supervisor_start_cpu_seconds,omitempty"`
	SupervisorStopCPUSeconds  float64 `json:"supervisor_stop_cpu_seconds,omitempty"`
	// Hold is the checks' cost once every unit was active (--hold).
	Hold *HoldReport `json:"hold,omitempty"`
	// Baseline is the plain loop timed beside the driver, if asked for.
	Baseline *BaselineReport `json:"baseline,omitempty"`
	// Error says why not every unit started or stopped.
	Error string `json:"error,omitempty"`
}

// BaselineReport times a plain loop starting, then stopping, the same
// number of units without Flotilla.
type BaselineReport struct {
	Kind         string  `json:"kind"` // exec, or the start command
	StartSeconds float64 `json:"start_seconds"`
	StopSeconds  float64 `json:"stop_seconds"`
}

// WriteText writes the report for people.
func (r *DriverReport) WriteText(w io.Writer) {
	fmt.Fprintf(w, "driver %s, %s units, %d CPUs\n", r.Driver, thousands(int64(r.Units)), r.HostCPUs)
	fmt.Fprintf(w, "  start: %8.3f s until %s/%s active", r.StartSeconds, thousands(int64(r.Active)), thousands(int64(r.Units)))
	if r.Failed > 0 {
		fmt.Fprintf(w, " (%s failed)", thousands(int64(r.Failed)))
	}
	fmt.Fprintf(w, "; CPU: daemon %.2f s, supervisor %.2f s\n", r.DaemonStartCPUSeconds, r.SupervisorStartCPUSeconds)
	fmt.Fprintf(w, "  stop:  %8.3f s until %s/%s stopped", r.StopSeconds, thousands(int64(r.Stopped)), thousands(int64(r.Units)))
	if r.StopFailed > 0 {
		fmt.Fprintf(w, " (%s failed)", thousands(int64(r.StopFailed)))
	}
	fmt.Fprintf(w, "; CPU: daemon %.2f s, supervisor %.2f s\n", r.DaemonStopCPUSeconds, r.SupervisorStopCPUSeconds)
	if h := r.Hold; h != nil {
		fmt.Fprintf(w, "  hold:  %8.3f s with %s checks every %v: %.2f%% of a core, %.2f%% without the listener (daemon %.2f s, probes %.2f s, supervisor %.2f s, listener %.2f s; host busy %.2f s); %d connections, %d healthy\n",
			h.HoldSeconds, h.Check, time.Duration(h.IntervalSeconds*float64(time.Second)), h.ChecksPercent, h.CheckerPercent,
			h.DaemonCPUSeconds, h.ProbesCPUSeconds, h.SupervisorCPUSeconds, h.ListenerCPUSeconds, h.HostBusySeconds, h.Connections, h.Healthy)
		fmt.Fprintf(w, "         Flotilla %.2f%% of a core (supervisor and probe spawner %.2f%%: %.2f s + %.2f s; daemon %.2f s), check commands %.2f%% (%.2f s)\n",
			h.FlotillaPercent, h.SupervisorPercent, h.SupervisorCPUSeconds, h.SpawnerCPUSeconds, h.DaemonCPUSeconds, h.CommandsPercent, h.CommandsCPUSeconds)
	}
	if b := r.Baseline; b != nil {
		fmt.Fprintf(w, "  plain loop (%s): start %.3f s, stop %.3f s\n", b.Kind, b.StartSeconds, b.StopSeconds)
	}
	if r.Error != "" {
		fmt.Fprintf(w, "  error: %s\n", r.Error)
	}
}

// RunDriver runs `flotilla bench driver`: it starts one daemon with
// cfg.Driver in a temporary directory, starts cfg.Units units through its
// API in batch requests, waits until the leader sees every one active,
// stops them all the same way, waits until every one is stopped, and
// prints the report. The units are then destroyed, the daemon stopped, and
// the processes it left to run units (the exec driver's supervisor) told
// to stop; the directory is removed. It returns ErrNotAllActive, after
// the report, when some unit did not start or stop in time.
func RunDriver(ctx context.Context, cfg DriverConfig) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	prog := newProgress(cfg.Progress)
	prog.prefix = cfg.Driver + ": "
	r, err := runDriver(ctx, &cfg, prog)
	prog.done()
	if err != nil {
		if ctx.Err() != nil {
			return errors.New("interrupted; every process and directory the run made is removed")
		}
		return err
	}
	if cfg.Baseline != "" {
		prog.prefix = "plain loop: "
		b, err := runBaseline(ctx, &cfg, prog)
		prog.done()
		if err != nil {
			return fmt.Errorf("plain loop: %w", err)
		}
		r.Baseline = b
	}
	if cfg.JSON {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(cfg.Out, "%s\n", b); err != nil {
			return err
		}
	} else {
		r.WriteText(cfg.Out)
	}
	if r.Active < cfg.Units || r.Stopped < cfg.Units {
		return ErrNotAllActive
	}
	return nil
}

// benchDaemon is the one daemon of a driver run, and the supervisor it
// started, if any.
type benchDaemon struct {
	proc    *process
	dataDir string
	api     string
}

// supervisorPID is the pid of the exec driver's supervisor, or 0.
func (d *benchDaemon) supervisorPID() int {
	data, err := os.ReadFile(filepath.Join(d.dataDir, "units", "supervisor.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid
}

// cpu returns the CPU time so far of the daemon and of the supervisor.
func (d *benchDaemon) cpu() (daemon, sup time.Duration) {
	if st, err := readProcStats(d.proc.pid()); err == nil {
		daemon = st.CPU
	}
	if pid := d.supervisorPID(); pid > 0 {
		if st, err := readProcStats(pid); err == nil {
			sup = st.CPU
		}
	}
	return daemon, sup
}

func runDriver(ctx context.Context, cfg *DriverConfig, prog *progress) (*DriverReport, error) {
	dir, err := os.MkdirTemp("", "flotilla-bench-driver-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	addrs, err := freeport.Addrs(4)
	if err != nil {
		return nil, err
	}
	var listener *checkListener
	if cfg.Check != "" {
		if cfg.Check == "tcp" || cfg.Check == "http" {
			if listener, err = listenForChecks(cfg.Check == "http"); err != nil {
				return nil, err
			}
			defer listener.Close()
		}
		addr := ""
		if listener != nil {
			addr = listener.ln.Addr().String()
		}
		if cfg.UnitFile, err = checkUnit(cfg.Check, addr, cfg.CheckInterval); err != nil {
			return nil, err
		}
	}
	d := &benchDaemon{dataDir: filepath.Join(dir, "daemon"), api: addrs[0]}
	prog.phase("starting a daemon with --driver %s", cfg.Driver)
	d.proc, err = startProcess("daemon", cfg.Binary, []string{"daemon", "--name", "bench",
		"--etcd-embed", "--driver", cfg.Driver, "--log-level", "warn",
		"--api-addr", addrs[0], "--grpc-addr", addrs[1], "--etcd-client-addr", addrs[2], "--etcd-peer-addr", addrs[3],
		"--data-dir", d.dataDir, "--profile-dir", cfg.ProfileDir}, filepath.Join(dir, "daemon.log"))
	if err != nil {
		return nil, err
	}
	api, err := client.New("http://"+d.api, client.WithUserAgent("flotilla-bench"), client.WithTimeout(cfg.Timeout))
	if err != nil {
		d.proc.stop(15 * time.Second)
		return nil, err
	}
	names := make([]string, cfg.Units)
	width := len(strconv.Itoa(cfg.Units))
	for i := range names {
		names[i] = fmt.Sprintf("%s%0*d.service", unitPrefix, width, i+1)
	}
	defer d.shutdown(api, names, prog)

	if err := d.waitUp(ctx, api); err != nil {
		return nil, err
	}

	r := &DriverReport{Driver: cfg.Driver, Units: cfg.Units, HostCPUs: runtime.NumCPU()}
	change := func(state string) error {
		b := make([]apiv1.UnitChange, len(names))
		for i, n := range names {
			b[i] = apiv1.UnitChange{Name: n, DesiredState: state}
			if state == "launched" {
				b[i].File = cfg.UnitFile
			}
		}
		for i := 0; i < len(b); i += limits.BatchUnits {
			if _, err := api.Batch(ctx, apiv1.Batch{Units: b[i:min(i+limits.BatchUnits, len(b))]}); err != nil {
				return err
			}
		}
		return nil
	}

	prog.phase("starting %s units", thousands(int64(cfg.Units)))
	dcpu0, scpu0 := d.cpu()
	t0 := time.Now()
	if err := change("launched"); err != nil {
		return nil, fmt.Errorf("start request: %w", err)
	}
	seen, by, err := waitUnits(ctx, d, t0, cfg.Timeout, names, []string{"active", "failed"}, prog)
	if err != nil {
		return nil, err
	}
	dcpu1, scpu1 := d.cpu()
	r.Active, r.Failed = by["active"], by["failed"]
	failed := r.Failed
	r.StartSeconds = round3(lastAfter(seen, t0).Seconds())
	r.DaemonStartCPUSeconds = round3((dcpu1 - dcpu0).Seconds())
	r.SupervisorStartCPUSeconds = round3((scpu1 - scpu0).Seconds())
	if r.Active < cfg.Units {
		r.Error = fmt.Sprintf("%d of %d units active after %v (%d failed); see the daemon's log", r.Active, cfg.Units, cfg.Timeout, failed)
		return r, nil
	}

	if cfg.Hold > 0 {
		if r.Hold, err = d.hold(ctx, cfg, listener, prog); err != nil {
			return nil, err
		}
	}

	prog.phase("stopping %s units", thousands(int64(cfg.Units)))
	dcpu1, scpu1 = d.cpu()
	t1 := time.Now()
	if err := change("loaded"); err != nil {
		return nil, fmt.Errorf("stop request: %w", err)
	}
	seen, by, err = waitUnits(ctx, d, t1, cfg.Timeout, names, []string{"inactive", "failed"}, prog)
	if err != nil {
		return nil, err
	}
	dcpu2, scpu2 := d.cpu()
	r.Stopped, r.StopFailed = len(seen), by["failed"]
	r.StopSeconds = round3(lastAfter(seen, t1).Seconds())
	r.DaemonStopCPUSeconds = round3((dcpu2 - dcpu1).Seconds())
	r.SupervisorStopCPUSeconds = round3((scpu2 - scpu1).Seconds())
	if r.Stopped < cfg.Units {
		r.Error = fmt.Sprintf("%d of %d units stopped after %v", r.Stopped, cfg.Units, cfg.Timeout)
	}
	return r, nil
}

// lastAfter is how long after t0 the last of the times in seen is.
func lastAfter(seen map[string]time.Time, t0 time.Time) time.Duration {
	var last time.Duration
	for _, at := range seen {
		last = max(last, at.Sub(t0))
	}
	return last
}

// waitUnits waits until the leader sees every unit of names in one of the
// states done (active and failed for a start; inactive and failed for a
// stop), or timeout passes after t0. It returns when it saw each unit that
// reached one (observedAt) and how many are in each. It counts units
// through /v1/state (a count), reading the whole list of states once the
// counts say done.
func waitUnits(ctx context.Context, d *benchDaemon, t0 time.Time, timeout time.Duration, names []string, done []string, prog *progress) (map[string]time.Time, map[string]int, error) {
	hc := (*runTLS)(nil).httpClient(time.Minute)
	base := "http://" + d.api
	count := func(state string) (int, error) {
		return countActive(ctx, hc, base+"/v1/state?"+url.Values{"unit": {unitPrefix + "*"}, "state": {state}, "limit": {"1"}}.Encode())
	}
	for {
		start := time.Now()
		total, first := 0, 0
		var err error
		for i, state := range done {
			n, cerr := count(state)
			if cerr != nil {
				err = cerr
			}
			if i == 0 {
				first = n
			}
			total += n
		}
		timedOut := time.Since(t0) > timeout
		prog.status("%s/%s units %s after %.1f s", thousands(int64(first)), thousands(int64(len(names))), done[0], time.Since(t0).Seconds())
		if err == nil && total >= len(names) || timedOut {
			seen, by, err := statesSince(ctx, hc, base+"/v1/unit-states", names, done)
			if err != nil {
				return nil, nil, err
			}
			if len(seen) >= len(names) || timedOut {
				return seen, by, nil
			}
		}
		if err := d.proc.exited(); err != nil {
			return nil, nil, err
		}
		pause := min(max(4*time.Since(start), 20*time.Millisecond), time.Second)
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(pause):
		}
	}
}

// statesSince returns when the leader saw each unit of names that is in
// one of the states done, and how many units are in each.
func statesSince(ctx context.Context, hc *http.Client, u string, names []string, done []string) (map[string]time.Time, map[string]int, error) {
	var l struct {
		States []unitState `json:"states"`
	}
	if err := getJSON(ctx, hc, u, &l); err != nil {
		return nil, nil, err
	}
	ours := make(map[string]bool, len(names))
	for _, n := range names {
		ours[n] = true
	}
	seen := make(map[string]time.Time, len(names))
	by := make(map[string]int)
	for _, s := range l.States {
		if !ours[s.Name] || !slices.Contains(done, s.Active) {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, s.ObservedAt)
		if err != nil {
			return nil, nil, fmt.Errorf("GET %s: unit %s: observedAt %q: %w", u, s.Name, s.ObservedAt, err)
		}
		seen[s.Name] = at
		by[s.Active]++
	}
	return seen, by, nil
}

// waitUp waits until the daemon answers with its machine listed.
func (d *benchDaemon) waitUp(ctx context.Context, api *client.Client) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		ms, err := api.Machines(ctx)
		if err == nil && len(ms.Machines) > 0 {
			return nil
		}
		if err == nil {
			err = errors.New("no machine listed yet")
		}
		if perr := d.proc.exited(); perr != nil {
			return perr
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the daemon did not come up within 60s: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// shutdown destroys the units (and waits, briefly, until the daemon lists
// none), stops the daemon, then stops the supervisor it left running for
// its units, if any (SIGTERM: it stops what still runs; then SIGKILL).
func (d *benchDaemon) shutdown(api *client.Client, names []string, prog *progress) {
	prog.phase("destroying the units and stopping the daemon")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if d.proc.exited() == nil {
		for i := 0; i < len(names); i += limits.BatchUnits {
			if _, err := api.Batch(ctx, apiv1.Batch{Destroy: names[i:min(i+limits.BatchUnits, len(names))]}); err != nil {
				break
			}
		}
		hc := (*runTLS)(nil).httpClient(10 * time.Second)
		u := "http://" + d.api + "/v1/unit-states"
		for ctx.Err() == nil {
			var l struct {
				States []unitState `json:"states"`
			}
			if getJSON(ctx, hc, u, &l) != nil || len(l.States) == 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	sup := d.supervisorPID()
	d.proc.stop(30 * time.Second)
	if sup > 0 && syscall.Kill(sup, syscall.SIGTERM) == nil {
		for i := 0; i < 600 && processAlive(sup); i++ {
			time.Sleep(50 * time.Millisecond)
		}
		if processAlive(sup) {
			syscall.Kill(sup, syscall.SIGKILL)
		}
	}
}

// runBaseline times the plain loop of cfg.Baseline.
func runBaseline(ctx context.Context, cfg *DriverConfig, prog *progress) (*BaselineReport, error) {
	width := len(strconv.Itoa(cfg.Units))
	name := func(i int) string { return fmt.Sprintf("%s%0*d", unitPrefix, width, i+1) }
	if cfg.Baseline == "exec" {
		prog.phase("starting %s /bin/sleep infinity processes, one after another", thousands(int64(cfg.Units)))
		cmds := make([]*exec.Cmd, 0, cfg.Units)
		defer func() { // on an early return
			for _, c := range cmds {
				if c.ProcessState == nil {
					c.Process.Kill()
					c.Wait()
				}
			}
		}()
		t0 := time.Now()
		for range cfg.Units {
			c := exec.Command("/bin/sleep", "infinity")
			c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
			if err := c.Start(); err != nil {
				return nil, err
			}
			cmds = append(cmds, c)
		}
		started := time.Since(t0)
		prog.phase("stopping them (SIGTERM, then reaping each)")
		t1 := time.Now()
		for _, c := range cmds {
			c.Process.Signal(syscall.SIGTERM)
		}
		for _, c := range cmds {
			c.Wait()
		}
		return &BaselineReport{Kind: "exec", StartSeconds: round3(started.Seconds()), StopSeconds: round3(time.Since(t1).Seconds())}, nil
	}
	run := func(tmpl string, i int) error {
		argv := strings.Fields(strings.ReplaceAll(tmpl, "{}", name(i)))
		out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	prog.phase("running %q for %s units, one after another", cfg.BaselineStart, thousands(int64(cfg.Units)))
	started := 0
	defer func() { // on an early return, stop what was started
		for i := range started {
			run(cfg.BaselineStop, i)
		}
	}()
	t0 := time.Now()
	for i := range cfg.Units {
		if err := run(cfg.BaselineStart, i); err != nil {
			return nil, err
		}
		started++
	}
	startDur := time.Since(t0)
	prog.phase("running %q for each", cfg.BaselineStop)
	t1 := time.Now()
	for i := range cfg.Units {
		if err := run(cfg.BaselineStop, i); err != nil {
			return nil, err
		}
	}
	started = 0
	return &BaselineReport{Kind: cfg.BaselineStart, StartSeconds: round3(startDur.Seconds()), StopSeconds: round3(time.Since(t1).Seconds())}, nil
}
