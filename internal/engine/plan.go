package engine

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/flotilla/flotilla/internal/unit"
)

// The reconcile pass is split as fleet's engine/reconciler.go and Nomad's
// scheduler reconciler are: planReconcile is a pure function of what the
// leader knows (a planInput, taken under the term's lock) and the time, to
// named buckets of actions (a reconcilePlan); term.reconcile (place.go)
// carries them out: it asks the scheduler where the units to place go,
// commits the outcome to etcd and tells the agents.
//
// The cut-off policy. A machine is reachable while its agent's stream is
// open and the agent has spoken within muteAfter (in the etcd registry mode:
// while its presence key exists). The units of an unreachable machine stay
// scheduled there until their LostAfter= has passed (default: the agent
// TTL; infinity: never), counted from when the machine was last heard, or
// from the term's start if later:
//
//   - an ordinary unit is then lost: it is placed elsewhere at once, while
//     the cut-off machine may still run its copy (availability first); when
//     the machine is back, its full set no longer lists the unit and the
//     extra copy is stopped;
//   - a Singleton=true unit is lost only once LostAfter= plus singleMargin
//     has passed since the leader last sent anything to the machine (or the
//     term started): the agent kills its copy LostAfter= after the last
//     word it had, which was sent no later than that (a leader stops
//     sending before its lease can lapse, and a new term starts after the
//     old lease is gone);
//   - global units are never lost: they run wherever they fit.
//
// A machine that left the cluster (its daemon stopped its units and said
// so: daemon --stop-units-on-exit, as fleetd did on shutdown) is not cut
// off but gone: its units, singletons included, are lost at once, and the
// machine is forgotten once none is scheduled to it.
//
// A unit moving off a machine (its constraints no longer hold there, the
// machine drains, or a unit that Replaces= it took its place) is a move:
// it is unscheduled and recorded durably (registry moves/<unit>), and is
// placed again only once the old machine reports it stopped, or the old
// machine is unreachable for longer than the unit's cut-off policy allows.
// A new leader loads the moves, so a change of leader never lets a moving
// unit run twice.
//
// A draining machine (flotilla drain) empties itself differently:
//
//   - a unit that fits on no other machine stays where it is, running,
//     with that reason (Stay);
//   - of the instances of one template, at most the machine's
//     MaxParallel are mid-move at once; the others wait their turn where
//     they are, running (Queued);
//   - a launched unit that is not Singleton= is handed over: placed on
//     another machine while its old copy keeps running (Handover), the old
//     copy stopped once the new one is active (HandoverStop), and the
//     handover forgotten once it has stopped (HandoverDone), so a drain
//     never takes a service to zero. The handover is recorded under
//     moves/<unit> too, the unit's record naming its new machine: a new
//     leader keeps the old copy until the new one is active as well;
//   - a Singleton= unit (or one only loaded) moves as above, stopped
//     first (Misfit).

// singleMargin is what a singleton unit waits beyond LostAfter= after the
// leader last spoke to its machine: the agent's error in timing that word
// (the quickest transit of a message), the supervisor's timer, and clock
// rates, with room to spare.
const singleMargin = 500 * time.Millisecond

