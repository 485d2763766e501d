package engine

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
)

// eventLogSize is how many events the leader keeps for clients resuming a
// stream (Last-Event-ID); an older position gets a reset event.
const eventLogSize = 1 << 16

// eventLog is a ring of the term's recent events. Appends happen under the
// term's lock; readers take only the log's own lock. An append records the
// event and its time and nothing else: its ID and time are formatted when
// it is read, and waiters are woken only if there are any (a million units
// started are some five million events, and each used to cost two
// formatted strings and a channel).
type eventLog struct {
	term    int64
	mu      sync.Mutex
	ring    []loggedEvent
	next    uint64        // sequence number of the next event (first is 1)
	notify  chan struct{} // closed and replaced on an append once handed out
	waiting bool          // notify was handed out since it was made
}

type loggedEvent struct {
	ev apiv1.Event // without ID and Time
	at int64       // Unix nanoseconds
}

func newEventLog(term int64) *eventLog {
	return &eventLog{term: term, ring: make([]loggedEvent, eventLogSize), next: 1, notify: make(chan struct{})}
}

func (l *eventLog) append(ev apiv1.Event) {
	at := time.Now().UnixNano()
	l.mu.Lock()
	l.ring[l.next%eventLogSize] = loggedEvent{ev: ev, at: at}
	l.next++
	if l.waiting {
		close(l.notify)
		l.notify = make(chan struct{})
		l.waiting = false
	}
	l.mu.Unlock()
}

func (l *eventLog) id(seq uint64) string {
	return strconv.FormatInt(l.term, 10) + "." + strconv.FormatUint(seq, 10)
}

// since returns the events after position id ("" = from now on), the new
// position, and a channel closed when more arrive. reset is true when id is
// of another term or too old: the client must read /v1/state again.
func (l *eventLog) since(id string, max int) (evs []apiv1.Event, pos string, reset bool, more <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	from := l.next
	if id != "" {
		term, seq, err := parseEventID(id)
		switch {
		case err != nil || term != l.term || seq >= l.next:
			reset = true
		case l.next-seq > eventLogSize-1:
			reset = true
		default:
			from = seq + 1
		}
	}
	for s := from; s < l.next && len(evs) < max; s++ {
		le := l.ring[s%eventLogSize]
		ev := le.ev
		ev.ID = l.id(s)
		ev.Time = time.Unix(0, le.at).UTC().Format(time.RFC3339Nano)
		evs = append(evs, ev)
	}
	last := from - 1 + uint64(len(evs))
	l.waiting = true
	return evs, l.id(last), reset, l.notify
}

func parseEventID(id string) (int64, uint64, error) {
	a, b, ok := strings.Cut(id, ".")
	if !ok {
		return 0, 0, fmt.Errorf("event ID %q is not TERM.SEQ", id)
	}
	term, err := strconv.ParseInt(a, 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("event ID %q: %w", id, err)
	}
	seq, err := strconv.ParseUint(b, 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("event ID %q: %w", id, err)
	}
	return term, seq, nil
}

// Events returns the events after position id (see apiv1.Event), at most
// max, with the position to resume from and a channel closed when more
// arrive or the term ends. reset says the position is unknown to this
// leader: re-read /v1/state and follow from pos.
func (e *Engine) Events(id string, max int) (evs []apiv1.Event, pos string, reset bool, more <-chan struct{}, err error) {
	t, err := e.reader()
	if err != nil {
		return nil, "", false, nil, err
	}
	evs, pos, reset, more = t.events.since(id, max)
	return evs, pos, reset, more, nil
}

// Done is closed when the current term ends (nil when not leading).
func (e *Engine) TermDone() <-chan struct{} {
	if t := e.leader(); t != nil {
		return t.ctx.Done()
	}
	return nil
}

// unitEvent records a change of a unit's desired state, file or placement.
// Callers hold mu for writing.
func (t *term) unitEvent(name string, rec *unitRec) {
	ev := apiv1.Event{Type: "unit", Unit: name, Revision: t.committer.Revision()}
	if rec == nil {
		ev.Removed = true
	} else {
		ev.Hash, ev.DesiredState, ev.Machine, ev.Reason, ev.Global = rec.file.Hash, string(rec.desired()), rec.machine, rec.reason, rec.file.Fleet.Global
	}
	t.events.append(ev)
}

// stateEvent records a change of a unit's current state on a machine.
func (t *term) stateEvent(machine string, s agentStatus, removed bool) {
	t.viewChanged(s.Name)
	t.events.append(apiv1.Event{Type: "state", Unit: s.Name, Machine: machine, Load: s.Load, Active: s.Active, Sub: s.Sub,
		Removed: removed, Revision: t.committer.Revision()})
}

// machineEvent records a machine coming or going.
func (t *term) machineEvent(id string, up bool) {
	t.events.append(apiv1.Event{Type: "machine", Machine: id, Removed: !up, Revision: t.committer.Revision()})
}
