package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/systemdtest"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// mark is in the command line of every unit process the test starts, so
// that a container's process table shows which unit a process is.
const mark = "tour-mark-"

// tourUnits: simple services, which go to the exec driver (the first in
// the machines' driver list), among them a singleton, and a Type=forking
// service, which only the systemd driver runs. Every unit is given up for
// lost after 5 s, so that the faults below move them quickly.
func tourUnits() map[string]string {
	u := map[string]string{
		"hello.service": `[Service]
ExecStart=/bin/sh -c 'while :; do echo hello; sleep 1; done' ` + mark + `hello
[X-Fleet]
LostAfter=5s
`,
		"lock.service": `[Service]
ExecStart=/bin/sh -c 'while :; do sleep 1; done' ` + mark + `lock
[X-Fleet]
Singleton=true
LostAfter=5s
`,
		"forker.service": `[Service]
Type=forking
PIDFile=/run/forker.pid
ExecStart=/bin/sh -c "/bin/sh -c 'while :; do sleep 1; done' ` + mark + `forker & echo $! > /run/forker.pid"
[X-Fleet]
LostAfter=5s
`,
	}
	for i := 1; i <= 4; i++ {
		u[fmt.Sprintf("web%d.service", i)] = fmt.Sprintf(`[Service]
ExecStart=/bin/sh -c 'while :; do sleep 1; done' %sweb%d
[X-Fleet]
LostAfter=5s
`, mark, i)
	}
	return u
}

