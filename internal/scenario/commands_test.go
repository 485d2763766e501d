package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// args are a directive's arguments: words without "=" in order, and
// key=value pairs.
type args struct {
	pos []string
	kv  map[string]string
	// keys in order, for set-metadata
	keys []string
}

func parseArgs(d *datadriven.TestData) args {
	a := args{kv: map[string]string{}}
	for _, ca := range d.CmdArgs {
		if len(ca.Vals) == 0 {
			a.pos = append(a.pos, ca.Key)
			continue
		}
		a.kv[ca.Key] = strings.Join(ca.Vals, ",")
		a.keys = append(a.keys, ca.Key)
	}
	return a
}

// longRuns is whether to use each duration's long= variant (the issue's
// real-world timings, such as etcd down for 60 s).
var longRuns = os.Getenv("FLOTILLA_SCENARIO_LONG") != ""

// duration returns the first positional duration (or the long= one when
// FLOTILLA_SCENARIO_LONG is set), or def.
func (a args) duration(def time.Duration) (time.Duration, error) {
	if l := a.kv["long"]; longRuns && l != "" {
		return time.ParseDuration(l)
	}
	for _, p := range a.pos {
		if p != "" && p[0] >= '0' && p[0] <= '9' {
			return time.ParseDuration(p)
		}
	}
	return def, nil
}

func (a args) within(def time.Duration) (time.Duration, error) {
	if w := a.kv["within"]; w != "" {
		return time.ParseDuration(w)
	}
	return def, nil
}

// do runs one directive and returns its output.
func (s *scenario) do(t *testing.T, d *datadriven.TestData) string {
	a := parseArgs(d)
	s.tl.add("> %s", directiveLine(d))
	out, err := s.run(d.Cmd, a)
	if err != nil {
		d.Fatalf(t, "%s: %v", d.Cmd, err)
	}
	return out
}

func directiveLine(d *datadriven.TestData) string {
	parts := []string{d.Cmd}
	for _, a := range d.CmdArgs {
		parts = append(parts, a.String())
	}
	return strings.Join(parts, " ")
}

// run carries out one command. An error means the scenario could not go
// on (bad script, a process that would not start); what the system under
// test did wrong is output, starting with FAIL.
func (s *scenario) run(cmd string, a args) (string, error) {
	switch cmd {
	case "requires":
		return "", nil // judged before the scenario starts
	case "start-etcd":
		if err := s.startEtcd(); err != nil {
			return "", err
		}
		return "etcd up: its own process, in its own namespace", nil
	case "start-daemons":
		return s.cmdStartDaemons(a)
	case "start":
		return s.cmdStart(a)
	case "wait-active":
		return s.cmdWaitActive(a)
	case "wait-copies":
		return s.cmdWaitCopies(a)
	case "record-pids":
		return s.cmdRecordPIDs(a)
	case "replace":
		return s.cmdReplace(a)
	case "wait-deployment":
		return s.cmdWaitDeployment(a)
	case "mark-procs":
		return s.cmdMarkProcs(a)
	case "where":
		return s.cmdWhere(a)
	case "wait-leader":
		return s.cmdWaitLeader(a)
	case "freeze", "thaw", "kill", "stop", "restart", "start-daemon":
		return s.cmdProcess(cmd, a)
	case "etcd":
		return s.cmdEtcd(a)
	case "wait-etcd":
		w, err := a.within(90 * time.Second)
		if err != nil {
			return "", err
		}
		if err := waitfor.Poll(w, func() error {
			if s.isFrozen(s.etcd) {
				return errors.New("etcd is still frozen")
			}
			return nil
		}); err != nil {
			return "", err
		}
		if err := s.waitEtcd(30 * time.Second); err != nil {
			return "", err
		}
		return "etcd answers again", nil
	case "partition":
		return s.cmdPartition(a)
	case "wait-not-leader":
		return s.cmdWaitNotLeader(a)
	case "heal":
		ps, err := s.nodesArg(a)
		if err != nil {
			return "", err
		}
		for _, p := range ps {
			if err := s.heal(p); err != nil {
				return "", err
			}
		}
		return a.pos[0] + " healed", nil
	case "set-metadata":
		return s.cmdSetMetadata(a)
	case "drain":
		return s.cmdDrain(a)
	case "oversized-metadata":
		return s.cmdOversized(a)
	case "sleep":
		d, err := a.duration(0)
		if err != nil || d <= 0 {
			return "", fmt.Errorf("sleep wants a duration: %v", err)
		}
		time.Sleep(d) // the story's own pause: what follows says what it must
		return "", nil
	case "start-writer":
		w, err := startWriter(s)
		if err != nil {
			return "", err
		}
		s.writer = w
		return "writer started: it writes through every daemon in turn", nil
	case "check":
		if len(a.pos) == 0 {
			return "", errors.New("check what? at-most-one, no-restarts, lost-writes, reads, writes-refused, none-on, started, min-running")
		}
		return s.cmdCheck(a.pos[0], args{pos: a.pos[1:], kv: a.kv})
	}
	return "", fmt.Errorf("unknown command %q (see doc.go)", cmd)
}

