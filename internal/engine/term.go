package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/election"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/scheduler"
	"github.com/flotilla/flotilla/internal/state"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// unitRec is a unit as the leader holds it. A unitRec is never modified in
// place once published in term.units: changes replace it, so that the
// goroutines holding one (a stream's sender, a commit in flight) see it
// whole.
//
// A million of them are among the leader's largest memory: 80 bytes each
// (a size class of Go's allocator): the name is su's, the
// desired state a byte, and the two times a unit waits for (placed, then
// active) one field.
type unitRec struct {
	// file may be shared by every instance of a template without
	// specifiers (unit.Shareable), and then file.Name is another
	// instance's: the unit's name is su.Name.
	file    *unit.File
	content string          // the file's key under files/ (templates and instances), "" when stored inline
	machine string          // target machine, "" when unscheduled
	reason  string          // why a wanted unit is unscheduled
	su      *scheduler.Unit // never nil; su.Name is the unit's name
	// at times the unit's way to active (metrics): when it became wanted
	// (atPlaced false) or was placed (atPlaced true), in Unix nanoseconds,
	// 0 once observed active (or never set). Not time.Time: 16 bytes less.
	at       int64
	atPlaced bool
	want     wantCode
	// slot is the unit's place in its machine's list (machineRec.units),
	// kept by setUnitFrom; set in place by the loop (nothing else reads
	// it), and only meaningful in the record t.units holds.
	slot int32
}

// name is the unit's name.
func (u *unitRec) name() string { return u.su.Name }

func (u *unitRec) desired() unit.DesiredState { return u.want.state() }

func (u *unitRec) setDesired(ds unit.DesiredState) { u.want = wantOf(ds) }

func (u *unitRec) wanted() bool { return u.want != wantInactive }

// wantCode is a desired state in a byte.
type wantCode uint8

const (
	wantInactive wantCode = iota
	wantLoaded
	wantLaunched
)

// wantOf returns ds's code. Desired states are parsed where they come in
// (the API, etcd's records): another value here is a bug.
func wantOf(ds unit.DesiredState) wantCode {
	switch ds {
	case unit.Inactive:
		return wantInactive
	case unit.Loaded:
		return wantLoaded
	case unit.Launched:
		return wantLaunched
	}
	panic(fmt.Sprintf("engine: desired state %q", ds))
}

func (w wantCode) state() unit.DesiredState {
	return [...]unit.DesiredState{unit.Inactive, unit.Loaded, unit.Launched}[w]
}

func (u *unitRec) with(f func(*unitRec)) *unitRec {
	c := *u
	f(&c)
	return &c
}

// agentStatus is a unit's status as an agent reported it.
type agentStatus struct {
	unit.Status
	Applied string
	// Observed is when the leader learnt the current Active state.
	Observed time.Time
}

// observe records a unit's status reported by machine m at now. It runs
// on the loop.
func (t *term) observe(m *machineRec, s agentStatus, now time.Time) {
	t.changed()
	// The unit's record is looked up once: each lookup by name in a map of
	// a million units is a cache miss or two, and a report of each unit's
	// state came with five.
	r := t.units[s.Name]
	if r != nil {
		s.Name = r.name() // one copy of each name
	}
	s.Machine = m.info.ID
	e := listedRec(m, r) // its entry in m's list, if scheduled there
	var prev agentStatus
	st, ok := stateAt(m, e, s.Name)
	if ok {
		prev = st.status(m.info.ID, s.Name)
	}
	if ok && prev.Active == s.Active {
		s.Observed = prev.Observed
	} else {
		s.Observed = now
	}
	putStateAt(m, e, s)
	t.drained(m.info.ID, s.Name, s.Running())
	if _, ok := t.moves.handovers[s.Name]; ok && s.Active == "active" {
		t.poke() // a handover's new copy may be active: its old copy stops
	}
	if s.Active == "active" && (!ok || prev.Active != "active") {
		if r != nil && r.at != 0 && r.atPlaced && r.machine == m.info.ID {
			t.e.cfg.Metrics.SchedulingLatency.WithLabelValues("active").Observe(now.Sub(unixNano(r.at)).Seconds())
			r.at = 0 // a timing field only the loop reads: safe to clear in place
		}
	}
	if !ok || prev.Load != s.Load || prev.Active != s.Active || prev.Sub != s.Sub || prev.Health != s.Health {
		t.stateEvent(m.info.ID, s, false)
	}
	if s.Health == "unhealthy" && (!ok || prev.Health != s.Health) {
		what := "unhealthy on " + m.info.ID
		if r != nil && r.file != nil && r.file.Check != nil && r.file.Check.OnUnhealthy == "restart" {
			what += "; restarted there (OnUnhealthy=restart)"
		}
		t.history(s.Name, what)
	}
}

