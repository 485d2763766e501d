package engine

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/procfs"

	"github.com/flotilla/flotilla/internal/cputime"
	"github.com/flotilla/flotilla/internal/registry"
)

// standby prepares, while its engine campaigns, the decision state a term
// would load from the record the engine follows (registry.Follower), so
// that a term elected while the record has not changed since takes it as
// it is instead of making it. At a million units that making is most of a
// failover: a new leader's load took 7.8 s (1.7 s copying the followed
// record, 3.0 s making the units' records, 3.1 s indexing them) after the
// dead leader's lease expired, while no leader served. Raft's followers
// (Nomad's, etcd's) apply every entry to their state machine for the same
// reason.
//
// It prepares once the record has stayed the same for a while
// (standby.quiet: half a second, or twice what the last took), not at
// each change: a standby makes the whole state again, so it would
// otherwise spend a core following a leader that writes a range of a
// million placements in slices. It prepares at the lowest priority (the
// units of its machine come first), and a large record only while its
// host has a CPU to spare (spare). A term elected while the state for
// the record's current changes is being made waits for it, the same work
// its load would do; elected while the record has changed since, it
// loads as before. Being built from the same code (loadRecords, indexUnits) as a
// term's load, the prepared state is that load's, but for the moves under
// way, which a term begins at its own start (loadMoves).
//
// It costs a standby the decision state's memory, the leader's but for
// what agents report (about a gigabyte at a million units), on top of the
// followed record.
type standby struct {
	e   *Engine
	fol *registry.Follower

	mu sync.Mutex
	// ready is the last state prepared, nil if none (or taken).
	ready *prepared
	// building is the record's change count (registry.Snapshot.Changes)
	// of the state under way, 0 while none is; built is closed when it
	// ends.
	building uint64
	built    chan struct{}
	// taken is set once a term took the standby's state or decided to
	// load instead: it prepares no more.
	taken bool
	// took is what the last state cost to make: the CPU time of the
	// thread that made it (its wall time where that cannot be read).
	took time.Duration
}

// prepared is a decision state made from the followed record.
type prepared struct {
	state   *decisionState
	changes uint64            // the record's (registry.Snapshot.Changes)
	moves   map[string]string // the record's moves, for the term to begin (loadMoves)
	placed  int               // units placed (indexUnits)
	units   int               // unit records in the record
	ranges  int               // and range records
	took    time.Duration     // to make it
}

// standbyQuiet is how long the record stays the same, at least, before a
// standby prepares its state (standby.quiet).
const standbyQuiet = 500 * time.Millisecond

func newStandby(e *Engine, fol *registry.Follower) *standby {
	return &standby{e: e, fol: fol}
}

