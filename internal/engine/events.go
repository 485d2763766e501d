package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
)

// eventLogSize is how many events the leader keeps for clients resuming a
// stream (Last-Event-ID); an older position gets a reset event.
const eventLogSize = 1 << 16

// maxReaderLag is how far a reader may fall behind the newest event before
// it is dropped (ErrSlowReader): half the log, so that the position it was
// dropped at can still be resumed from. A reader that resumed further
// behind may stay as far behind as it started.
const maxReaderLag = eventLogSize / 2

// eventFlushEvery is the shortest time between two pages of events: the
// events of a burst are encoded together and wake each reader once.
const eventFlushEvery = 10 * time.Millisecond

// ErrSlowReader is returned to a reader of the event stream that fell more
// than maxReaderLag events behind: it is dropped rather than waited for, and
// may resume from its last position.
var ErrSlowReader = errors.New("engine: the event reader fell too far behind")

// eventLog holds the term's recent events, each encoded once as a
// Server-Sent Event and shared by every reader. The engine never waits for
// a reader:
//
//  1. An append (on the loop) writes the event into a chunk behind
//     appendMu, a lock only the log's encoder also takes, to take what
//     was written, and wakes the encoder. It formats nothing.
//  2. The log's goroutine (encode) moves the list, at most every
//     eventFlushEvery, into a page it links after the last one, and
//     closes that page's ready channel, which wakes the readers that
//     reached its end.
//  3. A reader (EventCursor) follows the pages without any lock. The first
//     reader to reach a page formats its events (ID, time, JSON, the SSE
//     frame), once for all; every reader writes those bytes as they are,
//     and waits on its page's ready channel. Only finding the page a
//     Last-Event-ID resumes in takes winMu, for reading.
//
// A reader that falls more than maxReaderLag behind is dropped
// (ErrSlowReader), at a position it can resume from: no reader holds
// events alive beyond the log's own eventLogSize.
type eventLog struct {
	term int64
	done <-chan struct{} // the term's end

	appendMu sync.Mutex
	full     [][]loggedEvent // chunks filled since the encoder last took them
	pending  []loggedEvent   // the chunk being filled (what is left of it)
	kick     chan struct{}   // cap 1: the encoder has work

	winMu     sync.RWMutex
	window    []*eventPage // the pages holding the last eventLogSize events, oldest first
	tail      *eventPage   // the newest page (also window's last)
	published atomic.Uint64
}

// loggedEvent is an event as the log keeps it until a reader formats it:
// only the fields its type uses, 128 bytes where an apiv1.Event takes 264.
// A million units starting log three or four million events, each through
// the pending list and a page.
type loggedEvent struct {
	at, rev    int64 // Unix nanoseconds; etcd revision
	kind       eventKind
	removed    bool
	global     bool  // unit
	version    int32 // deployment
	done       int32 // deployment
	unit       string
	machine    string
	a, b, c, d string // unit: hash, desired state, reason; state: load, active, sub, health; deployment: status, message
}

type eventKind uint8

const (
	unitKind eventKind = iota
	stateKind
	machineKind
	deploymentKind
)

var eventKinds = [...]string{unitKind: "unit", stateKind: "state", machineKind: "machine", deploymentKind: "deployment"}

// event is le as the API shows it, without ID and Time.
func (le *loggedEvent) event() apiv1.Event {
	ev := apiv1.Event{Type: eventKinds[le.kind], Revision: le.rev, Unit: le.unit, Machine: le.machine, Removed: le.removed}
	switch le.kind {
	case unitKind:
		ev.Hash, ev.DesiredState, ev.Reason, ev.Global = le.a, le.b, le.c, le.global
	case stateKind:
		ev.Load, ev.Active, ev.Sub, ev.Health = le.a, le.b, le.c, le.d
	case deploymentKind:
		ev.Status, ev.Message, ev.Version, ev.Done = le.a, le.b, int(le.version), int(le.done)
	}
	return ev
}

// eventPage is a run of consecutive events; immutable once linked, but
// for next, which is set once, before ready is closed. Its events are
// encoded when a reader first reaches it, once for every reader: a leader
// no one follows formats nothing.
type eventPage struct {
	first uint64 // sequence number of its first event (the first of a term is 1)
	evs   []loggedEvent
	next  *eventPage
	ready chan struct{}

	once sync.Once
	data []byte // the events' SSE frames, one after another
	ends []int  // ends[i]: where event first+i ends in data
}

