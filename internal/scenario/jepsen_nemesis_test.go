package scenario

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/waitfor"
)

// fault is one of the nemesis's faults, from its start to its end (the
// partition healed, the killed daemon started again, the paused one
// resumed), and what the history shows around it.
type fault struct {
	kind     string
	desc     string
	start    time.Duration
	end      time.Duration
	majority bool // a majority of daemons stays connected, running and resumed

	// Measured from the history, by measure, up to the next fault's start.
	resumeStart, resumeEnd time.Duration // to the first write acknowledged of those invoked after; -1: none
	gap, gapAt             time.Duration // the longest time without a write acknowledged, and its start
	tagged, info           int           // tagged answers and indeterminate ones
	lastTagged             time.Duration // the last tagged answer after end, -1 if none
}

func (f *fault) short() string {
	return fmt.Sprintf("%s (%s) at %.2fs..%.2fs", f.kind, f.desc, f.start.Seconds(), f.end.Seconds())
}

// measure fills in what the history shows from f's start to until, the
// next fault's start.
func (f *fault) measure(h *history, ops []*jop, until time.Duration) {
	f.resumeStart, f.resumeEnd, f.lastTagged = -1, -1, -1
	if at, ok := h.firstWriteAfter(f.start); ok {
		f.resumeStart = at - f.start
	}
	if at, ok := h.firstWriteAfter(f.end); ok {
		f.resumeEnd = at - f.end
	}
	acks := []time.Duration{f.start, until}
	for _, o := range ops {
		if o.write && o.status == opOK && o.ret > f.start && o.ret < until {
			acks = append(acks, o.ret)
		}
		if o.call < f.start || o.call > until {
			continue
		}
		if o.tagged {
			f.tagged++
			if o.call > f.end && o.ret-f.end > f.lastTagged {
				f.lastTagged = o.ret - f.end
			}
		}
		if o.status == opInfo {
			f.info++
		}
	}
	slices.Sort(acks)
	for i := 1; i < len(acks); i++ {
		if d := acks[i] - acks[i-1]; d > f.gap {
			f.gap, f.gapAt = d, acks[i-1]
		}
	}
}

func (f *fault) resumed() bool {
	ok := func(d time.Duration) bool { return d >= 0 && d <= jepsenResume }
	return ok(f.resumeStart) && ok(f.resumeEnd) && f.gap <= jepsenResume
}

func (f *fault) String() string {
	d := func(v time.Duration) string {
		if v < 0 {
			return "never"
		}
		return fmt.Sprintf("%.2fs", v.Seconds())
	}
	maj := "majority connected"
	if !f.majority {
		maj = "no majority connected"
	}
	s := fmt.Sprintf("%-22s %-42s at %6.2fs for %5.2fs (%s): a write acknowledged %s after the start, %s after the end, none for %s from %.2fs; %d tagged, %d indeterminate",
		f.kind, f.desc, f.start.Seconds(), (f.end - f.start).Seconds(), maj, d(f.resumeStart), d(f.resumeEnd),
		d(f.gap), f.gapAt.Seconds(), f.tagged, f.info)
	if f.lastTagged >= 0 {
		s += fmt.Sprintf("; tagged answers until %s after the end", d(f.lastTagged))
	}
	return s
}

// nemesis injects the faults, one at a time: a fault for a while, then
// quiet until a write was acknowledged again (or jepsenResume and a bit
// passed), and the next. Every fault it makes it undoes before it returns,
// and the scenario's cleanup removes the namespaces, with their iptables
// rules, whatever happens.
type nemesis struct {
	s      *scenario
	h      *history
	rng    *rand.Rand
	faults []*fault
}

func (n *nemesis) run(t *testing.T, cfg jepsenConfig) {
	n.sleep(3 * time.Second)
	begin := n.h.now()
	for round := 0; ; round++ {
		for _, i := range n.rng.Perm(len(cfg.nemeses)) {
			if cfg.duration > 0 && n.h.now()-begin >= cfg.duration {
				return
			}
			// Faults of 5 to 9s (up to 20s in long runs), so that a
			// new leader is elected during most.
			d := 5*time.Second + time.Duration(n.rng.Int63n(int64(4*time.Second)))
			if cfg.duration > 0 {
				d = 5*time.Second + time.Duration(n.rng.Int63n(int64(15*time.Second)))
			}
			if err := n.fault(cfg.nemeses[i], d); err != nil {
				t.Fatalf("nemesis %s: %v", cfg.nemeses[i], err)
			}
		}
		if cfg.duration == 0 {
			return
		}
	}
}