// MachineInfo is what a machine says about itself in its Hello.
type MachineInfo struct {
	ID       string
	IP       string
	Metadata map[string]string
	APIAddr  string
	// Version is the daemon's release and short commit (0.2.0+abc1234),
	// Protocol the agent protocol it speaks (1 when it did not say).
	Version  string
	Protocol int
	// Capacity: CPU percent and memory bytes offered to units (0: not limited).
	CPUPercent  int64
	MemoryBytes int64
	// Drivers are the drivers the machine runs units with (none: exec).
	Drivers unit.DriverSet `json:",omitempty"`
	// Instance identifies the daemon's data dir ("" from older daemons):
	// a Hello for a live machine with another instance is refused.
	Instance string
}

type machineRec struct {
	info MachineInfo
	conn *agentConn // nil while disconnected
	// lastSeen is when the machine's agent was last heard and lastSent when
	// the leader last sent it anything, as of its last stream (the open
	// stream keeps its own: see heardAt and sentAt).
	lastSeen time.Time
	lastSent time.Time
	// others are the states the machine's agent reported of units not in
	// units (a unit moving away, a global one, one the leader does not
	// know); a scheduled unit's is in its entry (term.stateOf).
	others unitStates
	// pubShared is the last state.Shared a build of the published state
	// gave a unit here (sharedViews.sharedOn); only builds touch it.
	pubShared *state.Shared
	units     unitList            // units scheduled here (not global), with their states here
	globals   map[string]struct{} // global units assigned here
	needFull  bool                // a new stream awaits its full desired set
	used      scheduler.Resources // what placed units need here (after the last pass)
	// left is set when the machine's agent left the cluster (daemon
	// --stop-units-on-exit): its units, already stopped, are placed
	// elsewhere at once, and the machine is forgotten. A new stream from it
	// clears it.
	left bool
}

// heardAt is when the machine's agent was last heard.
func (m *machineRec) heardAt() time.Time {
	if m.conn != nil {
		return latest(m.lastSeen, m.conn.heard())
	}
	return m.lastSeen
}

// sentAt is when the leader last sent the machine's agent anything.
func (m *machineRec) sentAt() time.Time {
	if m.conn != nil {
		return latest(m.lastSent, m.conn.sent())
	}
	return m.lastSent
}

// reachable reports whether the machine's agent can be told anything: its
// stream is open and it has spoken within muteAfter (in the etcd registry
// mode: its presence key exists). It runs on the loop.
func (t *term) reachable(m *machineRec, now time.Time) bool {
	if m.conn == nil {
		return false
	}
	return t.e.cfg.Registry == registry.ModeEtcd || now.Sub(m.heardAt()) <= t.muteAfterFor(m.conn)
}