// nodeWithin reads a directive's NODE and within= (def when not given).
func (s *scenario) nodeWithin(a args, def time.Duration) (*proc, time.Duration, error) {
	p, err := s.oneNode(a)
	if err != nil {
		return nil, 0, err
	}
	within, err := a.within(def)
	return p, within, err
}

func (s *scenario) oneNode(a args) (*proc, error) {
	if len(a.pos) == 0 {
		return nil, errors.New("which node?")
	}
	return s.node(a.pos[0])
}

// nodesArg reads a directive's NODE or nA..nB (nodeSet).
func (s *scenario) nodesArg(a args) ([]*proc, error) {
	if len(a.pos) == 0 {
		return nil, errors.New("which node?")
	}
	return s.nodeSet(a.pos[0])
}

func (s *scenario) cmdStartDaemons(a args) (string, error) {
	if len(a.pos) != 1 {
		return "", errors.New("start-daemons N [registry=grpc|etcd] [etcd=external|embedded] [metadata=k=v,...] [engines=K] [agent-ttl=D]")
	}
	n, err := strconv.Atoi(a.pos[0])
	if err != nil || n < 1 || n > maxNodes {
		return "", fmt.Errorf("start-daemons %s: want 1 to %d daemons", a.pos[0], maxNodes)
	}
	dc := daemonsConfig{n: n, registry: a.kv["registry"], metadata: a.kv["metadata"]}
	if dc.registry == "" {
		dc.registry = "grpc"
	}
	switch a.kv["etcd"] {
	case "", "external":
	case "embedded":
		dc.embedded = true
	default:
		return "", fmt.Errorf("etcd=%s: want external or embedded", a.kv["etcd"])
	}
	if v, ok := a.kv["engines"]; ok {
		if dc.engines, err = strconv.Atoi(v); err != nil || dc.engines < 1 || dc.engines > n {
			return "", fmt.Errorf("engines=%s: want 1 to %d", v, n)
		}
		if dc.embedded {
			return "", errors.New("engines= needs an external etcd: an embedded member runs beside an engine")
		}
	}
	if v, ok := a.kv["agent-ttl"]; ok {
		if _, err := time.ParseDuration(v); err != nil {
			return "", fmt.Errorf("agent-ttl=%s: %v", v, err)
		}
		dc.agentTTL = v
	}
	if err := s.startDaemons(dc); err != nil {
		return "", err
	}
	out := fmt.Sprintf("%d daemons up: registry %s, ", n, dc.registry)
	switch {
	case dc.embedded:
		out += "embedded etcd members"
	case dc.engines > 0 && dc.engines < n:
		out += fmt.Sprintf("external etcd; n1..n%d engine candidates, n1 leads", dc.engines)
	default:
		out += "external etcd; n1 leads"
	}
	if dc.agentTTL != "" {
		out += "; agent TTL " + dc.agentTTL
	}
	return out, nil
}

// maxNodes is the most daemons a scenario starts: node n has the address
// 10.77.X.n, below etcd's (etcdHost).
const maxNodes = 20

// freezeThaw freezes (for the directive's duration, if any) or thaws the
// nodes ps, named name in the script.
func (s *scenario) freezeThaw(cmd, name string, ps []*proc, a args) (string, error) {
	if cmd == "thaw" {
		for _, p := range ps {
			s.thaw(p)
		}
		return name + " thawed (SIGCONT)", nil
	}
	d, err := a.duration(0)
	if err != nil {
		return "", err
	}
	for _, p := range ps {
		if err := s.freeze(p, d); err != nil {
			return "", err
		}
	}
	which := name
	if len(ps) == 1 {
		which += " (" + ps[0].name + ")" // name may be an alias or "leader"
	}
	s.tl.faultAt(fmt.Sprintf("freeze %s %s", which, forHow(d)))
	return name + " frozen (SIGSTOP)", nil
}

