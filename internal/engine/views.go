package engine

import (
	"maps"

	apiv1 "github.com/flotilla/flotilla/api"
)

// loopViews are small views of the decision state that the loop publishes
// for readers: made by the loop from its state, immutable once published,
// and loaded by readers without a lock (Scheduler, KeepVersions). The loop
// publishes them after a round of writes is applied and after a pass; the
// cluster state (publish.go) is the other published value.
type loopViews struct {
	// writes is how many write rounds were acknowledged when they were
	// made: a reader that began after a write returned waits for views
	// that show it (readViews), as etcd's reads wait for its applied index.
	writes uint64
	// changes is t.changes when they were made.
	changes   uint64
	scheduler apiv1.Scheduler
	keep      int
	next      chan struct{} // closed once newer views are published
}

// publishViews makes and publishes the views. It runs on the loop (or on
// the term's goroutine before the loop starts).
func (t *term) publishViews() {
	s := optionsToAPI(t.options)
	s.Shares = maps.Clone(t.shares)
	v := &loopViews{writes: t.acked.Load(), changes: t.changes.Load(), scheduler: s,
		keep: t.versions.keep, next: make(chan struct{})}
	if old := t.published.Swap(v); old != nil {
		close(old.next)
	}
}

// publishViewsIfChanged publishes the views if anything readers could see
// changed since they were made. It runs on the loop.
func (t *term) publishViewsIfChanged() {
	if v := t.published.Load(); v == nil || v.changes != t.changes.Load() || v.writes != t.acked.Load() {
		t.publishViews()
	}
}

// readViews returns the latest views, once they show every write acknowledged
// before the call; ErrNotLeader if the term ends first.
func (t *term) readViews() (*loopViews, error) {
	written := t.acked.Load()
	for {
		v := t.published.Load()
		if v != nil && v.writes >= written {
			return v, nil
		}
		var next <-chan struct{}
		if v != nil {
			next = v.next
		}
		select {
		case <-next:
		case <-t.ctx.Done():
			return nil, ErrNotLeader
		}
	}
}
