package engine

import (
	"errors"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/flotilla/flotilla/proto/agentpb"
)

// input is an event from outside the loop that changes the leader's
// decision state: an agent's stream attaching, detaching or leaving, what
// the etcd registry's watch saw. Its goroutine queues it (inboxes.put),
// and only the loop applies it (applyInputs). Each carries the time it was
// seen at.
type input interface {
	apply(t *term)
}

// errTermOver answers an input the loop will not apply: the term ended.
var errTermOver = errors.New("leadership term ended")

// attachInput registers a machine whose agent is reachable (a stream's
// Hello in the gRPC mode, a presence key in the etcd mode) with the states
// it reports, and has the loop send it its full desired set. A Hello is
// checked first (check: the machine's name held by another live daemon,
// nameInUse) and answered on res.
type attachInput struct {
	pm    *agentpb.Machine
	units []*agentpb.UnitStatus
	conn  *agentConn
	at    time.Time
	check bool
	res   chan error // buffered; nil when nobody waits
}

func (in *attachInput) apply(t *term) {
	if in.check {
		if err := t.nameInUse(in.pm, in.at); err != nil {
			in.res <- err
			return
		}
	}
	t.attachLocked(in.pm, in.units, in.conn, in.at)
	t.poke()
	if in.res != nil {
		in.res <- nil
	}
}

// detachInput unregisters a machine whose stream ended (or, lost, whose
// presence lease expired: it has been unheard for its TTL already, so its
// units may move after the grace), unless a newer stream replaced it.
type detachInput struct {
	conn *agentConn
	lost bool
	at   time.Time
}

func (in *detachInput) apply(t *term) {
	m := t.machines[in.conn.machine]
	if m == nil || m.conn != in.conn {
		return
	}
	if in.lost {
		m.lastSeen = in.at.Add(-t.e.cfg.AgentTTL)
	} else {
		// The machine's cut-off time counts from when it was last heard,
		// not from when the broken stream was noticed (seconds later).
		m.lastSeen, m.lastSent = m.heardAt(), m.sentAt()
	}
	m.conn = nil
	t.machineEvent(in.conn.machine, false)
	t.poke()
}

// leaveInput unregisters a machine whose agent left the cluster (it
// stopped its units first): its unit states are purged, and the next pass
// places its units elsewhere at once and forgets the machine.
type leaveInput struct{ conn *agentConn }

func (in *leaveInput) apply(t *term) {
	conn := in.conn
	if m := t.machines[conn.machine]; m != nil && m.conn == conn {
		m.lastSeen, m.lastSent = m.heardAt(), m.sentAt()
		m.conn = nil
		m.left = true
		var names []string
		eachState(m, func(name string, _ storedStatus) { names = append(names, name) })
		for _, name := range names {
			s, _ := t.dropState(m, name)
			t.stateEvent(conn.machine, s, true)
			t.drained(conn.machine, name, false)
		}
		t.machineEvent(conn.machine, false)
	}
	t.poke()
}

// machineInput is new information from a present machine (the etcd
// registry: its presence key rewritten under the same lease).
type machineInput struct {
	pm *agentpb.Machine
	at time.Time
}

func (in *machineInput) apply(t *term) {
	if m := t.machines[in.pm.Id]; m != nil {
		m.info = machineInfo(in.pm)
		m.lastSeen = in.at
	}
	t.poke()
}

// etcdStatesInput is what the etcd registry's watch of the agents' states
// saw, of present machines.
type etcdStatesInput struct {
	evs []*clientv3.Event
	at  time.Time
}

func (in *etcdStatesInput) apply(t *term) {
	for _, ev := range in.evs {
		machine, name, _ := strings.Cut(strings.TrimPrefix(string(ev.Kv.Key), t.keys.States()), "/")
		m := t.machines[machine]
		if m == nil {
			continue
		}
		m.lastSeen = in.at
		if ev.Type == clientv3.EventTypeDelete {
			if s, ok := t.dropState(m, name); ok {
				t.stateEvent(machine, s, true)
				t.drained(machine, name, false)
			}
			continue
		}
		var s agentpb.UnitStatus
		if proto.Unmarshal(ev.Kv.Value, &s) == nil {
			t.observe(m, fromProto(machine, &s), in.at)
		}
	}
}

// resendInput has the loop queue a machine's full desired set again (its
// assignments' write to etcd failed).
type resendInput struct{ conn *agentConn }

func (in *resendInput) apply(t *term) {
	if m := t.machines[in.conn.machine]; m != nil && m.conn == in.conn {
		m.needFull = true
	}
	t.poke()
}

// readInput is a read that needs the decision state itself, not a view
// of it (a unit, its versions, the deployments): the loop runs fn between
// its steps and while it waits for etcd (serveReads), never in the middle
// of a change, so that the read sees every write acknowledged before it
// began.
type readInput struct {
	fn   func()
	done chan struct{}
}

// onLoop has the loop run fn (readInput) and returns once it has;
// ErrNotLeader if the term ends first.
func (t *term) onLoop(fn func()) error {
	in := &readInput{fn: fn, done: make(chan struct{})}
	t.inbox.read(in)
	select {
	case <-in.done:
		return nil
	case <-t.ctx.Done():
		return ErrNotLeader
	}
}

// readOnLoop returns what read returns, run on the loop (onLoop).
func readOnLoop[T any](t *term, read func() (T, error)) (T, error) {
	var (
		out T
		err error
	)
	if lerr := t.onLoop(func() { out, err = read() }); lerr != nil {
		var zero T
		return zero, lerr
	}
	return out, err
}
