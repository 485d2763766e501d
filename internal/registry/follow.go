package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Follower keeps the durable record decoded as etcd changes it, for an
// engine that does not lead: when it wins an election it takes its
// Snapshot instead of reading every key again. A new leader of a million
// units spent 20 s and more in Load (50 pages from an etcd shared with the
// cluster, each record decoded) while no leader served; a standby that
// has followed the record needs only to catch up to the election's
// revision and copy what it holds. It costs the standby the decoded
// record in memory (about 130 bytes a unit) and the decoding of each
// write as the leader makes it.
//
// It loads, then watches the cluster's prefix from the loaded revision;
// when the watch fails (etcd compacted past it, or went away) it loads
// again. Keys it does not keep (the election's, and the etcd registry
// mode's presence, states and assignments, which engines in that mode do
// not follow) are passed over.
type Follower struct {
	cli  *clientv3.Client
	keys Keys

	mu sync.Mutex
	// rev is the revision the record below is as of: every change up to
	// it has been applied. 0 until loaded.
	rev int64
	// progressed is closed (and replaced) whenever rev moves.
	progressed chan struct{}
	units      map[string]Record // by key less the units/ prefix; Rev set, File empty for records by content
	schedule   map[string]string // schedule/ keys of the former layout
	files      map[string]string
	ranges     map[string]RangeRecord // by key
	moves      map[string]string
	machines   map[string]MachineRecord
	config     []byte
	versions   map[string]VersionLog
	deploys    map[string]Deployment
	vindex     int64
	vconfig    []byte
	bad        map[string]bool // keys whose value did not decode
	// changes counts the changes applied to the record (a load counts as
	// one): while it is the same, so is the record, whatever revision
	// etcd is at (writes to keys the follower passes over, such as the
	// election's, move the revision and change nothing here).
	changes uint64
	// changed is closed (and replaced) whenever changes moves.
	changed chan struct{}
}

// NewFollower returns a Follower of keys' record; Run makes it follow.
func NewFollower(cli *clientv3.Client, keys Keys) *Follower {
	return &Follower{cli: cli, keys: keys, progressed: make(chan struct{}), changed: make(chan struct{})}
}

// Run follows the record until ctx ends, then lets go of it (an engine
// that leads writes the record itself, and a million units of it are
// hundreds of megabytes).
func (f *Follower) Run(ctx context.Context) {
	defer f.drop()
	for ctx.Err() == nil {
		pause := time.Second // before loading again after a failed load
		if snap, err := Load(ctx, f.cli, f.keys); err == nil {
			f.reset(snap)
			f.watch(ctx, snap.Revision)
			pause = 100 * time.Millisecond // after the watch failed
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
		}
	}
}

// drop forgets the record; Snapshot then waits as for a first load.
func (f *Follower) drop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev = 0
	f.units, f.schedule, f.files, f.ranges, f.moves, f.machines, f.config, f.bad = nil, nil, nil, nil, nil, nil, nil, nil
}

// reset makes the follower's record snap's.
func (f *Follower) reset(snap *Snapshot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.units = make(map[string]Record, len(snap.Units))
	for _, r := range snap.Units {
		if r.Content != "" {
			r.File = "" // filled in from files when a snapshot is taken
		}
		f.units[r.Name] = r
	}
	f.schedule = map[string]string{}
	for name := range snap.Legacy {
		f.schedule[name] = snap.Schedule[name]
	}
	f.files = snap.Files
	f.ranges = map[string]RangeRecord{}
	for _, r := range snap.Ranges {
		f.ranges[r.Key] = r
	}
	f.moves = snap.Moves
	f.machines = snap.Machines
	f.config = snap.SchedulerConfig
	f.versions, f.vindex, f.vconfig = snap.Versions, snap.VersionIndex, snap.VersionsConfig
	f.deploys = snap.Deployments
	f.bad = map[string]bool{}
	for _, k := range snap.Skipped {
		// A record whose file was missing when loaded is kept out until
		// it is written again: Load skipped it the same way.
		f.bad[strings.Fields(k)[0]] = true
	}
	f.changes++
	f.noteChanged()
	f.advance(snap.Revision)
}

// noteChanged wakes those waiting for a change. Callers hold mu.
func (f *Follower) noteChanged() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// advance notes that the record is as of rev. Callers hold mu.
func (f *Follower) advance(rev int64) {
	if rev > f.rev {
		f.rev = rev
		close(f.progressed)
		f.progressed = make(chan struct{})
	}
}