// decisionState is a term's decision state: the durable record as the leader
// holds it (units, machines, placements, moves, files, versions,
// deployments) and what it derives from it. It is the loop goroutine's
// alone, with no lock. Other goroutines reach it through the loop
// (inputs.go): they queue inputs, or reads it runs between its steps
// (onLoop), as the state's builder does (publish.go).
//
// A term loads it from etcd when it is elected, or takes the one its
// engine prepared while it stood by (standby.go): that is why it is a
// value of its own, made before the term it serves.
type decisionState struct {
	units    map[string]*unitRec
	ids      unitIDs // the units' numbers for the scheduler
	machines map[string]*machineRec
	// recs holds the records of t.units by their units' numbers (ids);
	// unplaced the numbers of the wanted units without a machine.
	recs     []*unitRec
	unplaced idSet
	// machineScratch is the loop's: the map each pass's planInput describes
	// the machines in (planScratch); and scratchStates the slice a Hello's
	// states are made in (attachScratch).
	machineScratch map[string]planMachine
	scratchStates  []agentStatus
	// slotScratch is the loop's map of a machine's units to their places
	// in its list (slotsOf), empty between uses.
	slotScratch map[string]int32
	globals     map[string]struct{} // global units (wanted or not)
	// globalsDirty asks the loop to recompute where global units run.
	globalsDirty bool
	// overrides are the metadata changes made through the API, per machine
	// (a nil value removes the key the machine reports).
	overrides map[string]map[string]*string
	rev       int64 // etcd revision of the last commit (for readers)

	// followers are the units with MachineOf= (checked again when a unit
	// they may follow moves: followersMoved).
	followers      map[string]struct{}
	followersMoved bool
	// rechecked is set once every placed unit has been checked against its
	// machine, after the term's first agent TTL (when every live machine
	// has reconnected): a change a former term committed but did not act on
	// (a metadata change, then a failed write) is acted on now. Set from
	// the start when the term loaded no placed unit.
	rechecked bool
	// recheck are the placed units that check has yet to look at, a chunk
	// a pass (recheckChunk); nil before it starts and once done. The
	// loop's.
	recheck []string
	// placeDirty says something placement depends on changed since the
	// last pass (units, machines, metadata, capacity, policy): without it a
	// pass does not try the unplaced backlog again.
	placeDirty bool
	// moves are the units moving off a machine, and the drains (moves.go).
	moves moves
	// hist keeps each unit's recent notable events (lost, moved, placed
	// again), shown with the unit. The loop's, as all of the above.
	hist map[string][]apiv1.HistoryEntry
	// options are the scheduler's (strategy, roles); shares the roles'
	// dominant shares after the last pass.
	options scheduler.Options
	shares  map[string]float64

	// store is how units are stored (records.go): files by content, the
	// range records not yet materialized, and what else names records.
	// The loop's.
	store    unitStore
	versions versionsState // versions.go
	deploys  deployState   // deploy.go

	// sched is the scheduler's mirror (mirror.go), the loop's.
	sched mirror

	// singletons holds the LostAfter= of singleton units that set one,
	// and shortestLostAfter the shortest of them: both set the heartbeat
	// interval (heartbeat.go), which the agents' senders read.
	singletons        *durations
	shortestLostAfter atomic.Int64
	// lostAfters holds every unit's LostAfter= that is set (not infinity),
	// and shortestLost the shortest of them (noteLostAfter).
	lostAfters   *durations
	shortestLost time.Duration
	// doubt is until when the leader doubts that its unreachable machines
	// are gone (doubt.go; zero: it does not). The loop's.
	doubt time.Time
	// doubtRanOut is set once the doubt has run out while machines stay
	// silent.
	doubtRanOut bool
}

// newDecisionState returns an empty decision state.
func newDecisionState() *decisionState {
	ds := &decisionState{
		units:      map[string]*unitRec{},
		machines:   map[string]*machineRec{},
		globals:    map[string]struct{}{},
		sched:      newMirror(),
		followers:  map[string]struct{}{},
		store:      newStore(),
		versions:   versionsState{logs: map[string]registry.VersionLog{}, keep: registry.DefaultKeepVersions},
		deploys:    newDeployState(nil),
		placeDirty: true,
		moves:      newMoves(),
		hist:       map[string][]apiv1.HistoryEntry{},
		overrides:  map[string]map[string]*string{},
		singletons: newDurations(),
		lostAfters: newDurations(),
	}
	ds.sched.SetIDs(ds.unitID)
	return ds
}