// TestCluster brings a three-machine cluster up in containers through Up,
// as make cluster does, and drives it from this host with the CLI: a tour
// (start units on the exec and systemd drivers, list-units, journal), then
// a partition of one machine and its healing, a reboot of one (docker
// restart), a kill of one (docker kill, then start), and a restart of the
// leader's flotilla.service. It judges from the containers' process
// tables: the singleton never runs on two machines at once, the units of a
// lost machine run elsewhere, every unit ends with exactly one copy, and a
// daemon's restart restarts no unit (same PIDs, same MainPID in systemd).
func TestCluster(t *testing.T) {
	systemdtest.EnsureImage(t)
	dir := t.TempDir()
	bin := systemdtest.BuildStatic(t, dir, "github.com/flotilla/flotilla/cmd/flotilla", "flotilla", false)
	name := fmt.Sprintf("flotilla-test-%d", os.Getpid())
	state := filepath.Join(dir, "state")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if t.Failed() {
			for i := 1; i <= 3; i++ {
				j, _ := docker(ctx, "exec", fmt.Sprintf("%s-n%d", name, i), "journalctl", "-u", "flotilla", "--no-pager", "-n", "40")
				t.Logf("n%d's flotilla journal ends:\n%s", i, j)
			}
		}
		if err := Down(ctx, name, state); err != nil {
			t.Errorf("Down: %v", err)
		}
	})
	// Everything below is bounded: each wait by its own timeout, the whole
	// by ctx.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	step := func(format string, a ...any) {
		t.Logf("%6.1fs "+format, append([]any{time.Since(start).Seconds()}, a...)...)
	}
	c, err := Up(ctx, Config{Name: name, N: 3, Dir: state, Binary: bin,
		UnitFile: "../../contrib/systemd/flotilla.service", Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	step("cluster up")
	x := &tour{t: t, ctx: ctx, c: c, seen: map[string]map[string]*life{}}

	// The tour.
	udir := filepath.Join(dir, "units")
	os.Mkdir(udir, 0o755)
	var files []string
	for n, text := range tourUnits() {
		p := filepath.Join(udir, n)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	sort.Strings(files)
	x.cli(nil, append([]string{"start"}, files...)...)
	x.waitOneCopy(nil, 60*time.Second)
	step("every unit runs once")
	rows := x.units(nil)
	where := map[string]string{}
	for _, r := range rows {
		where[r.Unit] = r.Machine
	}
	// Each on the driver it should be on: forker in the machine's systemd,
	// hello not (the exec driver's supervisor runs it).
	if out, _ := docker(ctx, "exec", x.node(where["forker.service"]).Container, "systemctl", "is-active", "forker.service"); strings.TrimSpace(out) != "active" {
		t.Errorf("forker.service is %q in systemd on %s, want active", strings.TrimSpace(out), where["forker.service"])
	}
	if out, _ := docker(ctx, "exec", x.node(where["hello.service"]).Container, "systemctl", "is-active", "hello.service"); strings.TrimSpace(out) == "active" {
		t.Errorf("hello.service is a systemd unit on %s, want it run by the exec driver", where["hello.service"])
	}
	if out := x.cli(nil, "list-units"); !strings.Contains(out, "hello.service") || !strings.Contains(out, "forker.service") {
		t.Errorf("list-units lacks the units:\n%s", out)
	}
	waitfor.Until(t, 20*time.Second, "the journal of hello.service", func() error {
		out, err := c.Flotilla(ctx, c.Env(), "journal", "--lines", "2", "hello.service")
		if err != nil || !strings.Contains(out, "hello") {
			return fmt.Errorf("journal hello.service = %q, %v; want its hello lines", out, err)
		}
		return nil
	})
	step("tour done: units on %v", where)

	// From here on, a sampler reads every container's process table.
	sctx, stopSampler := context.WithCancel(ctx)
	var sampling sync.WaitGroup
	sampling.Add(1)
	go func() { defer sampling.Done(); x.sample(sctx) }()
	defer func() {
		stopSampler()
		sampling.Wait()
		x.checkSingleton("lock.service")
	}()

	// A partition: the singleton's machine is cut off the network. Its
	// units run elsewhere (the singleton only once its copy there is
	// killed); when it is back, one copy of each is left.
	victim := x.node(where["lock.service"])
	var lost []string
	for u, m := range where {
		if m == victim.Name {
			lost = append(lost, u)
		}
	}
	leaderBefore := x.leader().Name
	if _, err := docker(ctx, "network", "disconnect", c.Name, victim.Container); err != nil {
		t.Fatal(err)
	}
	step("%s cut off, with %v (the leader was %s)", victim.Name, lost, leaderBefore)
	x.waitElsewhere(lost, victim.Name, []string{victim.Name}, 60*time.Second)
	step("%v run elsewhere", lost)
	if _, err := docker(ctx, "network", "connect", "--ip", victim.IP, c.Name, victim.Container); err != nil {
		t.Fatal(err)
	}
	x.waitOneCopy(nil, 60*time.Second)
	step("%s back: one copy of each unit", victim.Name)

	// A reboot: systemd starts flotilla.service again.
	reboot := c.Nodes[(x.index(victim.Name)+1)%len(c.Nodes)]
	if _, err := docker(ctx, "restart", "-t", "5", reboot.Container); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitService(ctx, reboot, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	x.waitOneCopy(nil, 60*time.Second)
	step("%s rebooted: flotilla.service active again, one copy of each unit", reboot.Name)

	// A kill: its units run elsewhere while it is gone; then it starts again.
	where = x.placement()
	killed := c.Nodes[(x.index(reboot.Name)+1)%len(c.Nodes)]
	lost = nil
	for u, m := range where {
		if m == killed.Name {
			lost = append(lost, u)
		}
	}
	leaderBefore = x.leader().Name
	if _, err := docker(ctx, "kill", killed.Container); err != nil {
		t.Fatal(err)
	}
	step("%s killed, with %v (the leader was %s)", killed.Name, lost, leaderBefore)
	x.waitElsewhere(lost, killed.Name, []string{killed.Name}, 60*time.Second)
	step("%v run elsewhere", lost)
	if _, err := docker(ctx, "start", killed.Container); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitService(ctx, killed, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	x.waitOneCopy(nil, 60*time.Second)
	step("%s started again: one copy of each unit", killed.Name)

	// The leader's daemon restarts: no unit restarts, anywhere.
	leader := x.leader()
	before := x.snapshot()
	if _, err := docker(ctx, "exec", leader.Container, "systemctl", "restart", "flotilla"); err != nil {
		t.Fatal(err)
	}
	step("restarted flotilla.service on the leader %s", leader.Name)
	waitfor.Until(t, 60*time.Second, "a leader and one copy of each unit", func() error {
		if _, err := x.tryLeader(); err != nil {
			return err
		}
		return x.oneCopy(nil)
	})
	if after := x.snapshot(); after != before {
		t.Errorf("unit processes after the leader's restart:\n%s\nwant the same as before:\n%s", after, before)
	}
	step("new leader %s; the same unit processes and MainPID", x.leader().Name)
}

type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// tour holds the cluster under test and what the sampler saw.
type tour struct {
	t   *testing.T
	ctx context.Context
	c   *Cluster

	mu sync.Mutex
	// seen: unit -> node/pid/start -> the process's life as sampled.
	seen map[string]map[string]*life
}

// life is a unit process: when it started and when it was last seen, in
// seconds since the host's boot (the containers share the host's kernel,
// so these compare across machines).
type life struct {
	node        string
	pid         int
	start, last float64
}

func (x *tour) node(name string) Node {
	x.t.Helper()
	for _, n := range x.c.Nodes {
		if n.Name == name {
			return n
		}
	}
	x.t.Fatalf("no machine %q in the cluster", name)
	return Node{}
}

func (x *tour) index(name string) int {
	for i, n := range x.c.Nodes {
		if n.Name == name {
			return i
		}
	}
	return 0
}

// env is the CLI's environment with the endpoints of the machines not in
// skip first, so that the CLI does not wait on a machine that is cut off.
func (x *tour) env(skip []string) []string {
	var first, last []string
	for _, n := range x.c.Nodes {
		if contains(skip, n.Name) {
			last = append(last, n.URL())
		} else {
			first = append(first, n.URL())
		}
	}
	env := x.c.Env()
	env[0] = "FLOTILLA_ENDPOINT=" + strings.Join(append(first, last...), ",")
	return env
}

func contains(l []string, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

// cli runs the CLI and fails the test if it fails.
func (x *tour) cli(skip []string, args ...string) string {
	x.t.Helper()
	out, err := x.c.Flotilla(x.ctx, x.env(skip), args...)
	if err != nil {
		x.t.Fatal(err)
	}
	return out
}

type unitRow struct{ Unit, Machine, Active, Sub string }

func (x *tour) tryUnits(skip []string) ([]unitRow, error) {
	out, err := x.c.Flotilla(x.ctx, x.env(skip), "list-units", "-o", "json")
	if err != nil {
		return nil, err
	}
	var rows []unitRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		return nil, fmt.Errorf("list-units -o json: %w: %s", err, out)
	}
	return rows, nil
}

func (x *tour) units(skip []string) []unitRow {
	x.t.Helper()
	rows, err := x.tryUnits(skip)
	if err != nil {
		x.t.Fatal(err)
	}
	return rows
}

// placement is where list-units says each unit is active.
func (x *tour) placement() map[string]string {
	x.t.Helper()
	m := map[string]string{}
	for _, r := range x.units(nil) {
		if r.Active == "active" {
			m[r.Unit] = r.Machine
		}
	}
	return m
}

type machineRow struct {
	Machine string
	Leader  bool
}

func (x *tour) tryLeader() (Node, error) {
	out, err := x.c.Flotilla(x.ctx, x.env(nil), "list-machines", "-o", "json")
	if err != nil {
		return Node{}, err
	}
	var rows []machineRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		return Node{}, fmt.Errorf("list-machines -o json: %w: %s", err, out)
	}
	if len(rows) != len(x.c.Nodes) {
		return Node{}, fmt.Errorf("list-machines shows %d machines, want %d: %s", len(rows), len(x.c.Nodes), out)
	}
	for _, r := range rows {
		if r.Leader {
			return x.node(r.Machine), nil
		}
	}
	return Node{}, fmt.Errorf("list-machines shows no leader: %s", out)
}

func (x *tour) leader() Node {
	x.t.Helper()
	var l Node
	waitfor.Until(x.t, 30*time.Second, "a leader", func() (err error) {
		l, err = x.tryLeader()
		return err
	})
	return l
}

type proc struct {
	unit  string
	pid   int
	start float64
}

// procs reads the unit processes (those with mark in their command line)
// of a machine's process table, and the host's uptime when it did.
func (x *tour) procs(ctx context.Context, n Node) (now float64, ps []proc, err error) {
	// The pattern is split in two so that this script's own command line
	// does not match it.
	script := `cat /proc/uptime; tck=$(getconf CLK_TCK); echo $tck
for p in /proc/[0-9]*; do
	c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null) || continue
	case "$c" in *"` + mark[:4] + `""` + mark[4:] + `"*) echo "$(cut -d' ' -f22 $p/stat 2>/dev/null) ${p#/proc/} $c";; esac
done`
	out, err := docker(ctx, "exec", n.Container, "sh", "-c", script)
	if err != nil {
		return 0, nil, err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 {
		return 0, nil, fmt.Errorf("process table of %s: %q", n.Name, out)
	}
	now, _ = strconv.ParseFloat(strings.Fields(lines[0])[0], 64)
	tck, _ := strconv.ParseFloat(strings.TrimSpace(lines[1]), 64)
	if tck == 0 {
		tck = 100
	}
	for _, l := range lines[2:] {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		ticks, _ := strconv.ParseFloat(f[0], 64)
		pid, _ := strconv.Atoi(f[1])
		for _, a := range f[2:] {
			if strings.HasPrefix(a, mark) {
				ps = append(ps, proc{unit: strings.TrimPrefix(a, mark) + ".service", pid: pid, start: ticks / tck})
			}
		}
	}
	return now, ps, nil
}

// sample reads every machine's process table over and over until ctx
// ends, and records each unit process's life.
func (x *tour) sample(ctx context.Context) {
	for ctx.Err() == nil {
		var wg sync.WaitGroup
		for _, n := range x.c.Nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				now, ps, err := x.procs(ctx, n)
				if err != nil {
					return // a container that is down has no unit processes
				}
				x.mu.Lock()
				defer x.mu.Unlock()
				for _, p := range ps {
					m := x.seen[p.unit]
					if m == nil {
						m = map[string]*life{}
						x.seen[p.unit] = m
					}
					k := fmt.Sprintf("%s/%d/%.2f", n.Name, p.pid, p.start)
					if m[k] == nil {
						m[k] = &life{node: n.Name, pid: p.pid, start: p.start}
					}
					m[k].last = now
				}
			}()
		}
		wg.Wait()
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// checkSingleton fails the test if two processes of unit lived on two
// machines at once: one started before the other was last seen alive.
func (x *tour) checkSingleton(unit string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	var ls []*life
	for _, l := range x.seen[unit] {
		ls = append(ls, l)
	}
	if len(ls) < 2 {
		x.t.Errorf("the sampler saw %d processes of %s, want it moved at least once", len(ls), unit)
	}
	for i, a := range ls {
		for _, b := range ls[i+1:] {
			if a.node != b.node && a.start <= b.last && b.start <= a.last {
				x.t.Errorf("%s ran on two machines at once: pid %d on %s (%.1fs to %.1fs after boot) and pid %d on %s (%.1fs to %.1fs)",
					unit, a.pid, a.node, a.start, a.last, b.pid, b.node, b.start, b.last)
			}
		}
	}
	x.t.Logf("%s: %d processes seen, never two at once", unit, len(ls))
}

// oneCopy says whether every tour unit has exactly one process, on the
// machine where list-units shows it active, and no machine but those in
// skip is missing from the answer.
func (x *tour) oneCopy(skip []string) error {
	rows, err := x.tryUnits(skip)
	if err != nil {
		return err
	}
	active := map[string][]string{}
	for _, r := range rows {
		if r.Active == "active" {
			active[r.Unit] = append(active[r.Unit], r.Machine)
		}
	}
	procs := map[string][]string{}
	for _, n := range x.c.Nodes {
		if contains(skip, n.Name) {
			continue
		}
		_, ps, err := x.procs(x.ctx, n)
		if err != nil {
			return err
		}
		for _, p := range ps {
			procs[p.unit] = append(procs[p.unit], n.Name)
		}
	}
	for u := range tourUnits() {
		if len(active[u]) != 1 || len(procs[u]) != 1 || active[u][0] != procs[u][0] {
			return fmt.Errorf("%s: active on %v by list-units, processes on %v; want one, on the same machine", u, active[u], procs[u])
		}
	}
	return nil
}

func (x *tour) waitOneCopy(skip []string, timeout time.Duration) {
	x.t.Helper()
	waitfor.Until(x.t, timeout, "one copy of each unit", func() error { return x.oneCopy(skip) })
}

// waitElsewhere waits until each unit of lost has a process on a machine
// other than gone, which list-units (asked of the others first) shows
// active there.
func (x *tour) waitElsewhere(lost []string, gone string, skip []string, timeout time.Duration) {
	x.t.Helper()
	waitfor.Until(x.t, timeout, "the lost units elsewhere", func() error {
		rows, err := x.tryUnits(skip)
		if err != nil {
			return err
		}
		for _, u := range lost {
			ok := false
			for _, r := range rows {
				if r.Unit == u && r.Machine != gone && r.Active == "active" {
					_, ps, err := x.procs(x.ctx, x.node(r.Machine))
					if err != nil {
						return err
					}
					for _, p := range ps {
						ok = ok || p.unit == u
					}
				}
			}
			if !ok {
				return fmt.Errorf("%s does not run elsewhere than %s yet (list-units: %v)", u, gone, rows)
			}
		}
		return nil
	})
}

// snapshot is every unit process (machine, unit, PID) and forker.service's
// MainPID in its machine's systemd, as text to compare.
func (x *tour) snapshot() string {
	x.t.Helper()
	var l []string
	for _, n := range x.c.Nodes {
		_, ps, err := x.procs(x.ctx, n)
		if err != nil {
			x.t.Fatal(err)
		}
		for _, p := range ps {
			l = append(l, fmt.Sprintf("%s %s pid %d", n.Name, p.unit, p.pid))
		}
		if out, _ := docker(x.ctx, "exec", n.Container, "systemctl", "show", "-P", "MainPID", "forker.service"); strings.TrimSpace(out) != "0" && strings.TrimSpace(out) != "" {
			l = append(l, fmt.Sprintf("%s forker.service MainPID %s", n.Name, strings.TrimSpace(out)))
		}
	}
	sort.Strings(l)
	return strings.Join(l, "\n")
}