// watch applies the changes after rev until the watch fails or ctx ends.
func (f *Follower) watch(ctx context.Context, rev int64) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := f.cli.Watch(clientv3.WithRequireLeader(wctx), f.keys.p(), clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithProgressNotify())
	for resp := range ch {
		if resp.Err() != nil || resp.Canceled {
			return
		}
		f.mu.Lock()
		n := f.changes
		for _, ev := range resp.Events {
			if f.apply(ev) {
				f.changes++
			}
		}
		if f.changes != n {
			f.noteChanged()
		}
		switch {
		case resp.IsProgressNotify():
			f.advance(resp.Header.Revision)
		case len(resp.Events) > 0:
			f.advance(resp.Events[len(resp.Events)-1].Kv.ModRevision)
		}
		f.mu.Unlock()
	}
}

// apply applies one change, and reports whether it was to a key the
// follower keeps. Callers hold mu.
func (f *Follower) apply(ev *clientv3.Event) bool {
	key := string(ev.Kv.Key)
	del := ev.Type == clientv3.EventTypeDelete
	delete(f.bad, key)
	k := f.keys
	switch {
	case strings.HasPrefix(key, k.Units()):
		name := strings.TrimPrefix(key, k.Units())
		delete(f.units, name)
		if del {
			return true
		}
		r, ok := k.decodeRecord(key, ev.Kv.Value, ev.Kv.ModRevision)
		if !ok {
			f.bad[key] = true
			return true
		}
		if r.Content != "" {
			r.File = ""
		}
		f.units[name] = r
	case strings.HasPrefix(key, k.Ranges()):
		delete(f.ranges, key)
		if del {
			return true
		}
		r, ok := decodeRange(key, ev.Kv.Value, ev.Kv.ModRevision)
		if !ok {
			f.bad[key] = true
			return true
		}
		f.ranges[key] = r
	case strings.HasPrefix(key, k.Files()):
		setOrDelete(f.files, strings.TrimPrefix(key, k.Files()), string(ev.Kv.Value), del)
	case strings.HasPrefix(key, k.Schedules()):
		setOrDelete(f.schedule, strings.TrimPrefix(key, k.Schedules()), string(ev.Kv.Value), del)
	case strings.HasPrefix(key, k.Moves()):
		setOrDelete(f.moves, strings.TrimPrefix(key, k.Moves()), string(ev.Kv.Value), del)
	case strings.HasPrefix(key, k.Machines()):
		id := strings.TrimPrefix(key, k.Machines())
		delete(f.machines, id)
		if del {
			return true
		}
		var r MachineRecord
		if err := json.Unmarshal(ev.Kv.Value, &r); err != nil {
			f.bad[key] = true
			return true
		}
		f.machines[id] = r
	case key == k.SchedulerConfig():
		f.config = nil
		if !del {
			f.config = append([]byte(nil), ev.Kv.Value...)
		}
	case strings.HasPrefix(key, k.Versions()):
		delete(f.versions, strings.TrimPrefix(key, k.Versions()))
		if del {
			return true
		}
		name, l, ok := k.decodeVersionLog(key, ev.Kv.Value)
		if !ok {
			f.bad[key] = true
			return true
		}
		f.versions[name] = l
	case strings.HasPrefix(key, k.Deployments()):
		delete(f.deploys, strings.TrimPrefix(key, k.Deployments()))
		if del {
			return true
		}
		d, ok := k.decodeDeployment(key, ev.Kv.Value)
		if !ok {
			f.bad[key] = true
			return true
		}
		f.deploys[d.Unit] = d
	case key == k.VersionIndex():
		if n, err := strconv.ParseInt(string(ev.Kv.Value), 10, 64); err == nil && !del {
			f.vindex = max(f.vindex, n)
		}
	case key == k.VersionsConfig():
		f.vconfig = nil
		if !del {
			f.vconfig = append([]byte(nil), ev.Kv.Value...)
		}
	default:
		return false
	}
	return true
}

func setOrDelete(m map[string]string, k, v string, del bool) {
	if del {
		delete(m, k)
	} else {
		m[k] = v
	}
}

// CatchUpTimeout bounds how long Snapshot waits for a follower that has
// loaded the record to catch up with etcd (one still loading it is waited
// for: its load is what the caller would do instead).
const CatchUpTimeout = 10 * time.Second

// catchUpWait is how long Snapshot waits for a follower of units units to
// catch up before the caller had better read etcd: about what that read
// takes (a million units took 10-24 s on a 2-CPU host), at least a second
// and at most CatchUpTimeout. etcd sometimes leaves a progress request
// unanswered for longer (a daemon's test saw a small record's follower
// wait the whole 10 s, one run in ten), and a small record is read in
// milliseconds.
func catchUpWait(units int) time.Duration {
	return min(max(time.Duration(units)*10*time.Microsecond, time.Second), CatchUpTimeout)
}

// ErrBehind says a follower did not catch up within catchUpWait: read the
// record with Load instead.
var ErrBehind = errors.New("registry: the follower is behind etcd")