// term is the leader's state for one election term.
type term struct {
	e     *Engine
	el    *election.Term
	info  election.Info
	start time.Time // when the term began to serve, its load done
	// startWall is the same by the wall clock (for pacing: the publisher).
	startWall time.Time
	// now is the loop's clock: the time of the iteration it is in (of the
	// load, before the loop starts). Every decision takes the time from
	// here, never from the system's clock; only the loop sets it, from
	// cfg.Now at the start of each iteration.
	now time.Time
	// loaded is how many units the term loaded (the loop changes units),
	// and loadedFrom where from: the state its standby prepared
	// ("prepared"), the record it followed ("followed") or etcd ("etcd").
	loaded     int
	loadedFrom string
	// reconnect is the time the machines get to reconnect after start
	// before their silence counts (reconnectGrace).
	reconnect time.Duration
	keys      registry.Keys
	ctx       context.Context
	cancel    context.CancelCauseFunc
	committer *registry.Committer
	// commitCtx is the committer's and its callers': cancelled when the
	// term degrades, so a degraded term sends nothing more to etcd (its
	// in-flight writes are abandoned, of unknown outcome) and does not
	// starve the campaign that is to replace it.
	commitCtx  context.Context
	stopCommit context.CancelFunc
	wg         sync.WaitGroup
	deg        *degradation // lease and etcd reachability (degraded.go)

	// The decision state: the loop goroutine's alone, with no lock
	// (decisionState).
	*decisionState

	reqs chan *applyReq
	kick chan struct{}
	// outbox holds the txns the core asks for, not yet performed
	// (driver.go).
	outbox []*txn
	pace   passPacing // pace.go: the loop's
	// inbox holds the agents' reports not yet applied (inbox.go).
	inbox *inboxes
	// hold gathers senders to wake after a slice of placements (stream.go).
	hold wakeHold
	// senders send the agents' streams their messages (senders.go).
	senders *sendPool
	// streams counts the agents' open streams: with the decision state's
	// shortestLostAfter it sets the heartbeat interval (heartbeat.go).
	streams atomic.Int64
	// lastAttach is when an agent's stream was last taken (Unix
	// nanoseconds, the wall clock) and loadedMachines how many machines
	// the term loaded holding units: the publisher holds its background
	// builds while they come back (machinesArriving).
	lastAttach     atomic.Int64
	loadedMachines int
	// engines are the engine candidates' gRPC addresses (discovery.go).
	engines atomic.Pointer[engineList]

	// changes counts changes readers could see (see publish.go); the rest
	// is the state publisher's.
	changes    atomic.Uint64
	acked      atomic.Uint64                  // writes acknowledged (apply rounds), for readers of the state
	published  atomic.Pointer[loopViews]      // the loop's small views for readers (views.go)
	snapshot   atomic.Pointer[state.Snapshot] // the latest published state
	pubMu      sync.Mutex
	pubAt      time.Time
	pubSeen    uint64
	pubCost    time.Duration
	namesMu    sync.Mutex
	namesFrom  *state.Snapshot // the last snapshot built, while it holds every unit (sortedNames)
	namesStale atomic.Bool     // units came or went since namesFrom's names were listed
	// views are the values the last builds' units share, kept from build
	// to build while units are only changed: the loop's, used only by the
	// builds' calls on it (buildSnapshot).
	views *sharedViews
	// The units whose view in the published state changed since the last
	// build began (viewChanged): a build while no unit came or went
	// copies the last snapshot and makes only their views again. Too many
	// to list, and the next build makes every view (dirtyAll). The loop's.
	dirty    []string
	dirtyAll bool
	events   *eventLog
}

// loadTimeout bounds a new term's load of the cluster from etcd while its
// election session lasts but etcd does not answer.
const loadTimeout = 10 * time.Minute

func newTerm(parent context.Context, e *Engine, el *election.Term, fol *registry.Follower, sb *standby) (*term, error) {
	ctx, cancel := context.WithCancelCause(parent)
	t := &term{
		e: e, el: el, info: el.Info, start: e.cfg.Now(), now: e.cfg.Now(), keys: e.cfg.Keys, ctx: ctx, cancel: cancel, deg: newDegradation(),
		committer: registry.NewCommitter(e.cfg.Client, el.Fence(), registry.CommitterConfig{MaxOps: e.cfg.MaxTxnOps,
			Observe: func(d time.Duration) { e.cfg.Metrics.ObserveEtcd("txn", d) }}),
		decisionState: newDecisionState(),
		events:        newEventLog(el.Info.Rev, ctx.Done()),
		reqs:          make(chan *applyReq, 256),
		kick:          make(chan struct{}, 1),
		inbox:         newInboxes(),
	}
	t.commitCtx, t.stopCommit = context.WithCancel(ctx)
	t.senders = newSendPool(t.serveStream, sendWorkers(), maxSendWorkers, ctx.Done())
	// The load takes as long as the cluster's size needs: a million units
	// on a busy host took more than the 30 s it was once bounded by, so
	// the engine won, timed out loading, resigned and won again without
	// ever leading. It ends when the election session does (etcd gone, or
	// the lease lost) and, as a last resort against an etcd that keeps the
	// lease but never answers a read, after loadTimeout.
	lctx, lcancel := context.WithTimeout(ctx, loadTimeout)
	go func() {
		select {
		case <-el.Done():
			lcancel()
		case <-lctx.Done():
		}
	}()
	// The committer runs from here: a migration of the data's schema
	// writes through it before the load.
	t.wg.Add(1)
	go func() { defer t.wg.Done(); t.committer.Run(t.commitCtx) }()
	if err := t.takeSchema(lctx); err != nil {
		lcancel()
		cancel(err)
		t.stopCommit()
		t.wg.Wait()
		return nil, err
	}
	var ph passPhases
	ph.start(time.Now())
	defer ph.logSlow(e.log, "loading the cluster at the start of a term")
	snap, p, err := t.readRecord(lctx, fol, sb, &ph)
	lcancel()
	if err != nil {
		cancel(err)
		t.stopCommit()
		t.wg.Wait()
		return nil, err
	}
	var placedAtLoad int
	switch {
	case p != nil:
		t.loadedFrom = "prepared"
		t.decisionState, placedAtLoad = p.state, p.placed
		t.loadMoves(p.moves)
		ph.note("units", p.units)
		ph.note("ranges", p.ranges)
		e.log.Info("took the state prepared while standing by", "units", len(t.units), "prepared_ms", p.took.Milliseconds())
	default:
		t.loadedFrom = "etcd"
		if snap.Changes > 0 {
			t.loadedFrom = "followed"
		}
		t.loadRecords(snap, &ph)
		placedAtLoad = t.indexUnits(snap, &ph)
		t.loadMoves(snap.Moves)
	}
	// The term serves from now: a machine's silence counts from here (and
	// the reconnect grace), not from the election, which came before a
	// load that takes a minute at a million units. Counted from the
	// election, every machine of a large cluster was lost at the first pass.
	ph.done("indexes")
	t.loaded = len(t.units)
	// The term's check of every placed unit (planInput) is for what a
	// former term placed; a term that loaded no placed unit checks
	// nothing. A new cluster's first leader checked a million units it
	// had itself just placed, in 61 passes back to back, while the
	// million reported their states.
	t.rechecked = placedAtLoad == 0
	t.start = e.cfg.Now()
	t.startWall = time.Now()
	t.now = t.start
	t.reconnect = reconnectGrace(len(t.machines))
	for _, m := range t.machines {
		if len(m.units)+len(m.globals) > 0 {
			t.loadedMachines++
		}
	}
	t.publishViews()
	t.startLoops()
	return t, nil
}