// nodeSet returns the nodes spec names: one node, or nA..nB.
func (s *scenario) nodeSet(spec string) ([]*proc, error) {
	m := regexp.MustCompile(`^n(\d+)\.\.n(\d+)$`).FindStringSubmatch(spec)
	if m == nil {
		p, err := s.node(spec)
		if err != nil {
			return nil, err
		}
		return []*proc{p}, nil
	}
	from, _ := strconv.Atoi(m[1])
	to, _ := strconv.Atoi(m[2])
	if from > to {
		return nil, fmt.Errorf("%s: want nA..nB with A <= B", spec)
	}
	var ps []*proc
	for i := from; i <= to; i++ {
		p, err := s.node(fmt.Sprintf("n%d", i))
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// unitNames expands "web@1..9" to web@.service (the template) and
// web@1.service..web@9.service, and "slow" to slow.service.
func unitNames(spec string) (template string, names []string, err error) {
	if m := regexp.MustCompile(`^([a-z][a-z0-9-]*)@(\d+)\.\.(\d+)$`).FindStringSubmatch(spec); m != nil {
		from, _ := strconv.Atoi(m[2])
		to, _ := strconv.Atoi(m[3])
		if to < from {
			return "", nil, fmt.Errorf("%s: empty range", spec)
		}
		for i := from; i <= to; i++ {
			names = append(names, fmt.Sprintf("%s@%d.service", m[1], i))
		}
		return m[1] + "@.service", names, nil
	}
	if regexp.MustCompile(`^[a-z][a-z0-9-]*$`).MatchString(spec) {
		return "", []string{spec + ".service"}, nil
	}
	return "", nil, fmt.Errorf("unit names %q: want NAME or NAME@FROM..TO", spec)
}

// unitFile writes a scenario unit: a long sleep carrying the scenario's
// marker and its own name in its environment, so that its copies can be
// found in /proc.
func (s *scenario) unitFile(a args) (string, error) {
	var b strings.Builder
	b.WriteString("[Unit]\nDescription=scenario unit %n\n\n[Service]\nExecStart=/bin/sleep infinity\n")
	fmt.Fprintf(&b, "Environment=SCENARIO=%s SCENARIO_UNIT=%%n\n", s.marker)
	if v := a.kv["slow-stop"]; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return "", fmt.Errorf("slow-stop=%s: %w", v, err)
		}
		// The old copy runs on while ExecStop= takes its time.
		fmt.Fprintf(&b, "ExecStop=/bin/sleep %g\nTimeoutStopSec=%gs\n", d.Seconds(), 3*d.Seconds())
	}
	b.WriteString("\n[X-Fleet]\n")
	for _, p := range a.pos[1:] {
		switch p {
		case "singleton":
			b.WriteString("Singleton=true\n")
		case "global":
			b.WriteString("Global=true\n")
		case "auto-revert": // [X-Update]: updateSection
		default:
			return "", fmt.Errorf("start: unknown option %q (singleton, global, lost-after=, slow-stop=, meta=)", p)
		}
	}
	if v := a.kv["lost-after"]; v != "" {
		fmt.Fprintf(&b, "LostAfter=%s\n", v)
	}
	if v := a.kv["meta"]; v != "" {
		fmt.Fprintf(&b, "MachineMetadata=%s\n", v)
	}
	return b.String(), nil
}

func (s *scenario) cmdStart(a args) (string, error) {
	if len(a.pos) == 0 {
		return "", errors.New("start NAME|NAME@1..N [singleton] [global] [lost-after=D] [slow-stop=D] [meta=k=v]")
	}
	tmpl, names, err := unitNames(a.pos[0])
	if err != nil {
		return "", err
	}
	file, err := s.unitFile(a)
	if err != nil {
		return "", err
	}
	var b apiv1.Batch
	if tmpl != "" {
		s.templates[tmpl] = startedTemplate{file: file, update: updateSection(a)}
		b.Units = append(b.Units, apiv1.UnitChange{Name: tmpl, File: file + updateSection(a)})
	}
	for _, n := range names {
		ch := apiv1.UnitChange{Name: n, DesiredState: "launched"}
		if tmpl == "" {
			ch.File = file
		}
		b.Units = append(b.Units, ch)
	}
	err = s.ask(func(c *client.Client) error { _, err := c.Batch(context.Background(), b); return err })
	if err != nil {
		return "", fmt.Errorf("submitting %s: %w", a.pos[0], err)
	}
	singleton := false
	for _, p := range a.pos[1:] {
		singleton = singleton || p == "singleton"
	}
	for _, n := range names {
		s.units = append(s.units, n)
		s.singleton[n] = singleton
	}
	s.units = matchUnits(s.units, "")
	if len(names) == 1 {
		return "launched " + names[0], nil
	}
	return fmt.Sprintf("launched %d units: %s .. %s", len(names), names[0], names[len(names)-1]), nil
}

func (s *scenario) cmdWaitActive(a args) (string, error) {
	if len(a.pos) != 1 {
		return "", errors.New("wait-active N [glob=G] [within=D]")
	}
	want, err := strconv.Atoi(a.pos[0])
	if err != nil {
		return "", err
	}
	within, err := a.within(30 * time.Second)
	if err != nil {
		return "", err
	}
	names := s.launched(a.kv["glob"])
	var notActive []string
	start := time.Now()
	err = waitfor.Poll(within, func() error {
		var units []apiv1.Unit
		if err := s.ask(func(c *client.Client) error {
			l, err := c.Units(context.Background(), names...)
			if err == nil {
				units = l.Units
			}
			return err
		}); err != nil {
			notActive = []string{"(no answer: " + err.Error() + ")"}
			return err
		}
		notActive = notActive[:0]
		active := 0
		for _, u := range units {
			if u.State != nil && u.State.Active == "active" {
				active++
			} else {
				st := "no state"
				if u.State != nil {
					st = u.State.Active
				}
				notActive = append(notActive, fmt.Sprintf("%s (%s)", u.Name, st))
			}
		}
		if active < want {
			return fmt.Errorf("%d of %d active", active, want)
		}
		return nil
	})
	if err != nil {
		return fmt.Sprintf("FAIL: %v: %s", err, strings.Join(notActive, ", ")), nil
	}
	s.tl.add("%d units active, %.2fs after wait-active began", want, time.Since(start).Seconds())
	return units(want) + " active", nil
}