// planInput is what a reconcile pass decides from.
type planInput struct {
	Now time.Time
	// TermStart is when the term began to serve (its load from etcd done);
	// Reconnect is how long after it the machines may take to reconnect
	// before a machine's silence counts against it (see reconnectGrace).
	TermStart time.Time
	Reconnect time.Duration
	// Wake is when the units of a machine left out of Machines' Units
	// (silent for less than any unit's LostAfter=) need looking at: the
	// plan's Recheck is no later.
	Wake time.Time
	// AgentTTL is the default LostAfter=; Grace is added to every ordinary
	// unit's (a heartbeat interval).
	AgentTTL, Grace time.Duration
	// Machines are every machine the leader knows (connected or not).
	Machines map[string]planMachine
	// Check are the units to check against the machine they run on (its
	// metadata or capacity changed, a peer moved, or the term's recheck).
	Check map[string]string
	// Fits reports whether a unit still fits the machine, and why not.
	Fits func(name, machine string) (bool, string)
	// Moves are the units moving off a machine (unit -> old machine).
	Moves map[string]string
	// Handovers are the units of draining machines started on another
	// machine, whose old copy runs until the new one is active.
	Handovers map[string]handover
	// Elsewhere reports whether a unit of a draining machine could be
	// placed on another machine now, and why not. Stayed are the units
	// that stayed last pass, with their reason: unless PlaceDirty
	// (something placement depends on changed since), they stay without
	// asking again (a machine of thousands of them asked at every pass).
	Elsewhere  func(name string) (bool, string)
	Stayed     map[string]string
	PlaceDirty bool
	// Active reports whether a reachable machine reports the unit active
	// (started, not only starting) and healthy.
	Active func(name, machine string) bool
	// Unit describes a unit named in Machines' Units, Check or Moves. A
	// function, not a map: at a million units started at once, a map
	// describing the backlog was a million entries the plan never read.
	Unit func(name string) planUnit
	// Running reports whether a reachable machine reports the unit running.
	Running func(name, machine string) bool
	// Reported reports whether a reachable machine's agent has reported
	// the unit at all this term, running or not: one it has not may be
	// starting there, its report still on the way.
	Reported func(name, machine string) bool
	// MovedAt is when each move of Moves began (for a move loaded from
	// etcd, when the term loaded it).
	MovedAt map[string]time.Time
	// Backlog are the wanted units without a machine to try to place
	// (empty when nothing placement depends on has changed).
	Backlog []string
	// Doubt is until when earlier passes doubted that the unreachable
	// machines are gone (doubt.go; zero: they did not), and DoubtFor how
	// long a doubt that begins now lasts.
	Doubt    time.Time
	DoubtFor time.Duration
}

// planMachine is what the plan knows of one machine.
type planMachine struct {
	Reachable bool
	// Left is set for a machine whose agent left the cluster after
	// stopping its units (it is not reachable).
	Left bool
	// Draining machines (flotilla drain) take no units and their units
	// move off, at most MaxParallel instances of one template at a time
	// (0: one).
	Draining    bool
	MaxParallel int
	// HeardAt is when its agent was last heard, SentAt when the leader
	// last sent it anything (zero: not this term).
	HeardAt, SentAt time.Time
	// Streams is set when its agent is heard through a stream, with
	// heartbeats (the grpc registry): its reports come in order, so being
	// heard from without a word of a unit says something of it.
	Streams bool
	// Units are the non-global units scheduled to it.
	Units []string
}

// planUnit is what the plan knows of one unit.
type planUnit struct {
	Wanted    bool
	Singleton bool
	// Launched is set for a unit wanted running (not only loaded).
	Launched bool
	// Machine is the machine it is scheduled to ("" none).
	Machine string
	// LostAfter is [X-Fleet] LostAfter= (0: the agent TTL; unit.Infinity:
	// never).
	LostAfter time.Duration
}

