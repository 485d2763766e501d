package engine

import (
	"sync"
	"time"

	"github.com/flotilla/flotilla/proto/agentpb"
)

// The agents' reports reach the leader's state through an inbox, not by
// taking the term's lock from each stream's goroutine. A reconcile pass
// holds that lock (for reading) while it decides over every unit: seconds
// at a million units. A stream goroutine waiting for it stops reading its
// stream, so the agent's later heartbeats wait behind its report and the
// leader, seeing nothing, counts the machine as unheard: at 10,000 agents
// every machine was found lost 60 s after connecting. So a report is
// converted where it arrives, merged into its stream's inbox (a unit's
// latest status wins), and applied by one goroutine (inboxLoop) and by the
// loop at the start of each pass, whichever takes the lock first.

// inbox holds one stream's reports not yet applied, in their stored form
// (states.go): while a stop of a million units was applied, every agent's
// reports waited here, 200 bytes a unit as agentStatus values.
type inbox struct {
	mu       sync.Mutex
	statuses map[string]storedStatus // observed: when it arrived
	removed  map[string]struct{}
	lastAt   time.Time
}

// put merges a report received at now.
func (in *inbox) put(machine string, u *agentpb.StatusUpdate, now time.Time) {
	names := make([]string, len(u.Units))
	converted := make([]storedStatus, len(u.Units))
	for i, s := range u.Units {
		st := fromProto(machine, s)
		st.Observed = now
		names[i], converted[i] = st.Name, store(st)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.statuses == nil {
		in.statuses = make(map[string]storedStatus, len(converted))
	}
	for i, st := range converted {
		in.statuses[names[i]] = st
		delete(in.removed, names[i])
	}
	for _, name := range u.Removed {
		if in.removed == nil {
			in.removed = map[string]struct{}{}
		}
		in.removed[name] = struct{}{}
		delete(in.statuses, name)
	}
	in.lastAt = now
}

// take empties the inbox and returns what it held.
func (in *inbox) take() (statuses map[string]storedStatus, removed map[string]struct{}, at time.Time) {
	in.mu.Lock()
	defer in.mu.Unlock()
	statuses, removed, at = in.statuses, in.removed, in.lastAt
	in.statuses, in.removed = nil, nil
	return statuses, removed, at
}

// inboxes are the streams whose inbox holds reports.
type inboxes struct {
	mu    sync.Mutex
	conns map[*agentConn]struct{}
	wake  chan struct{}
}

func newInboxes() *inboxes {
	return &inboxes{conns: map[*agentConn]struct{}{}, wake: make(chan struct{}, 1)}
}

func (ib *inboxes) mark(c *agentConn) {
	ib.mu.Lock()
	ib.conns[c] = struct{}{}
	ib.mu.Unlock()
	select {
	case ib.wake <- struct{}{}:
	default:
	}
}

func (ib *inboxes) takeAll() map[*agentConn]struct{} {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	if len(ib.conns) == 0 {
		return nil
	}
	conns := ib.conns
	ib.conns = map[*agentConn]struct{}{}
	return conns
}

// report queues an agent's status update for the leader's state.
func (t *term) report(conn *agentConn, u *agentpb.StatusUpdate) {
	conn.in.put(conn.machine, u, t.e.cfg.Now())
	t.inbox.mark(conn)
}

// inboxLoop applies the streams' reports as they come, until the term ends.
func (t *term) inboxLoop() {
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-t.inbox.wake:
		}
		t.mu.Lock()
		t.applyInboxLocked()
		t.mu.Unlock()
	}
}

// applyInboxLocked applies every report queued so far. Reports of a stream
// that is no longer its machine's (replaced, or the machine left) are
// dropped: the newer stream's Hello said the machine's states. Callers
// hold mu for writing.
func (t *term) applyInboxLocked() {
	for conn := range t.inbox.takeAll() {
		statuses, removed, at := conn.in.take()
		m := t.machines[conn.machine]
		if m == nil || m.conn != conn || (len(statuses) == 0 && len(removed) == 0) {
			continue
		}
		m.lastSeen = latest(m.lastSeen, at)
		for name, st := range statuses {
			s := st.status(m.info.ID, name)
			t.observe(m, s, s.Observed)
		}
		for name := range removed {
			if s, ok := t.dropState(m, name); ok {
				t.stateEvent(conn.machine, s, true)
				t.drained(conn.machine, name, false)
			}
		}
	}
}