// sleep is the nemesis's schedule (how long a fault lasts, the quiet
// after it): the checker judges the history it makes, not these times.
func (n *nemesis) sleep(d time.Duration) { time.Sleep(d) }

// fault injects one fault for d, undoes it, and waits for quiet.
func (n *nemesis) fault(kind string, d time.Duration) error {
	f := &fault{kind: kind, majority: true}
	undo, err := n.inject(f)
	if err != nil {
		return err
	}
	f.start = n.h.event("start %s: %s", kind, f.desc)
	n.s.tl.faultAt(kind + ": " + f.desc)
	n.faults = append(n.faults, f)
	n.sleep(d)
	if err := undo(); err != nil {
		return fmt.Errorf("undoing %s: %w", f.desc, err)
	}
	f.end = n.h.event("end %s", kind)
	n.s.tl.add("end of %s", kind)
	// Quiet: at least 3 to 5s, and until a write invoked after the end was
	// acknowledged, or jepsenResume and 3s passed.
	quiet := 3*time.Second + time.Duration(n.rng.Int63n(int64(2*time.Second)))
	for {
		since := n.h.now() - f.end
		if _, ok := n.h.firstWriteAfter(f.end); ok && since >= quiet || since > jepsenResume+3*time.Second {
			return nil
		}
		n.sleep(100 * time.Millisecond)
	}
}

// inject starts the fault of f's kind, describes it in f, and returns how
// to undo it. The partitions are Jepsen's grudges: each node drops what it
// receives from the nodes it holds a grudge against (iptables INPUT rules
// in its namespace); a complete grudge is both ways.
func (n *nemesis) inject(f *fault) (undo func() error, err error) {
	nodes := n.s.nodes
	healAll := func() error {
		var errs []error
		for _, p := range nodes {
			errs = append(errs, n.s.heal(p))
		}
		return errors.Join(errs...)
	}
	switch f.kind {
	case "partition-leader", "partition-random", "partition-leader-etcd":
		p, note := nodes[n.rng.Intn(len(nodes))], ""
		if f.kind != "partition-random" {
			p, note = n.leaderOrAny(p)
		}
		others := without(nodes, p)
		peerOnly := f.kind == "partition-leader-etcd"
		f.desc = fmt.Sprintf("%s cut off from %s", p.name, names(others))
		if peerOnly {
			f.desc = fmt.Sprintf("%s's etcd peer traffic with %s cut", p.name, names(others))
		}
		f.desc += note
		return healAll, n.completeGrudge([]*proc{p}, others, peerOnly)
	case "partition-ring":
		// Jepsen's majorities ring: in a random ring, each node sees the
		// majority starting at itself and drops what comes from the rest.
		// With 3 nodes each drops one neighbour, one way: a->b, b->c and
		// c->a are cut, so over TCP no two daemons talk well.
		order := n.shuffled(nodes)
		m := len(nodes)/2 + 1
		var descs []string
		for i, p := range order {
			maj := map[*proc]bool{}
			for j := range m {
				maj[order[(i+j)%len(order)]] = true
			}
			var drop []*proc
			for _, o := range nodes {
				if !maj[o] {
					drop = append(drop, o)
				}
			}
			if err := n.dropFrom(p, drop, false); err != nil {
				healAll()
				return nil, err
			}
			descs = append(descs, fmt.Sprintf("%s drops %s", p.name, names(drop)))
		}
		f.desc, f.majority = strings.Join(descs, ", "), false
		return healAll, nil
	case "partition-bridge":
		// Two sides and a node in both (Jepsen's bridge): with 3 nodes the
		// two ends are cut from each other, the middle sees both.
		order := n.shuffled(nodes)
		h := len(order) / 2
		a, b := order[:h], order[h+1:]
		f.desc = fmt.Sprintf("%s and %s cut, %s bridges", names(a), names(b), order[h].name)
		return healAll, n.completeGrudge(a, b, false)
	case "kill", "pause":
		p, who := nodes[n.rng.Intn(len(nodes))], "random"
		if n.rng.Intn(2) == 0 {
			if l, claim := n.leader(); l != nil {
				p, who = l, "leader"+claim
			}
		}
		if f.kind == "kill" {
			f.desc = fmt.Sprintf("%s (%s) SIGKILLed, then started again", p.name, who)
			if err := p.signal(syscall.SIGKILL); err != nil {
				return nil, err
			}
			p.wait(10 * time.Second)
			return func() error { return restart(p) }, nil
		}
		f.desc = fmt.Sprintf("%s (%s) SIGSTOPped, then SIGCONTinued", p.name, who)
		if err := n.s.freeze(p, 0); err != nil {
			return nil, err
		}
		return func() error { n.s.thaw(p); return nil }, nil
	}
	return nil, fmt.Errorf("unknown nemesis %q", f.kind)
}