// readRecord returns the state the engine's standby prepared if the record
// it followed while it campaigned, caught up to now, is the one it was
// prepared from (standby.go); else that record, or the whole record read
// from etcd.
func (t *term) readRecord(ctx context.Context, fol *registry.Follower, sb *standby, ph *passPhases) (*registry.Snapshot, *prepared, error) {
	e := t.e
	if fol != nil {
		n, err := fol.CatchUp(ctx)
		ph.done("catch up")
		if err == nil {
			if p := sb.take(ctx, n); p != nil {
				ph.done("prepared")
				return nil, p, nil
			}
			snap := fol.Current()
			ph.done("copy")
			return snap, nil, nil
		}
		if !errors.Is(err, registry.ErrBehind) {
			return nil, nil, err
		}
		e.log.Warn("the record this engine followed is behind etcd; reading it all", "err", err)
	}
	start := time.Now()
	snap, err := registry.Load(ctx, e.cfg.Client, t.keys)
	e.cfg.Metrics.ObserveEtcd("load", time.Since(start))
	ph.done("read etcd")
	return snap, nil, err
}

// loadRecords makes the term's units, machines' overrides, files and
// policy from the record.
func (t *term) loadRecords(snap *registry.Snapshot, ph *passPhases) {
	e := t.e
	t.rev = snap.Revision
	for _, key := range snap.Skipped {
		e.log.Error("a stored record does not decode; leaving it out", "key", key)
	}
	t.loadOptions(snap.SchedulerConfig)
	for id, m := range snap.Machines {
		t.overrides[id] = m.Metadata
		if m.Drain {
			t.moves.setDrain(id, max(m.MaxParallel, 1))
		}
	}
	t.store.legacy = snap.Legacy
	for c := range snap.Files {
		t.store.files[c] = &storedFile{text: snap.Files[c], stored: true}
	}
	t.loadVersions(snap)
	t.deploys = newDeployState(snap.Deployments)
	parser := storedParser{t: t, templates: map[[2]string]*unit.File{}}
	t.units = make(map[string]*unitRec, len(snap.Units))
	mk := recMaker{t: t}
	for _, r := range snap.Units {
		f, err := parser.parse(r.Name, r.File)
		if err != nil {
			// A unit that parsed when it was submitted but not now (a newer
			// Flotilla with stricter rules): keep it visible, never run it.
			e.log.Error("stored unit no longer parses; it will not be scheduled", "unit", r.Name, "err", err)
			continue
		}
		ds, err := unit.ParseDesiredState(r.DesiredState)
		if err != nil {
			ds = unit.Inactive
		}
		rec := mk.rec(r.Name, f, ds)
		machine := r.Machine
		if machine == "" {
			machine = snap.Schedule[r.Name] // the former layout's schedule/ key
		}
		if !f.Fleet.Global {
			rec.machine = machine
		}
		t.store.refFile(nil, rec)
		t.keep(r.Name, nil, rec)
		t.noteLostAfter(r.Name, rec)
	}
	ph.done("records")
}