// copyProblems lists the units of names that do not run exactly one copy.
func copyProblems(names []string, copies map[string][]unitCopy) []string {
	var bad []string
	for _, n := range names {
		if c := len(copies[n]); c != 1 {
			bad = append(bad, fmt.Sprintf("%s (%d copies)", n, c))
		}
	}
	return bad
}

func (s *scenario) cmdWaitCopies(a args) (string, error) {
	within, err := a.within(10 * time.Second)
	if err != nil {
		return "", err
	}
	names := s.launched(a.kv["glob"])
	var bad []string
	start := time.Now()
	err = waitfor.Poll(within, func() error {
		bad = copyProblems(names, s.smp.now())
		if len(bad) > 0 {
			return fmt.Errorf("%d units", len(bad))
		}
		return nil
	})
	if err != nil {
		return fmt.Sprintf("FAIL: %v not running exactly one copy: %s", err, strings.Join(bad, ", ")), nil
	}
	s.tl.add("each unit runs one copy, %.2fs after wait-copies began", time.Since(start).Seconds())
	return fmt.Sprintf("one copy of each unit (%s)", units(len(names))), nil
}

func (s *scenario) cmdRecordPIDs(a args) (string, error) {
	names := s.launched(a.kv["glob"])
	var copies map[string][]unitCopy
	err := waitfor.Poll(15*time.Second, func() error {
		copies = s.smp.now()
		if bad := copyProblems(names, copies); len(bad) > 0 {
			return fmt.Errorf("%s", strings.Join(bad, ", "))
		}
		return nil
	})
	if err != nil {
		return "FAIL: cannot record PIDs: " + err.Error(), nil
	}
	s.pids = map[string]unitCopy{}
	for _, n := range names {
		s.pids[n] = copies[n][0]
		s.tl.add("recorded %s: pid %d on %s", n, copies[n][0].pid, copies[n][0].node)
	}
	return "recorded the PIDs of " + units(len(names)), nil
}

func (s *scenario) cmdWhere(a args) (string, error) {
	if len(a.pos) != 1 || a.kv["as"] == "" {
		return "", errors.New("where UNIT as=ALIAS")
	}
	unit := a.pos[0]
	var cs []unitCopy
	err := waitfor.Poll(10*time.Second, func() error {
		cs = s.smp.now()[unit]
		if len(cs) != 1 {
			return fmt.Errorf("%d copies of %s", len(cs), unit)
		}
		return nil
	})
	if err != nil {
		return "FAIL: " + err.Error(), nil
	}
	p, err := s.node(cs[0].node)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	s.aliases[a.kv["as"]] = p
	s.mu.Unlock()
	s.tl.add("%s runs on %s, called %s", unit, p.name, a.kv["as"])
	return fmt.Sprintf("%s runs on %s", unit, a.kv["as"]), nil
}

func (s *scenario) cmdWaitLeader(a args) (string, error) {
	within, err := a.within(30 * time.Second)
	if err != nil {
		return "", err
	}
	if len(s.nodes) == 0 {
		return "", errors.New("wait-leader: no daemons; start-daemons first")
	}
	var not *proc
	if a.kv["not"] != "" {
		if not, err = s.node(a.kv["not"]); err != nil {
			return "", err
		}
	}
	var l *proc
	start := time.Now()
	if err := waitfor.Poll(within, func() error {
		if l = s.leaderExcept(not); l == nil {
			return errors.New("no daemon leads")
		}
		return nil
	}); err != nil {
		return "FAIL: " + err.Error(), nil
	}
	s.tl.add("%s leads, %.2fs after wait-leader began", l.name, time.Since(start).Seconds())
	out := "a leader"
	if not != nil {
		out = "a leader other than " + a.kv["not"]
	}
	if as := a.kv["as"]; as != "" {
		s.mu.Lock()
		s.aliases[as] = l
		s.mu.Unlock()
		out += ", called " + as
	}
	return out, nil
}

func (s *scenario) cmdProcess(cmd string, a args) (string, error) {
	if cmd == "freeze" || cmd == "thaw" {
		ps, err := s.nodesArg(a)
		if err != nil {
			return "", err
		}
		return s.freezeThaw(cmd, a.pos[0], ps, a)
	}
	p, err := s.oneNode(a)
	if err != nil {
		return "", err
	}
	name := a.pos[0]
	switch cmd {
	case "kill":
		if err := p.signal(syscall.SIGKILL); err != nil {
			return "", err
		}
		p.wait(10 * time.Second)
		s.tl.faultAt(fmt.Sprintf("kill %s (%s)", name, p.name))
		return name + " killed (SIGKILL)", nil
	case "stop", "restart":
		if err := p.signal(syscall.SIGTERM); err != nil {
			return "", err
		}
		s.tl.faultAt(fmt.Sprintf("%s %s (%s)", cmd, name, p.name))
		if !p.wait(60 * time.Second) {
			p.signal(syscall.SIGKILL)
			p.wait(10 * time.Second)
			return fmt.Sprintf("FAIL: %s did not stop within 60s of SIGTERM (killed)", name), nil
		}
		s.tl.add("%s exited", p.name)
		if cmd == "stop" {
			return name + " stopped (SIGTERM)", nil
		}
		fallthrough
	case "start-daemon":
		if p.running() {
			return "", fmt.Errorf("%s is running", name)
		}
		if err := p.start(); err != nil {
			return "", err
		}
		if err := waitfor.Poll(60*time.Second, func() error {
			if !p.running() {
				return errors.New("exited")
			}
			_, err := p.client(2 * time.Second).Status(context.Background())
			return err
		}); err != nil {
			return fmt.Sprintf("FAIL: %s does not answer after starting again: %v", name, err), nil
		}
		if cmd == "restart" {
			return name + " restarted: SIGTERM, then started again on its data dir", nil
		}
		return name + " started again on its data dir", nil
	}
	return "", fmt.Errorf("unknown command %s", cmd)
}

