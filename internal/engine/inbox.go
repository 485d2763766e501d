package engine

import (
	"sync"
	"time"

	"github.com/flotilla/flotilla/proto/agentpb"
)

// Everything that changes the leader's decision state from outside the
// loop reaches it as an input the loop applies (one owner: only the loop
// goroutine changes that state). An agent's reports are converted where
// they arrive and merged into its stream's inbox (a unit's latest status
// wins); a stream's attach, detach and leave, and what the etcd registry's
// watch sees, are typed inputs (inputs.go) queued beside them. The loop
// applies both whenever it wakes, at the start of each pass and between a
// pass's slices (applyInputs). A stream's goroutine never waits for the
// loop to report: while a pass decides (seconds at a million units), its
// agent's later heartbeats would wait behind its report and the leader,
// seeing nothing, would count the machine as unheard (at 10,000 agents
// every machine was found lost 60 s after connecting).

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

// inboxes are the streams whose inbox holds reports, and the other
// inputs queued for the loop, in their order; wake tells the loop.
// Reads that need the decision state (readInput) have their own queue
// and wake: the loop answers them also while it waits for etcd.
type inboxes struct {
	mu       sync.Mutex
	conns    map[*agentConn]struct{}
	inputs   []input
	wake     chan struct{}
	reads    []*readInput
	readWake chan struct{}
}

func newInboxes() *inboxes {
	return &inboxes{conns: map[*agentConn]struct{}{}, wake: make(chan struct{}, 1), readWake: make(chan struct{}, 1)}
}

// read queues a read for the loop.
func (ib *inboxes) read(in *readInput) {
	ib.mu.Lock()
	ib.reads = append(ib.reads, in)
	ib.mu.Unlock()
	select {
	case ib.readWake <- struct{}{}:
	default:
	}
}

func (ib *inboxes) takeReads() []*readInput {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	ins := ib.reads
	ib.reads = nil
	return ins
}

func (ib *inboxes) mark(c *agentConn) {
	ib.mu.Lock()
	ib.conns[c] = struct{}{}
	ib.mu.Unlock()
	ib.signal()
}

// put queues an input for the loop.
func (ib *inboxes) put(in input) {
	ib.mu.Lock()
	ib.inputs = append(ib.inputs, in)
	ib.mu.Unlock()
	ib.signal()
}

func (ib *inboxes) signal() {
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

// takeInputs returns the inputs queued, oldest first.
func (ib *inboxes) takeInputs() []input {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	ins := ib.inputs
	ib.inputs = nil
	return ins
}

// report queues an agent's status update for the leader's state.
func (t *term) report(conn *agentConn, u *agentpb.StatusUpdate) {
	conn.in.put(conn.machine, u, t.e.cfg.Now())
	t.inbox.mark(conn)
}

// applyInputs applies the reports and inputs queued so far: the reports
// first, since a stream's reports came before its detach or leave (and
// after its attach, which its Hello waited for). It runs on the loop.
func (t *term) applyInputs() {
	t.applyInboxLocked()
	for _, in := range t.inbox.takeInputs() {
		in.apply(t)
	}
	t.serveReads()
}

// serveReads answers the reads queued. It runs on the loop, between its
// steps or while it waits for etcd (serveUntil).
func (t *term) serveReads() {
	for _, in := range t.inbox.takeReads() {
		in.fn()
		close(in.done)
	}
}

// serveUntil answers reads until done is closed: the loop waits so for
// etcd (the driver's write), and reads keep answering from memory
// meanwhile.
func (t *term) serveUntil(done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case <-t.inbox.readWake:
			t.serveReads()
		}
	}
}

// applyInboxLocked applies every report queued so far. Reports of a stream
// that is no longer its machine's (replaced, or the machine left) are
// dropped: the newer stream's Hello said the machine's states. It runs on
// the loop (applyInputs).
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