// indexUnits loads the ranges and indexes the units loaded: followers,
// globals, machines' units and the unplaced. It returns how many units
// were placed.
func (t *term) indexUnits(snap *registry.Snapshot, ph *passPhases) int {
	ph.note("units", len(snap.Units))
	ph.note("ranges", len(snap.Ranges))
	t.loadRanges(snap)
	ph.done("ranges")
	placed := 0
	for name, rec := range t.units {
		if len(rec.file.Fleet.MachineOf) > 0 {
			t.followers[name] = struct{}{}
		}
		switch {
		case rec.file.Fleet.Global:
			t.globals[name] = struct{}{}
		case rec.machine != "":
			t.machine(rec.machine).addUnit(name, rec)
			placed++
		case rec.wanted():
			t.unplaced.add(rec.su.ID)
		}
	}
	t.sched.Reserve(placed)
	return placed
}

// loadMoves begins the moves under way in the record (unit name -> move,
// registry.ParseMove), as of the term's clock.
func (t *term) loadMoves(moves map[string]string) {
	for name, move := range moves {
		from, handedOver := registry.ParseMove(move)
		switch r := t.units[name]; {
		case r == nil || r.file.Fleet.Global:
		case handedOver && r.machine != "" && r.machine != from:
			t.moves.handOver(name, from) // the old copy runs until the new one is active
		case !handedOver && r.machine == "":
			t.moves.begin(name, from, t.now)
			t.keep(name, r, r.with(func(r *unitRec) { r.reason = "stopping on " + from + " before it moves" }))
		}
		// A move of a unit since destroyed or placed is stale; the next
		// pass of a move completing deletes its key.
	}
}

// startLoops starts the term's goroutines: the loop, the publisher and, by registry mode, the candidates' or agents' followers.
func (t *term) startLoops() {
	e := t.e
	t.wg.Add(1)
	go func() { defer t.wg.Done(); t.loop() }()
	if e.cfg.Registry == registry.ModeGRPC {
		t.wg.Add(1)
		go func() { defer t.wg.Done(); t.followCandidates() }()
	}
	t.wg.Add(1)
	go func() { defer t.wg.Done(); t.publishLoop() }()
	if e.cfg.Registry == registry.ModeEtcd {
		t.wg.Add(1)
		go func() { defer t.wg.Done(); t.followAgentsEtcd() }()
	}
}

// storedParser parses a term's stored units as unit.ParseStored does,
// each template's text once for all its instances (see instanceFile), and
// a run of instances of one template that share a file (as a range leaves
// them, in name order) without looking the template up for each: a new
// leader of a million units spent seconds of its load on that.
type storedParser struct {
	t         *term
	templates map[[2]string]*unit.File // (template, text) -> parsed
	// The last instance's name around its instance string, its text, and
	// the file every instance of its template shares (nil: none).
	prefix, suffix, text string
	shared               *unit.File
}

func (p *storedParser) parse(name, text string) (*unit.File, error) {
	if !unit.IsInstance(name) {
		return unit.Parse(name, []byte(text))
	}
	at, dot := strings.IndexByte(name, '@'), strings.LastIndexByte(name, '.')
	if p.shared != nil && name[:at] == p.prefix && name[dot:] == p.suffix && text == p.text {
		return p.shared, nil
	}
	k := [2]string{unit.TemplateOf(name), text}
	tmpl := p.templates[k]
	if tmpl == nil {
		var err error
		if tmpl, err = unit.Parse(k[0], []byte(text)); err != nil {
			return nil, err
		}
		p.templates[k] = tmpl
	}
	f, err := p.t.store.instanceFile(tmpl, name)
	if err != nil {
		return nil, err
	}
	p.prefix, p.suffix, p.text, p.shared = name[:at], name[dot:], text, nil
	if unit.Shareable(tmpl) {
		p.shared = f
	}
	return f, nil
}

func (t *term) stop() {
	t.cancel(errors.New("term over"))
	t.wg.Wait()
}