func (s *scenario) cmdEtcd(a args) (string, error) {
	if s.etcd == nil {
		return "", errors.New("no external etcd: start-etcd first")
	}
	if len(a.pos) == 0 {
		return "", errors.New("etcd down [D] [long=D] | etcd up")
	}
	switch a.pos[0] {
	case "down":
		d, err := a.duration(0)
		if err != nil {
			return "", err
		}
		if err := s.freeze(s.etcd, d); err != nil {
			return "", err
		}
		s.tl.faultAt("etcd down (SIGSTOP) " + forHow(d))
		return "etcd frozen (SIGSTOP)", nil
	case "up":
		s.thaw(s.etcd)
		return "etcd thawed (SIGCONT)", nil
	}
	return "", fmt.Errorf("etcd %s: want down or up", a.pos[0])
}

func (s *scenario) cmdPartition(a args) (string, error) {
	ps, err := s.nodesArg(a)
	if err != nil {
		return "", err
	}
	d, err := a.duration(0)
	if err != nil {
		return "", err
	}
	what := ""
	for _, p := range ps {
		if what, err = s.partitionOne(p, a.pos[0], a.kv["from"], d); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("%s cut off from %s", a.pos[0], what), nil
}

// partitionOne cuts p (named name in the script) off from what from names
// (all, leader, etcd or a node), and returns what that is, in words.
func (s *scenario) partitionOne(p *proc, name, from string, d time.Duration) (string, error) {
	var ips []string
	all, peerOnly := false, false
	what := ""
	switch from {
	case "all":
		all, what = true, "everything"
	case "leader":
		l := s.leader()
		if l == nil {
			return "", errors.New("partition from=leader: no daemon leads")
		}
		if l == p {
			return "", fmt.Errorf("partition %s from=leader: %s is the leader; use from=etcd or from=all", name, p.name)
		}
		ips, what = []string{l.ip}, "the leader"
	case "etcd":
		what = "etcd"
		if s.embedded {
			peerOnly = true
			for _, o := range s.nodes {
				if o != p {
					ips = append(ips, o.ip)
				}
			}
			what = "the other etcd members"
		} else {
			ips = []string{s.etcd.ip}
		}
	default:
		o, err := s.node(from)
		if err != nil {
			return "", fmt.Errorf("partition from=%s: want leader, etcd, all or a node: %w", from, err)
		}
		ips, what = []string{o.ip}, from
	}
	if err := s.partition(p, ips, all, peerOnly, d); err != nil {
		return "", err
	}
	s.tl.faultAt(fmt.Sprintf("partition %s (%s) from %s %v %s", name, p.name, from, ips, forHow(d)))
	return what, nil
}

// cmdWaitNotLeader waits until NODE no longer answers as leader: its
// /v1/status says another daemon leads. A degraded leader whose partition
// ended must get there within a few seconds (issue 24).
func (s *scenario) cmdWaitNotLeader(a args) (string, error) {
	p, within, err := s.nodeWithin(a, 5*time.Second)
	if err != nil {
		return "", err
	}
	start := time.Now()
	err = waitfor.Poll(within, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		st, err := p.client(time.Second).Status(ctx)
		switch {
		case err != nil:
			return err
		case st.IsLeader:
			return fmt.Errorf("%s still answers as leader (election revision %d)", p.name, st.ElectionRev)
		case st.Leader == "" || st.Leader == p.name:
			return fmt.Errorf("%s names no other leader (%q)", p.name, st.Leader)
		}
		return nil
	})
	if err != nil {
		return "FAIL: " + err.Error(), nil
	}
	s.tl.add("%s stopped answering as leader %.2fs after wait-not-leader began", p.name, time.Since(start).Seconds())
	return a.pos[0] + " no longer leads; it names another leader", nil
}

func (s *scenario) cmdSetMetadata(a args) (string, error) {
	p, err := s.oneNode(a)
	if err != nil {
		return "", err
	}
	patch := apiv1.MachinePatch{Metadata: map[string]*string{}}
	var shown []string
	for _, k := range a.keys {
		v := a.kv[k]
		patch.Metadata[k] = &v
		shown = append(shown, k+"="+v)
	}
	if len(shown) == 0 {
		return "", errors.New("set-metadata NODE k=v...")
	}
	err = s.ask(func(c *client.Client) error {
		_, err := c.PatchMachine(context.Background(), p.name, patch)
		return err
	})
	if err != nil {
		return "FAIL: " + err.Error(), nil
	}
	s.tl.add("set-metadata %s %s", p.name, strings.Join(shown, " "))
	return fmt.Sprintf("%s: %s", a.pos[0], strings.Join(shown, " ")), nil
}