// run prepares the state whenever the record has settled on a new one,
// and the host has a CPU to spare for it (spare), until ctx ends (the
// engine leads, or stops). Then it lets go of a state no term took.
func (s *standby) run(ctx context.Context) {
	defer s.drop()
	for {
		n, loaded, changed := s.fol.Changes()
		if loaded && !s.has(n) {
			idle := readHostIdle()
			quiet := time.NewTimer(s.quiet())
			select {
			case <-ctx.Done():
				quiet.Stop()
				return
			case <-changed:
				quiet.Stop()
			case <-quiet.C:
				if s.spare(s.fol.Units(), idle, readHostIdle()) {
					s.build()
				}
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// quiet is how long the record must stay the same before the standby
// prepares its state: standbyQuiet, or twice as long as the last one took
// to make, so that a standby whose leader keeps writing spends at most a
// third of a core making states it throws away. (At once as long, the
// standbys of a bench sharing two CPUs with their leader made a million
// units' state in the middle of its start, between the write of the range
// and the writes of the placements, and again at the end: the start took
// a third longer.)
func (s *standby) quiet() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(standbyQuiet, 2*s.took)
}

// costlyUnits is how many units a record must hold for its preparation to
// wait until the host has a CPU to spare (spare): a standby of a few
// thousand units prepares in milliseconds whatever the host does; a
// million units cost 8 CPU-s.
const costlyUnits = 10000

// spareCPU is the idle CPU, in CPUs, the host must have had while the
// record stayed the same for a costly preparation to begin.
const spareCPU = 0.5

// hostIdle is a reading of the host's idle CPU time, summed over its CPUs,
// and when it was taken.
type hostIdle struct {
	idle time.Duration
	at   time.Time
	ok   bool
}

// readHostIdle reads the host's idle CPU time from /proc/stat (idle and
// waiting for I/O, every CPU's).
func readHostIdle() hostIdle {
	at := time.Now()
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return hostIdle{}
	}
	st, err := fs.Stat()
	if err != nil {
		return hostIdle{}
	}
	idle := st.CPUTotal.Idle + st.CPUTotal.Iowait
	return hostIdle{idle: time.Duration(idle * float64(time.Second)), at: at, ok: true}
}

// spare reports whether the standby may prepare a record of units now,
// the host's idle CPU read at from and to, the record's quiet period: at
// once if the record is small, else only if the host had spareCPU idle
// over that period (or its idle time cannot be read). Three engines, etcd
// and ten thousand simulated agents on a 2-CPU host: standbys prepared a
// million units' state in the middle of the start, taking CPU from agents
// already falling behind with their heartbeats (docs/benchmarks.md,
// session 18). A real standby's host mostly has CPU to spare; a standby
// whose host has none loads the record when elected, as before.
func (s *standby) spare(units int, from, to hostIdle) bool {
	if units < costlyUnits || !from.ok || !to.ok || !to.at.After(from.at) {
		return true
	}
	idle := float64(to.idle-from.idle) / float64(to.at.Sub(from.at))
	if idle < spareCPU {
		s.e.log.Debug("the host has no CPU to spare: the standby prepares later", "units", units, "idle_cpus", idle)
		return false
	}
	return true
}

// has reports whether the state for the record's change count n is ready
// (or no more is wanted).
func (s *standby) has(n uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.taken || (s.ready != nil && s.ready.changes == n)
}

// build prepares the state of the record as the follower holds it now.
func (s *standby) build() {
	snap := s.fol.Current()
	if snap == nil {
		return
	}
	s.mu.Lock()
	if s.taken {
		s.mu.Unlock()
		return
	}
	// The state ready is of a record since changed: its memory goes
	// before the next is made, not after.
	s.ready = nil
	s.building, s.built = snap.Changes, make(chan struct{})
	s.mu.Unlock()
	// The work is done at the lowest priority, on a thread of its own
	// that ends with it: a standby shares its machine with the units
	// placed there (and, in a bench, with its leader), which come first.
	made := make(chan *prepared, 1)
	var cost time.Duration
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if err := lowerThreadPriority(); err != nil {
			s.e.log.Debug("cannot lower the priority of the standby's preparation", "err", err)
		}
		cpu0, ok0 := cputime.Thread()
		p := s.e.prepare(snap)
		// What it cost, not how long it took: niced on a busy host, a
		// preparation of about 8 CPU-s took 65 s.
		cost = p.took
		if cpu1, ok1 := cputime.Thread(); ok0 && ok1 && cpu1 >= cpu0 {
			cost = cpu1 - cpu0
		}
		made <- p
	}()
	p := <-made
	s.mu.Lock()
	defer s.mu.Unlock()
	s.building, s.took = 0, cost
	close(s.built)
	if !s.taken {
		s.ready = p
	}
}

// take returns the state prepared for the record's change count n,
// waiting while it is being made, or nil if there is none: the caller
// loads the record itself. Either way the standby prepares no more. A
// nil standby has none.
func (s *standby) take(ctx context.Context, n uint64) *prepared {
	if s == nil {
		return nil
	}
	for {
		s.mu.Lock()
		if p := s.ready; p != nil && p.changes == n {
			s.ready, s.taken = nil, true
			s.mu.Unlock()
			return p
		}
		if s.building == 0 || s.building != n {
			s.ready, s.taken = nil, true
			s.mu.Unlock()
			return nil
		}
		built := s.built
		s.mu.Unlock()
		select {
		case <-built:
		case <-ctx.Done():
			return nil
		}
	}
}

// status reports whether the state ready is of the record as the follower
// holds it now, and of how many units.
func (s *standby) status() (prepared bool, units int) {
	n, _, _ := s.fol.Changes()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready == nil || s.ready.changes != n {
		return false, 0
	}
	return true, len(s.ready.state.units)
}

// Standby says whether the engine, standing by, holds the state a term
// would load from the record as it is now (prepared), and of how many
// units; ok is false while it does not stand by (it leads, refuses to, or
// follows no record: the etcd registry mode).
func (e *Engine) Standby() (prepared bool, units int, ok bool) {
	s := e.standby.Load()
	if s == nil {
		return false, 0, false
	}
	prepared, units = s.status()
	return prepared, units, true
}

// drop lets go of the state ready.
func (s *standby) drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ready, s.taken = nil, true
}

// prepare makes the decision state a term would load from snap, with the
// same code (loadRecords, indexUnits) on a term that serves nothing.
func (e *Engine) prepare(snap *registry.Snapshot) *prepared {
	start := time.Now()
	t := &term{e: e, keys: e.cfg.Keys, now: e.cfg.Now(), decisionState: newDecisionState()}
	var ph passPhases
	ph.start(start)
	t.loadRecords(snap, &ph)
	placed := t.indexUnits(snap, &ph)
	p := &prepared{state: t.decisionState, changes: snap.Changes, moves: snap.Moves, placed: placed,
		units: len(snap.Units), ranges: len(snap.Ranges), took: time.Since(start)}
	e.log.Info("prepared the state a term would load", "units", len(t.units), "revision", snap.Revision,
		"took_ms", p.took.Milliseconds())
	return p
}