// restart starts a killed daemon again on its data dir and waits until it
// answers.
func restart(p *proc) error {
	if err := p.start(); err != nil {
		return err
	}
	return waitfor.Poll(60*time.Second, func() error {
		if !p.running() {
			return errors.New("exited")
		}
		_, err := p.client(2 * time.Second).Status(context.Background())
		return err
	})
}

// completeGrudge cuts every node of a from every node of b, both ways.
func (n *nemesis) completeGrudge(a, b []*proc, peerOnly bool) error {
	for _, p := range a {
		if err := n.dropFrom(p, b, peerOnly); err != nil {
			return err
		}
	}
	for _, p := range b {
		if err := n.dropFrom(p, a, peerOnly); err != nil {
			return err
		}
	}
	return nil
}

// dropFrom makes p drop what it receives from srcs (only their etcd peer
// traffic with peerOnly: to and from port 2380). The test's own traffic,
// from the root namespace, passes.
func (n *nemesis) dropFrom(p *proc, srcs []*proc, peerOnly bool) error {
	for _, src := range srcs {
		rules := [][]string{{"-s", src.ip}}
		if peerOnly {
			port := fmt.Sprint(peerPort)
			rules = [][]string{{"-s", src.ip, "-p", "tcp", "--dport", port}, {"-s", src.ip, "-p", "tcp", "--sport", port}}
		}
		for _, r := range rules {
			if err := inNS(p.ns, append(append([]string{"iptables", "-A", "INPUT"}, r...), "-j", "DROP")...); err != nil {
				return err
			}
		}
	}
	return nil
}

// leader returns the daemon leading the newest term: of those that say
// they lead (a deposed one may still say so), the one with the highest
// election revision; nil when none says so. claim describes more than one
// claimant.
func (n *nemesis) leader() (l *proc, claim string) {
	var rev int64
	var claims []string
	for _, p := range n.s.live() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := p.client(2 * time.Second).Status(ctx)
		cancel()
		if err != nil || !st.IsLeader {
			continue
		}
		claims = append(claims, fmt.Sprintf("%s at revision %d", p.name, st.ElectionRev))
		if l == nil || st.ElectionRev > rev {
			l, rev = p, st.ElectionRev
		}
	}
	if len(claims) > 1 {
		claim = fmt.Sprintf(" (%s say they lead)", strings.Join(claims, " and "))
	}
	return l, claim
}

// leaderOrAny returns the leader, or other with a note when no daemon says
// it leads.
func (n *nemesis) leaderOrAny(other *proc) (*proc, string) {
	if l, claim := n.leader(); l != nil {
		return l, claim
	}
	return other, " (no leader found)"
}

func (n *nemesis) shuffled(ps []*proc) []*proc {
	out := make([]*proc, len(ps))
	for i, j := range n.rng.Perm(len(ps)) {
		out[i] = ps[j]
	}
	return out
}

func without(ps []*proc, p *proc) []*proc {
	var out []*proc
	for _, o := range ps {
		if o != p {
			out = append(out, o)
		}
	}
	return out
}

func names(ps []*proc) string {
	var ns []string
	for _, p := range ps {
		ns = append(ns, p.name)
	}
	return strings.Join(ns, ",")
}