// cli runs the flotilla CLI against daemon p, as an operator would.
func cli(p *proc, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, flotillaBin, append([]string{"--endpoint", fmt.Sprintf("http://%s:%d", p.ip, apiPort)}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = daemonEnv()
	err := cmd.Run()
	return out.String(), err
}

func (s *scenario) cmdDrain(a args) (string, error) {
	p, err := s.oneNode(a)
	if err != nil {
		return "", err
	}
	live := s.live()
	if len(live) == 0 {
		return "", errors.New("no daemon answers")
	}
	s.tl.faultAt("drain " + p.name)
	// A drain may wait until the machine is empty; the scenario goes on
	// after two seconds, with the drain under way (faults during a drain).
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := cli(live[0], 5*time.Minute, "drain", p.name)
		s.tl.add("flotilla drain %s returned: %v %s", p.name, err, firstLine(out))
		done <- result{out, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return fmt.Sprintf("FAIL: flotilla drain %s: %v: %s", a.pos[0], r.err, firstLine(r.out)), nil
		}
	case <-time.After(2 * time.Second):
	}
	return "drain " + a.pos[0] + ": under way", nil
}

// cmdOversized sends PATCH /v1/machines/{node} with one metadata value of
// size= bytes, and says how it was answered and whether the leader's
// election revision stayed the same.
func (s *scenario) cmdOversized(a args) (string, error) {
	p, err := s.oneNode(a)
	if err != nil {
		return "", err
	}
	size, err := parseSize(a.kv["size"])
	if err != nil {
		return "", fmt.Errorf("size=%s: %w", a.kv["size"], err)
	}
	l := s.leader()
	if l == nil {
		return "", errors.New("no leader")
	}
	before, err := l.client(5 * time.Second).Status(context.Background())
	if err != nil {
		return "", err
	}
	big := strings.Repeat("x", size)
	_, err = l.client(30*time.Second).PatchMachine(context.Background(), p.name, apiv1.MachinePatch{Metadata: map[string]*string{"big": &big}})
	answer := "200"
	var ae *client.APIError
	switch {
	case errors.As(err, &ae):
		answer = fmt.Sprintf("%d %s", ae.Status, ae.Code)
		s.tl.add("oversized PATCH answered %d %s: %s", ae.Status, ae.Code, ae.Message)
	case err != nil:
		answer = "no answer"
		s.tl.add("oversized PATCH: %v", err)
	}
	// A term that ended shows within a few election TTLs: watched for
	// three, or until it shows; there is no event that proves a term lasts.
	ttl, err := time.ParseDuration(electionTTL)
	if err != nil {
		return "", fmt.Errorf("election TTL %q: %w", electionTTL, err)
	}
	var after *apiv1.Status
	status := func() error {
		nl := s.leader()
		if nl == nil {
			return errors.New("no leader")
		}
		st, err := nl.client(5 * time.Second).Status(context.Background())
		if err == nil {
			after = st
		}
		return err
	}
	ended := func() bool { return after.ElectionRev != before.ElectionRev || after.Leader != before.Leader }
	waitfor.Poll(3*ttl, func() error {
		if err := status(); err != nil {
			return err
		}
		if !ended() {
			return errors.New("the same term")
		}
		return nil
	})
	if after == nil || !ended() {
		if err := waitfor.Poll(30*time.Second, status); err != nil {
			return "", err
		}
	}
	rev := "unchanged"
	if ended() {
		rev = "changed: the term ended"
		s.tl.add("election revision %d (%s) became %d (%s)", before.ElectionRev, before.Leader, after.ElectionRev, after.Leader)
	}
	return fmt.Sprintf("PATCH with a %s value answered %s\nleader's election revision %s", a.kv["size"], answer, rev), nil
}

