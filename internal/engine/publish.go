package engine

import (
	"context"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flotilla/flotilla/internal/apiv1"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/state"
	"github.com/flotilla/flotilla/internal/unit"
)

// SnapshotInterval is how often, at most, the leader publishes a new
// cluster state for readers (GET /v1/state) when something changed.
const SnapshotInterval = 100 * time.Millisecond

// State returns the latest published cluster state, or nil when this engine
// does not lead (or has not published yet).
func (e *Engine) State() *state.Snapshot {
	if e.leader() == nil {
		return nil
	}
	return e.snapshot.Load()
}

// changed notes that readers' state is stale. Callers hold mu (either way).
func (t *term) changed() { t.changes.Add(1) }

// publishLoop publishes a snapshot whenever something changed, at most once
// per SnapshotInterval, so readers never hold a lock the scheduler needs
// for longer than a copy takes and encoding happens outside any lock.
func (t *term) publishLoop() {
	tick := time.NewTicker(SnapshotInterval)
	defer tick.Stop()
	var seen uint64 = ^uint64(0)
	for {
		if c := t.changes.Load(); c != seen {
			seen = c
			s := t.buildSnapshot()
			t.e.snapshot.Store(s)
		}
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (t *term) buildSnapshot() *state.Snapshot {
	s := &state.Snapshot{Term: t.info.Rev, Generation: t.e.generation.Add(1), Revision: t.committer.Revision(), Leader: t.info.Machine}
	t.mu.RLock()
	if s.Revision == 0 {
		s.Revision = t.rev
	}
	s.Machines = t.machineViews()
	s.Units = make([]apiv1.StateUnit, 0, len(t.units))
	for _, r := range t.units {
		u := apiv1.StateUnit{Name: r.file.Name, Hash: r.file.Hash, DesiredState: string(r.desired), Machine: r.machine,
			Global: r.file.Fleet.Global, Reason: r.reason}
		if r.machine != "" {
			if m := t.machines[r.machine]; m != nil {
				if st, ok := m.states[u.Name]; ok {
					u.Load, u.Active, u.Sub = st.Load, st.Active, st.Sub
				}
			}
		}
		s.Units = append(s.Units, u)
	}
	unplaced := len(t.unplaced)
	t.mu.RUnlock()
	sort.Slice(s.Units, func(i, j int) bool { return s.Units[i].Name < s.Units[j].Name })
	t.countUnits(s, unplaced)
	return s
}

// countUnits sets the unit and machine gauges from a snapshot.
func (t *term) countUnits(s *state.Snapshot, unplaced int) {
	type key struct{ desired, active string }
	counts := map[key]int{}
	for i := range s.Units {
		counts[key{s.Units[i].DesiredState, s.Units[i].Active}]++
	}
	m := t.e.cfg.Metrics
	m.Units.Reset()
	for k, n := range counts {
		m.Units.WithLabelValues(k.desired, k.active).Set(float64(n))
	}
	m.Unplaced.Set(float64(unplaced))
	m.MachinesUp.Set(float64(len(s.Machines)))
}

// DurableState reads the cluster's durable record from etcd as a state
// snapshot: every unit with its desired state and target machine, but no
// machines and no current states (those live only in the leader's memory).
// Daemons serve it when no leader answers.
func DurableState(ctx context.Context, cli *clientv3.Client, keys registry.Keys) (*state.Snapshot, error) {
	snap, err := registry.Load(ctx, cli, keys)
	if err != nil {
		return nil, err
	}
	s := &state.Snapshot{Revision: snap.Revision, Units: make([]apiv1.StateUnit, 0, len(snap.Units))}
	for _, r := range snap.Units {
		u := apiv1.StateUnit{Name: r.Name, DesiredState: r.DesiredState, Machine: snap.Schedule[r.Name]}
		if f, err := unit.ParseStored(r.Name, r.File); err == nil {
			u.Hash, u.Global = f.Hash, f.Fleet.Global
		}
		s.Units = append(s.Units, u)
	}
	return s, nil
}