// reconcilePlan is what a pass does, by bucket. Every list is sorted.
type reconcilePlan struct {
	// Lost are units whose machine has been unreachable for longer than
	// their cut-off policy allows: they are placed elsewhere now.
	Lost []lostUnit
	// Misfit are units that no longer fit their reachable machine, or
	// whose machine drains: they move (stop there, then place).
	Misfit []misfitUnit
	// Waiting are moving units whose old copy may still run (unit ->
	// reason shown to users).
	Waiting map[string]string
	// Handover are units of draining machines to place elsewhere while
	// their copy there keeps running; one that cannot be placed stays.
	Handover []misfitUnit
	// HandoverStop are handovers whose new copy is active (or whose unit
	// no longer wants one there): their old copy is stopped now.
	// HandoverDone are those whose old copy is gone: they are forgotten.
	HandoverStop, HandoverDone []string
	// Stay are units of draining machines that fit on no other machine:
	// they keep running where they are (unit -> reason shown to users).
	Stay map[string]string
	// Queued are instances of draining machines that wait for others of
	// their template to move first (unit -> reason shown to users).
	Queued map[string]string
	// MoveDone are moves whose old copy is gone: they are forgotten and
	// the units placed.
	MoveDone []string
	// Place are the units to allocate now: lost, done moving, or from the
	// backlog.
	Place []string
	// Gone are machines to forget: unreachable for longer than the agent
	// TTL, with no unit scheduled.
	Gone []string
	// Recheck is the earliest time at which a unit of an unreachable
	// machine will be lost, if nothing else changes (zero: none).
	Recheck time.Time
	// Doubt is until when the leader doubts that its unreachable machines
	// are gone (doubt.go; zero: it does not): Silent of the Known machines
	// (those that have not left) are unreachable, and Held units that
	// would have been lost were not.
	Doubt               time.Time
	Silent, Known, Held int
}

type lostUnit struct {
	Name, Machine string
	// Unheard is how long the machine had not been heard.
	Unheard time.Duration
	// Left is set when the machine left the cluster, its units stopped.
	Left bool
}

// handover is a unit of a draining machine started on another machine
// while its copy on From runs on; Stopping once that copy is told to stop.
type handover struct {
	From     string
	Stopping bool
}

type misfitUnit struct {
	Name, Machine, Reason string
}

// lostAfter is a unit's LostAfter=, defaulted.
func (in *planInput) lostAfter(u planUnit) time.Duration {
	if u.LostAfter > 0 {
		return u.LostAfter
	}
	return in.AgentTTL
}

// lostAt returns when unit u, on machine m that is not reachable, may run
// elsewhere (its copy there is gone, or is allowed to be doubled): once
// the time is past it; ok is false if never.
func (in *planInput) lostAt(u planUnit, m planMachine) (at time.Time, ok bool) {
	after := in.lostAfter(u)
	if after == unit.Infinity {
		return time.Time{}, false
	}
	from := in.heardFrom(m)
	if u.Singleton {
		return latest(from, m.SentAt).Add(after + singleMargin), true
	}
	return from.Add(after + in.Grace), true
}

// isLost reports whether unit u, on machine m that is not reachable, may
// run elsewhere now, and how long m has been unheard. A unit not lost yet
// moves p.Recheck to when it will be.
func (in *planInput) isLost(u planUnit, m planMachine, p *reconcilePlan) (bool, time.Duration) {
	if m.Left {
		return true, in.Now.Sub(in.heardFrom(m))
	}
	at, ok := in.lostAt(u, m)
	if !ok {
		return false, 0
	}
	if !in.Now.After(at) {
		if p.Recheck.IsZero() || at.Before(p.Recheck) {
			p.Recheck = at
		}
		return false, 0
	}
	return true, in.Now.Sub(in.heardFrom(m))
}