// Snapshot returns the record as Load would read it now: it waits until
// the follower has applied every change up to the revision etcd is at
// when it is called (CatchUp), and copies it. Its Units come in no
// particular order.
func (f *Follower) Snapshot(ctx context.Context) (*Snapshot, error) {
	if _, err := f.CatchUp(ctx); err != nil {
		return nil, err
	}
	return f.Current(), nil
}

// Current copies the record as the follower holds it now, caught up or
// not; nil before it has loaded one.
func (f *Follower) Current() *Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rev == 0 {
		return nil
	}
	return f.snapshot()
}

// Units returns how many units the record holds, at most: its unit
// records and its range records' instances (an instance that was changed
// since its range was written has a record of its own too). It is
// cheap: a standby sizes its work by it.
func (f *Follower) Units() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.units)
	for _, r := range f.ranges {
		n += r.To - r.From + 1
	}
	return n
}

// Changes returns how many changes the follower has applied to the record
// (Snapshot.Changes: the same count, the same record), whether it has
// loaded one, and a channel closed at the next change.
func (f *Follower) Changes() (n uint64, loaded bool, changed <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changes, f.rev > 0, f.changed
}

// CatchUp waits until the follower has applied every change up to the
// revision etcd is at when it is called, asking etcd to tell the watch how
// far it is, and returns the count of changes applied (Changes) as of
// then. ErrBehind if it does not within catchUpWait.
func (f *Follower) CatchUp(ctx context.Context) (uint64, error) {
	// A read of one key: its header is etcd's current revision (Load's
	// count of every key under the prefix costs etcd a walk of them all).
	resp, err := f.cli.Get(ctx, f.keys.SchedulerConfig())
	if err != nil {
		return 0, fmt.Errorf("registry: follow: %w", err)
	}
	want := resp.Header.Revision
	ask := time.NewTicker(100 * time.Millisecond)
	defer ask.Stop()
	f.mu.Lock()
	wait := catchUpWait(len(f.units))
	f.mu.Unlock()
	behind := time.Now().Add(wait)
	for {
		f.mu.Lock()
		if f.rev >= want {
			defer f.mu.Unlock()
			return f.changes, nil
		}
		rev, progressed := f.rev, f.progressed
		f.mu.Unlock()
		if rev > 0 && time.Now().After(behind) {
			return 0, fmt.Errorf("%w: at revision %d of %d after %v", ErrBehind, rev, want, wait)
		}
		// Progress notifications come only when asked (or every few
		// minutes): ask, and again while none comes. The request goes to
		// the watch stream of a context with the same metadata as the
		// watch's (WithRequireLeader).
		if err := f.cli.RequestProgress(clientv3.WithRequireLeader(ctx)); err != nil && ctx.Err() == nil {
			return 0, fmt.Errorf("registry: follow: %w", err)
		}
		select {
		case <-progressed:
		case <-ask.C:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// snapshot copies the record as a Snapshot. Callers hold mu.
func (f *Follower) snapshot() *Snapshot {
	snap := &Snapshot{Revision: f.rev, Changes: f.changes, Units: make([]Record, 0, len(f.units)),
		Schedule: make(map[string]string, len(f.units)), Legacy: make(map[string]bool, len(f.schedule)),
		Files: make(map[string]string, len(f.files)), Moves: make(map[string]string, len(f.moves)),
		Machines: make(map[string]MachineRecord, len(f.machines))}
	for c, text := range f.files {
		snap.Files[c] = text
	}
	for name, m := range f.schedule {
		snap.Schedule[name] = m
		snap.Legacy[name] = true
	}
	for _, r := range f.units {
		snap.addUnit(f.keys, "", r)
	}
	for _, r := range f.ranges {
		snap.addRange(f.keys, r)
	}
	for name, m := range f.moves {
		snap.Moves[name] = m
	}
	for id, m := range f.machines {
		snap.Machines[id] = m
	}
	if f.config != nil {
		snap.SchedulerConfig = append([]byte(nil), f.config...)
	}
	snap.Versions = make(map[string]VersionLog, len(f.versions))
	for name, l := range f.versions {
		snap.Versions[name] = l // never changed in place
		snap.VersionIndex = max(snap.VersionIndex, l.Current().Index)
	}
	snap.VersionIndex = max(snap.VersionIndex, f.vindex)
	snap.Deployments = make(map[string]Deployment, len(f.deploys))
	for name, d := range f.deploys {
		snap.Deployments[name] = d
	}
	if f.vconfig != nil {
		snap.VersionsConfig = append([]byte(nil), f.vconfig...)
	}
	for key := range f.bad {
		snap.Skipped = append(snap.Skipped, key)
	}
	snap.sortRanges()
	return snap
}