// machine returns the record of machine id, creating it. It runs on the
// loop.
func (t *term) machine(id string) *machineRec {
	m, ok := t.machines[id]
	if !ok {
		m = &machineRec{info: MachineInfo{ID: id}, others: unitStates{}, globals: map[string]struct{}{}}
		t.machines[id] = m
	}
	return m
}

func (t *term) poke() {
	t.changed()
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// assignment is what an agent is told about a unit.
func assignment(r *unitRec) *agentpb.Assignment {
	return &agentpb.Assignment{Name: r.name(), Hash: r.file.Hash, File: r.file.Raw, DesiredState: string(r.desired()), Global: r.file.Fleet.Global}
}

// setUnit publishes rec as unit name's record (nil deletes it), keeping the
// indexes and telling the agents concerned. It runs on the loop.
func (t *term) setUnit(name string, rec *unitRec) {
	t.setUnitFrom(name, t.units[name], rec)
}

// setUnitFrom is setUnit for a caller that has read the unit's record,
// old: t.units[name].
func (t *term) setUnitFrom(name string, old, rec *unitRec) {
	t.changed()
	t.placeDirty = true
	// What follows from the file alone is unchanged when the file is: a
	// range of a million instances started or stopped changes only their
	// desired state, and each map operation skipped here is a second
	// of the loop's at that size.
	sameFile := old != nil && rec != nil && old.file == rec.file
	if !sameFile || old.content != rec.content {
		t.store.refFile(old, rec)
	}
	if !sameFile {
		t.noteLostAfter(name, rec)
		if old != nil {
			t.store.forgetProto(old.file) // a template replaced or destroyed
		}
		if rec != nil && len(rec.file.Fleet.MachineOf) > 0 {
			t.followers[name] = struct{}{}
		} else {
			delete(t.followers, name)
		}
	}
	t.unitEvent(name, rec)
	t.viewChanged(name)
	if old != nil && old.machine != "" && (rec == nil || rec.machine != old.machine) {
		t.followersMoved = true
		if m := t.machines[old.machine]; m != nil {
			m.removeUnit(t.units, old)
			switch {
			case rec == nil:
				m.pushDestroyed(name)
			case t.moves.handovers[name] != handover{From: old.machine}: // a handover's old copy runs on
				m.push(name, nil)
			}
		}
	}
	if old != nil && old.file.Fleet.Global {
		t.globalsDirty = true
		if rec == nil || rec.desired() != old.desired() || rec.file.Hash != old.file.Hash {
			// Tell every machine running it; syncAgents adds and removes machines.
			for _, m := range t.machines {
				if _, ok := m.globals[name]; ok {
					if rec == nil {
						delete(m.globals, name)
						m.pushDestroyed(name)
					} else if !rec.wanted() {
						delete(m.globals, name)
						m.push(name, nil)
					} else {
						m.push(name, rec)
					}
				}
			}
		}
	}
	if rec == nil {
		if old != nil {
			t.forget(name, old)
		}
		delete(t.hist, name)
		delete(t.globals, name)
		if h, ok := t.moves.forget(name); ok {
			if m := t.machines[h.From]; m != nil && h.From != old.machine {
				m.pushDestroyed(name)
			}
		}
		t.namesStale.Store(true)
		return
	}
	if old == nil {
		t.namesStale.Store(true)
	}
	t.keep(name, old, rec)
	if rec.file.Fleet.Global {
		t.globals[name] = struct{}{}
		t.globalsDirty = true
		return
	}
	if rec.wanted() && rec.machine == "" {
		t.unplaced.add(rec.su.ID)
	} else {
		t.unplaced.remove(rec.su.ID)
	}
	if rec.machine != "" {
		m := t.machine(rec.machine)
		if old == nil || old.machine != rec.machine {
			m.addUnit(name, rec)
		} else if rec != old {
			rec.slot = old.slot
			m.units[rec.slot].su = rec.su
		}
		if old == nil || old.machine != rec.machine || old.desired() != rec.desired() || old.file.Hash != rec.file.Hash {
			m.push(name, rec)
		}
	}
}

// metadata is a machine's effective metadata: what it reports, less the
// keys an admin reserved (scheduler.Options.ReservedMetadata), changed by
// the API's overrides, which win. It runs on the loop.
func (t *term) metadata(m *machineRec) map[string]string {
	ov := t.overrides[m.info.ID]
	reserved := t.options.ReservedMetadata
	claims := slices.ContainsFunc(reserved, func(k string) bool { _, ok := m.info.Metadata[k]; return ok })
	if len(ov) == 0 && !claims {
		return m.info.Metadata
	}
	md := maps.Clone(m.info.Metadata)
	if md == nil {
		md = map[string]string{}
	}
	for _, k := range reserved {
		delete(md, k)
	}
	for k, v := range ov {
		if v == nil {
			delete(md, k)
		} else {
			md[k] = *v
		}
	}
	return md
}

// historyLen is how many notable events a unit keeps.
const historyLen = 8

// history records a notable event of a unit (lost, moved, placed again).
func (t *term) history(name, what string) {
	h := append(t.hist[name], apiv1.HistoryEntry{Time: t.now.UTC().Format(time.RFC3339Nano), Event: what})
	if len(h) > historyLen {
		h = h[len(h)-historyLen:]
	}
	t.hist[name] = h
}

// unitHistory returns a copy of a unit's recent notable events.
func (t *term) unitHistory(name string) []apiv1.HistoryEntry {
	return slices.Clone(t.hist[name])
}

// reconnectPerMachine is the reconnect grace a new term gives each machine
// it loaded: agents reconnect at a rate, not at once. 10,000 agents took 95
// s to reconnect to a new leader of a million units on a 2-CPU host, and
// had their silence counted from the term's start they were all found lost
// and their units started again elsewhere. Nomad gives every node a fixed
// 5 minutes after a failover (FailoverHeartbeatTTL); this grows with the
// cluster instead, so that a small cluster still replaces the units of a
// dead machine within its LostAfter= of a failover.
const reconnectPerMachine = 10 * time.Millisecond

// maxReconnectGrace bounds reconnectGrace.
const maxReconnectGrace = 5 * time.Minute

// reconnectGrace is how long after a new term starts serving its machines
// have to reconnect before their silence counts.
func reconnectGrace(machines int) time.Duration {
	return min(time.Duration(machines)*reconnectPerMachine, maxReconnectGrace)
}

// unitList is the units scheduled on a machine, in no order, each with
// the state the machine's agent reported of it. Each unit's record in
// t.units holds its place (unitRec.slot), so that a unit leaves the list
// by swapping the last one into its place, and its state is found without
// a lookup by name: a machine's set of names and its map of states by name
// were 33 and 65 MB of a million-unit leader's heap, the list is 48 bytes
// a unit.
type unitList []machineUnit

// machineUnit is a unit in a machine's list and its state there (none
// while st.codes is zero).
type machineUnit struct {
	// su is the unit as the scheduler has it, the record's (kept with it
	// by setUnitFrom): a machine coming back to a new leader gives the
	// scheduler its units from here, not through a map of every unit.
	su *scheduler.Unit
	st storedStatus
}

// name is the unit's name (its scheduler unit's: a field of its own was
// 16 bytes a unit more).
func (e *machineUnit) name() string { return e.su.Name }

// unitNames returns the names of the units scheduled on m.
func (m *machineRec) unitNames() []string {
	names := make([]string, len(m.units))
	for i, e := range m.units {
		names[i] = e.name()
	}
	return names
}

// addUnit appends name, whose record about to be published is rec, with
// the state its agent reported of it here before, if any.
func (m *machineRec) addUnit(name string, rec *unitRec) {
	rec.slot = int32(len(m.units))
	e := machineUnit{su: rec.su}
	if st, ok := m.others[name]; ok {
		e.st = st
		delete(m.others, name)
	}
	m.units = append(m.units, e)
}

// removeUnit takes out the unit whose published record is cur, keeping its
// state here among the others; units holds the records of the rest (the
// one moved into its place has its slot set).
func (m *machineRec) removeUnit(units map[string]*unitRec, cur *unitRec) {
	s, i := m.units, int(cur.slot)
	if i >= len(s) || s[i].name() != cur.name() {
		panic("engine: unit " + cur.name() + " is not at its place in its machine's list")
	}
	if s[i].st.ok() {
		m.others[s[i].name()] = s[i].st
	}
	last := len(s) - 1
	if i != last {
		s[i] = s[last]
		units[s[i].name()].slot = int32(i)
	}
	s[last] = machineUnit{}
	s = s[:last]
	if cap(s) > 64 && len(s) < cap(s)/4 {
		s = slices.Clone(s) // a machine emptied keeps no room for its old units
	}
	m.units = s
}