// heardFrom is when machine m's silence starts to count: when it was last
// heard, but not before the term began to serve and the machines had
// their time to reconnect to it (a new leader cannot have heard anyone
// before that; the old leader's word stands until then).
func (in *planInput) heardFrom(m planMachine) time.Time {
	return latest(m.HeardAt, in.TermStart.Add(in.Reconnect))
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// attention is, sorted, the machines a pass goes through one by one: those
// unreachable or draining. A reachable machine's units are looked at only
// when something asks (Check). At 10,000 machines, sorting every machine's
// name at every pass was a tenth of the plan's allocations.
func (in *planInput) attention() []string {
	var ids []string
	for id, m := range in.Machines {
		if !m.Reachable || m.Draining {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// planReconcile decides a reconcile pass. It is pure: everything it reads
// is in the input.
func planReconcile(in planInput) reconcilePlan {
	p := reconcilePlan{Waiting: map[string]string{}, Stay: map[string]string{}, Queued: map[string]string{}, Recheck: in.Wake}
	moving := maps.Clone(in.Moves)
	if moving == nil {
		moving = map[string]string{}
	}
	place := map[string]bool{}
	inFlight := in.drainsInFlight()

	// Units on machines that are unreachable, or draining.
	for _, id := range in.attention() {
		m := in.Machines[id]
		for _, name := range slices.Sorted(slices.Values(m.Units)) {
			u := in.Unit(name)
			switch {
			case m.Draining && m.Reachable:
				in.drain(&p, name, u, id, m, inFlight, moving)
			case !m.Reachable:
				if lost, unheard := in.isLost(u, m, &p); lost {
					p.Lost = append(p.Lost, lostUnit{Name: name, Machine: id, Unheard: unheard, Left: m.Left})
					if u.Wanted {
						place[name] = true
					}
				}
			}
		}
		if !m.Reachable && len(m.Units) == 0 && (m.Left || in.Now.Sub(in.heardFrom(m)) > in.AgentTTL+in.Grace) {
			p.Gone = append(p.Gone, id)
		}
	}
	doubting := in.doubt(&p)
	if doubting {
		p.Lost = slices.DeleteFunc(p.Lost, func(l lostUnit) bool {
			if l.Left {
				return false
			}
			p.Held++
			delete(place, l.Name)
			return true
		})
	}
	// Units that no longer fit their machine.
	for _, name := range slices.Sorted(maps.Keys(in.Check)) {
		id := in.Check[name]
		if _, ok := moving[name]; ok {
			continue
		}
		if m, ok := in.Machines[id]; !ok || !m.Reachable || m.Draining {
			continue // a draining machine's units are the drain's
		}
		if ok, why := in.Fits(name, id); !ok {
			p.Misfit = append(p.Misfit, misfitUnit{Name: name, Machine: id, Reason: why})
			moving[name] = id
		}
	}
	// Moves: placed again once the old copy is gone.
	for _, name := range slices.Sorted(maps.Keys(moving)) {
		from := moving[name]
		u := in.Unit(name)
		m, known := in.Machines[from]
		var gone bool
		switch {
		case known && m.Reachable:
			gone = !in.Running(name, from) && in.settled(name, from, m)
		case known:
			gone, _ = in.isLost(u, m, &p)
			gone = gone && (!doubting || m.Left)
		default: // never heard this term: as unreachable since it began
			gone, _ = in.isLost(u, planMachine{}, &p)
		}
		if !gone {
			p.Waiting[name] = "stopping on " + from + " before it moves"
			continue
		}
		if _, ok := in.Moves[name]; ok {
			p.MoveDone = append(p.MoveDone, name)
		}
		if u.Wanted {
			place[name] = true
		}
	}
	for name := range p.Waiting {
		delete(place, name)
	}
	in.handoverSteps(&p)
	// The backlog's units have no machine, so none is lost or waits to
	// move, and place does not hold them: they join the list directly
	// rather than through a map of a million entries.
	p.Place = slices.AppendSeq(make([]string, 0, len(place)+len(in.Backlog)), maps.Keys(place))
	for _, name := range in.Backlog {
		if _, ok := moving[name]; !ok {
			p.Place = append(p.Place, name)
		}
	}
	slices.Sort(p.Place)
	p.Place = slices.Compact(p.Place)
	return p
}

// moveSettle is how long after a move began its old machine must have been
// heard from before a copy it never reported counts as gone: an agent
// batches its reports, and a unit it started just before the move may not
// have been reported yet.
const moveSettle = 250 * time.Millisecond

// settled reports whether a move's old copy on a reachable machine can be
// judged from that machine's reports: it has reported the unit this term,
// or it has been heard from since the move began (and moveSettle more)
// without reporting it. A move decided by this pass began now. Without
// this, a unit moved (its machine's metadata changed) before its machine
// had reported starting it was placed elsewhere at once, and ran on both.
func (in *planInput) settled(name, from string, m planMachine) bool {
	if in.Reported(name, from) || !m.Streams {
		return true // an agent of the etcd registry has no heartbeat to wait for
	}
	since, ok := in.MovedAt[name]
	if !ok {
		since = in.Now
	}
	return m.HeardAt.After(since.Add(moveSettle))
}

// handoverSteps says which handovers stop their old copy, and which are
// done. A handover's old copy stops once the new copy is active and
// healthy (its [X-Check] passes), or once
// the unit no longer wants one running (stopped, destroyed, or placed back
// on that machine); the handover is forgotten once that copy is gone. A
// unit whose new machine was lost keeps its old copy until it is placed
// and active again; so does one whose old machine is not heard this term
// (it may reconnect with that copy).
func (in *planInput) handoverSteps(p *reconcilePlan) {
	for _, name := range slices.Sorted(maps.Keys(in.Handovers)) {
		h, u := in.Handovers[name], in.Unit(name)
		m, known := in.Machines[h.From]
		if !h.Stopping && u.Launched && u.Machine != h.From && !m.Left && (u.Machine == "" || !in.Active(name, u.Machine)) {
			continue
		}
		switch {
		case !known || !m.Reachable || m.Left || u.Machine == h.From || !in.Running(name, h.From):
			p.HandoverDone = append(p.HandoverDone, name)
		case !h.Stopping:
			p.HandoverStop = append(p.HandoverStop, name)
		}
	}
}

// drainKey is a template's instances moving off one draining machine.
type drainKey struct{ machine, template string }

// drainsInFlight counts the instances of each template mid-move off each
// draining machine: stopping there, or started elsewhere and their copy
// there not stopped yet.
func (in *planInput) drainsInFlight() map[drainKey]int {
	n := map[drainKey]int{}
	count := func(name, from string) {
		if m := in.Machines[from]; m.Draining {
			if t := templateOf(name); t != "" {
				n[drainKey{from, t}]++
			}
		}
	}
	for name, from := range in.Moves {
		count(name, from)
	}
	for name, h := range in.Handovers {
		count(name, h.From)
	}
	return n
}

// drain decides unit name, u, on reachable draining machine id, m: it
// stays (it fits nowhere else), waits its turn (its template has
// MaxParallel instances mid-move off m), is handed over (started
// elsewhere before it stops here), or moves (stopped here first).
func (in *planInput) drain(p *reconcilePlan, name string, u planUnit, id string, m planMachine, inFlight map[drainKey]int, moving map[string]string) {
	draining := "machine " + id + " is draining"
	if u.Wanted {
		tmpl := templateOf(name)
		k := drainKey{id, tmpl}
		if limit := max(m.MaxParallel, 1); tmpl != "" && inFlight[k] >= limit {
			p.Queued[name] = fmt.Sprintf("%s; waiting for its turn (%d of %s moving at a time)", draining, limit, tmpl)
			return
		}
		if why, ok := in.Stayed[name]; ok && !in.PlaceDirty {
			p.Stay[name] = why
			return
		}
		if ok, why := in.Elsewhere(name); !ok {
			p.Stay[name] = stayReason(id, why)
			return
		}
		if tmpl != "" {
			inFlight[k]++
		}
		if u.Launched && !u.Singleton {
			p.Handover = append(p.Handover, misfitUnit{Name: name, Machine: id, Reason: draining})
			return
		}
	}
	p.Misfit = append(p.Misfit, misfitUnit{Name: name, Machine: id, Reason: draining})
	moving[name] = id
}

// templateOf is the template unit name is an instance of ("" none).
func templateOf(name string) string {
	if unit.IsInstance(name) {
		return unit.TemplateOf(name)
	}
	return ""
}

// stayReason is the reason shown for a unit that stays on draining machine
// id because it fits on no other machine, why.
func stayReason(id, why string) string {
	return "machine " + id + " is draining, and the unit fits nowhere else: " + why
}