func parseSize(v string) (int, error) {
	mult := 1.0
	switch {
	case strings.HasSuffix(v, "MB"):
		mult, v = 1e6, strings.TrimSuffix(v, "MB")
	case strings.HasSuffix(v, "KB"):
		mult, v = 1e3, strings.TrimSuffix(v, "KB")
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 {
		return 0, errors.New("want a size such as 1.8MB")
	}
	return int(f * mult), nil
}

func (s *scenario) cmdCheck(what string, a args) (string, error) {
	switch what {
	case "started", "min-running":
		return s.checkSinceMark(what, a)
	case "at-most-one":
		names := s.launched(a.kv["glob"])
		var bad []string
		for _, n := range names {
			if f := s.smp.figures(n); f.max > 1 {
				bad = append(bad, fmt.Sprintf("%s (%d copies)", n, f.max))
			}
		}
		if len(bad) > 0 {
			return fmt.Sprintf("FAIL: %d of %s ran more than one copy at once: %s", len(bad), units(len(names)), strings.Join(bad, ", ")), nil
		}
		return fmt.Sprintf("never two copies of a unit at once (%s)", units(len(names))), nil
	case "no-restarts":
		var skip *proc
		if n := a.kv["not-on"]; n != "" {
			p, err := s.node(n)
			if err != nil {
				return "", err
			}
			skip = p
		}
		if s.pids == nil {
			return "", errors.New("check no-restarts: record-pids first")
		}
		copies := s.smp.now()
		var bad []string
		n := 0
		for _, u := range matchUnits(sortedKeys(s.pids), a.kv["glob"]) {
			rec := s.pids[u]
			if skip != nil && rec.node == skip.name {
				continue
			}
			n++
			switch cs := copies[u]; {
			case hasPID(cs, rec.pid):
			case len(cs) == 0:
				bad = append(bad, u+" (not running)")
			default:
				bad = append(bad, u+" (new PID)")
			}
		}
		scope := ""
		if g := a.kv["glob"]; g != "" {
			scope = " " + g
		}
		if skip != nil {
			scope += " not on " + a.kv["not-on"]
		}
		if len(bad) > 0 {
			return fmt.Sprintf("FAIL: %d of %d units%s restarted or stopped: %s", len(bad), n, scope, strings.Join(bad, ", ")), nil
		}
		return fmt.Sprintf("%s%s kept their PIDs", units(n), scope), nil
	case "none-on", "elsewhere":
		ps, err := s.nodesArg(a)
		if err != nil {
			return "", err
		}
		in := map[string]bool{}
		for _, p := range ps {
			in[p.name] = true
		}
		within, err := a.within(0)
		if err != nil {
			return "", err
		}
		names := s.launched(a.kv["glob"])
		var bad []string
		judge := func() error {
			bad = bad[:0]
			copies := s.smp.now()
			for _, u := range names {
				on, off := 0, 0
				for _, c := range copies[u] {
					if in[c.node] {
						on++
					} else {
						off++
					}
				}
				if what == "none-on" && on > 0 || what == "elsewhere" && off == 0 {
					bad = append(bad, u)
				}
			}
			if len(bad) > 0 {
				return fmt.Errorf("%d units", len(bad))
			}
			return nil
		}
		if judge() != nil && within > 0 {
			waitfor.Poll(within, judge) // what is still bad is the output
		}
		scope := units(len(names))
		if g := a.kv["glob"]; g != "" {
			scope += " " + g
		}
		switch {
		case what == "none-on" && len(bad) > 0:
			return fmt.Sprintf("FAIL: still running on %s: %s", a.pos[0], strings.Join(bad, ", ")), nil
		case what == "none-on" && a.kv["glob"] == "":
			return "no unit runs on " + a.pos[0], nil
		case what == "none-on":
			return fmt.Sprintf("none of %s runs on %s", scope, a.pos[0]), nil
		case len(bad) > 0:
			return fmt.Sprintf("FAIL: %d of %s run nowhere but %s: %s", len(bad), scope, a.pos[0], strings.Join(bad, ", ")), nil
		}
		return fmt.Sprintf("each of %s runs somewhere other than %s", scope, a.pos[0]), nil
	case "lost-writes":
		if s.writer == nil {
			return "", errors.New("check lost-writes: start-writer first")
		}
		return s.writer.check(), nil
	case "reads":
		gone := len(a.pos) > 0 && a.pos[0] == "etcd-gone"
		out := s.checkReads(gone)
		if gone {
			return out, s.etcdStillDown()
		}
		return out, nil
	case "fails-fast":
		p, within, err := s.nodeWithin(a, 2*time.Second)
		if err != nil {
			return "", err
		}
		return s.checkFailsFast(p, a.pos[0], within), nil
	case "writes-refused":
		if len(a.pos) != 1 || a.pos[0] != "etcd" {
			return "", errors.New("check writes-refused etcd")
		}
		out := s.checkWritesRefused()
		return out, s.etcdStillDown()
	}
	return "", fmt.Errorf("check %s: unknown check", what)
}

// checkReads asks every live daemon for list-units (the CLI) and
// /v1/state. With etcdGone, each answer must also say that etcd is
// unreachable (promise 4): the CLI's output and a header of /v1/state
// mention etcd.
func (s *scenario) checkReads(etcdGone bool) string {
	return s.eachLive(func(p *proc) string {
		var probs []string
		out, err := cli(p, 15*time.Second, "list-units", "--no-legend")
		if err != nil {
			probs = append(probs, fmt.Sprintf("list-units failed: %s", firstLine(out)))
		} else if etcdGone && !strings.Contains(strings.ToLower(out), "etcd") {
			probs = append(probs, "list-units does not say etcd is unreachable")
		}
		n, hdr, err := s.readState(p)
		// A read may get the state as it was and start a fresh one.
		if err == nil && n != len(s.units) {
			waitfor.Poll(5*time.Second, func() error {
				if n, hdr, err = s.readState(p); err == nil && n != len(s.units) {
					return errors.New("not every unit")
				}
				return nil
			})
		}
		switch {
		case err != nil:
			probs = append(probs, "/v1/state failed: "+err.Error())
		case n != len(s.units):
			probs = append(probs, fmt.Sprintf("/v1/state has %d of %d units", n, len(s.units)))
		case etcdGone && !hdr:
			probs = append(probs, "/v1/state has no header saying etcd is unreachable")
		}
		if len(probs) > 0 {
			return fmt.Sprintf("%s: FAIL: %s", p.name, strings.Join(probs, "; "))
		}
		line := fmt.Sprintf("%s: list-units answered; /v1/state has %d units", p.name, n)
		if etcdGone {
			line += "; both say etcd is unreachable"
		}
		return line
	})
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// readState reads /v1/state from p and returns how many of the scenario's
// units it holds, and whether a header other than the state source names
// etcd.
func (s *scenario) readState(p *proc) (int, bool, error) {
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get(fmt.Sprintf("http://%s:%d/v1/state", p.ip, apiPort))
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, false, fmt.Errorf("%s: %s", resp.Status, firstLine(string(body)))
	}
	var st apiv1.State
	if err := json.Unmarshal(body, &st); err != nil {
		return 0, false, err
	}
	n := 0
	mine := map[string]bool{}
	for _, u := range s.units {
		mine[u] = true
	}
	for _, u := range st.Units {
		if mine[u.Name] {
			n++
		}
	}
	hdr := false
	for k, vs := range resp.Header {
		if strings.EqualFold(k, "X-Flotilla-State-Source") {
			continue
		}
		if strings.Contains(strings.ToLower(k+strings.Join(vs, " ")), "etcd") {
			hdr = true
		}
	}
	return n, hdr, nil
}

// checkWritesRefused submits a new unit through every live daemon: each
// must answer 503 with an error naming etcd.
func (s *scenario) checkWritesRefused() string {
	return s.eachLive(func(p *proc) string {
		name := fmt.Sprintf("refused-%s.service", p.name)
		_, err := p.client(20*time.Second).PutUnit(context.Background(), apiv1.UnitChange{Name: name, File: writerFile, DesiredState: "inactive"})
		if err != nil {
			s.tl.add("write through %s refused: %v", p.name, err)
		}
		var ae *client.APIError
		switch {
		case err == nil:
			return fmt.Sprintf("%s: FAIL: the write was acknowledged", p.name)
		case !errors.As(err, &ae):
			return fmt.Sprintf("%s: FAIL: %v", p.name, err)
		case ae.Status != http.StatusServiceUnavailable || !strings.Contains(strings.ToLower(ae.Message), "etcd"):
			return fmt.Sprintf("%s: FAIL: %d %s: %s", p.name, ae.Status, ae.Code, ae.Message)
		}
		return fmt.Sprintf("%s: 503, naming etcd", p.name)
	})
}

// checkFailsFast asks NODE, cut off from the leader, for what it would
// forward (reads, then a write): each must be answered 503 naming the
// leader within within, not left to wait for the client's timeout.
func (s *scenario) checkFailsFast(p *proc, name string, within time.Duration) string {
	c := p.client(within + 3*time.Second)
	var worst time.Duration
	for i := range 4 {
		start := time.Now()
		var err error
		if i < 3 {
			_, err = c.Units(context.Background())
		} else {
			_, err = c.PutUnit(context.Background(), apiv1.UnitChange{Name: "fails-fast.service", File: writerFile, DesiredState: "inactive"})
		}
		took := time.Since(start)
		worst = max(worst, took)
		s.tl.add("request %d through %s answered after %.2fs: %v", i+1, p.name, took.Seconds(), err)
		var ae *client.APIError
		switch {
		case err == nil:
			return fmt.Sprintf("FAIL: %s answered request %d: it reaches the leader", name, i+1)
		case !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || !strings.Contains(ae.Message, "cannot reach the engine leader"):
			return fmt.Sprintf("FAIL: request %d through %s after %.2fs: %v", i+1, name, took.Seconds(), err)
		case took > within:
			return fmt.Sprintf("FAIL: request %d through %s answered 503 after %.2fs, want within %v", i+1, name, took.Seconds(), within)
		}
	}
	s.tl.add("the slowest request through %s took %.2fs", p.name, worst.Seconds())
	return fmt.Sprintf("%s answers 3 reads and a write with 503 naming the leader, each within %v", name, within)
}

// units says "1 unit" or "N units".
func units(n int) string {
	if n == 1 {
		return "1 unit"
	}
	return fmt.Sprintf("%d units", n)
}

// etcdStillDown is called after a check meant to run during an etcd
// outage: the outage must have lasted until the check's end.
func (s *scenario) etcdStillDown() error {
	if s.etcd == nil || !s.isFrozen(s.etcd) {
		return errors.New("etcd is not down (any more): the check must run between \"etcd down\" and \"etcd up\"")
	}
	return nil
}

// eachLive runs f for every live daemon at once and returns their lines
// in the daemons' order.
func (s *scenario) eachLive(f func(p *proc) string) string {
	live := s.live()
	lines := make([]string, len(live))
	var wg sync.WaitGroup
	for i, p := range live {
		wg.Add(1)
		go func() { defer wg.Done(); lines[i] = f(p) }()
	}
	wg.Wait()
	return strings.Join(lines, "\n")
}

// forHow says how long a fault lasts, for the timeline.
func forHow(d time.Duration) string {
	if d <= 0 {
		return "until undone"
	}
	return "for " + d.String()
}