func (p *eventPage) end() uint64 { return p.first + uint64(len(p.evs)) }

// encoded returns the page's SSE frames and where each ends, encoding them
// on first use.
func (p *eventPage) encoded(l *eventLog) ([]byte, []int) {
	p.once.Do(func() {
		p.ends = make([]int, 0, len(p.evs))
		for i := range p.evs {
			le := &p.evs[i]
			ev := le.event()
			ev.ID = l.id(p.first + uint64(i))
			ev.Time = time.Unix(0, le.at).UTC().Format(time.RFC3339Nano)
			p.data = AppendSSE(p.data, ev)
			p.ends = append(p.ends, len(p.data))
		}
	})
	return p.data, p.ends
}

func newEventLog(term int64, done <-chan struct{}) *eventLog {
	first := &eventPage{first: 1, ready: make(chan struct{})}
	l := &eventLog{term: term, done: done, kick: make(chan struct{}, 1), window: []*eventPage{first}, tail: first}
	go l.encode()
	return l
}

// eventChunk is how many events the log allocates room for at once. Events
// are written into chunks that never grow: a list grown by appends would
// allocate and copy twice what it holds, three or four million events when
// a million units start.
const eventChunk = 1024

// append records le, which happened at at (the loop's clock); its ID is
// set when it is encoded.
func (l *eventLog) append(le loggedEvent, at time.Time) {
	le.at = at.UnixNano()
	l.appendMu.Lock()
	if len(l.pending) == cap(l.pending) {
		if len(l.pending) > 0 {
			l.full = append(l.full, l.pending)
		}
		l.pending = make([]loggedEvent, 0, eventChunk)
	}
	l.pending = append(l.pending, le)
	l.appendMu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// encode moves appended events into pages until the term ends, a page at
// most every eventFlushEvery.
func (l *eventLog) encode() {
	for {
		select {
		case <-l.kick:
		case <-l.done:
			return
		}
		// A page a chunk, and one of the chunk being filled: what is
		// appended to it after goes past the page's end, and a page's
		// events never change.
		l.appendMu.Lock()
		pages := l.full
		if len(l.pending) > 0 {
			pages = append(pages, l.pending)
			l.pending = l.pending[len(l.pending):]
		}
		l.full = nil
		l.appendMu.Unlock()
		for _, evs := range pages {
			l.publish(evs)
		}
		select {
		case <-time.After(eventFlushEvery):
		case <-l.done:
			return
		}
	}
}

// publish links a page of evs after the tail and wakes its readers.
func (l *eventLog) publish(evs []loggedEvent) {
	prev := l.tail // only the encoder changes tail
	p := &eventPage{first: prev.end(), evs: evs, ready: make(chan struct{})}
	l.winMu.Lock()
	l.window = append(l.window, p)
	drop := 0
	for drop+1 < len(l.window) && p.end()-l.window[drop+1].first >= eventLogSize {
		drop++
	}
	if drop > 0 {
		clear(l.window[:drop])
		l.window = l.window[drop:]
	}
	l.tail = p
	l.winMu.Unlock()
	prev.next = p
	l.published.Store(p.end() - 1)
	close(prev.ready)
}

// AppendSSE appends ev as a Server-Sent Event to b.
func AppendSSE(b []byte, ev apiv1.Event) []byte {
	j, _ := json.Marshal(ev)
	b = append(b, "id: "...)
	b = append(b, ev.ID...)
	b = append(b, "\nevent: "...)
	b = append(b, ev.Type...)
	b = append(b, "\ndata: "...)
	b = append(b, j...)
	return append(b, "\n\n"...)
}

func (l *eventLog) id(seq uint64) string {
	return strconv.FormatInt(l.term, 10) + "." + strconv.FormatUint(seq, 10)
}

// subscribe returns a cursor after position id ("" = from now on). reset is
// true when id is of another term or too old: the client must read
// /v1/state again, and the cursor starts from now.
func (l *eventLog) subscribe(id string) (c *EventCursor, reset bool) {
	l.winMu.RLock()
	defer l.winMu.RUnlock()
	c = &EventCursor{log: l, page: l.tail, idx: len(l.tail.evs), maxLag: maxReaderLag}
	if id == "" {
		return c, false
	}
	term, seq, err := parseEventID(id)
	first := l.window[0].first
	if err != nil || term != l.term || seq >= l.tail.end() || seq+1 < first {
		return c, true
	}
	// The page holding seq+1, the first event the client has not seen.
	i := len(l.window) - 1
	for i > 0 && l.window[i].first > seq+1 {
		i--
	}
	c.page, c.idx = l.window[i], int(seq+1-l.window[i].first)
	c.maxLag = max(maxReaderLag, l.published.Load()-seq)
	return c, false
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

// EventCursor is one reader's position in the leader's event stream. It is
// used by one goroutine.
type EventCursor struct {
	log    *eventLog
	page   *eventPage
	idx    int    // the next event to read is page.first+idx
	maxLag uint64 // how many unread events drop it
}

// Pos is the ID of the last event read (the position to resume after).
func (c *EventCursor) Pos() string {
	return c.log.id(c.page.first + uint64(c.idx) - 1)
}

// Read returns the encoded events not read yet (Server-Sent Events, shared:
// the caller must not change them), or none; ErrSlowReader when the
// cursor fell more than maxReaderLag events behind, and ErrNotLeader once
// the term is over.
func (c *EventCursor) Read() ([]byte, error) {
	select {
	case <-c.log.done:
		return nil, ErrNotLeader
	default:
	}
	if c.idx == len(c.page.evs) {
		select {
		case <-c.page.ready:
			c.page, c.idx = c.page.next, 0
		default:
			return nil, nil
		}
	}
	if seq := c.page.first + uint64(c.idx); c.log.published.Load()+1-seq > c.maxLag {
		return nil, fmt.Errorf("%w: %d events behind; resume from %s", ErrSlowReader, c.log.published.Load()+1-seq, c.Pos())
	}
	data, ends := c.page.encoded(c.log)
	start := 0
	if c.idx > 0 {
		start = ends[c.idx-1]
	}
	c.idx = len(ends)
	return data[start:], nil
}

// More is closed when events after those read so far may be there.
func (c *EventCursor) More() <-chan struct{} {
	if c.idx < len(c.page.evs) {
		return closed
	}
	return c.page.ready
}

// Done is closed when the term ends.
func (c *EventCursor) Done() <-chan struct{} { return c.log.done }

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Subscribe returns a cursor in the event stream after position id (see
// apiv1.Event; "" for from now on). reset says the position is unknown to
// this leader (another's, or too old): re-read /v1/state and follow from
// the cursor, which starts from now.
func (e *Engine) Subscribe(id string) (c *EventCursor, reset bool, err error) {
	t, err := e.reader()
	if err != nil {
		return nil, false, err
	}
	c, reset = t.events.subscribe(id)
	return c, reset, nil
}

// Done is closed when the current term ends (nil when not leading).
func (e *Engine) TermDone() <-chan struct{} {
	if t := e.leader(); t != nil {
		return t.ctx.Done()
	}
	return nil
}

// unitEvent records a change of a unit's desired state, file or placement.
// It runs on the loop.
func (t *term) unitEvent(name string, rec *unitRec) {
	le := loggedEvent{kind: unitKind, unit: name, rev: t.committer.Revision()}
	if rec == nil {
		le.removed = true
	} else {
		le.a, le.b, le.machine, le.c, le.global = rec.file.Hash, string(rec.desired()), rec.machine, rec.reason, rec.file.Fleet.Global
	}
	t.events.append(le, t.now)
}

// stateEvent records a change of a unit's current state on a machine.
func (t *term) stateEvent(machine string, s agentStatus, removed bool) {
	t.viewChanged(s.Name)
	t.events.append(loggedEvent{kind: stateKind, unit: s.Name, machine: machine, a: s.Load, b: s.Active, c: s.Sub,
		d: s.Health, removed: removed, rev: t.committer.Revision()}, t.now)
}

// machineEvent records a machine coming or going.
func (t *term) machineEvent(id string, up bool) {
	t.events.append(loggedEvent{kind: machineKind, machine: id, removed: !up, rev: t.committer.Revision()}, t.now)
}
