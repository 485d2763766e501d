package supervisor

import (
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/flotilla/flotilla/internal/unit"
)

// watcherBuffer is how many events a watcher may fall behind before it is
// cut off (and watches again from a new snapshot).
const watcherBuffer = 8192

// hub fans the driver's notifications out to the watchers. It keeps the
// last status of every loaded unit, so that a watcher's snapshot and the
// events after it are consistent: both are taken under one lock.
type hub struct {
	mu       sync.Mutex
	states   map[string]unit.Status
	watchers map[*watcher]bool
}

// hubEvent is a unit's new status, or its removal (removed set).
type hubEvent struct {
	st      *unit.Status
	removed string
}

type watcher struct {
	ch   chan hubEvent
	cut  chan struct{} // closed when the watcher fell behind
	gone bool
}

func newHub() *hub {
	return &hub{states: make(map[string]unit.Status), watchers: make(map[*watcher]bool)}
}

// notify is the driver's Notify.
func (h *hub) notify(st unit.Status) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.states[st.Name] = st
	h.send(hubEvent{st: &st})
}

// unloaded is the driver's Unloaded.
func (h *hub) unloaded(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.states, name)
	h.send(hubEvent{removed: name})
}

// send hands ev to every watcher without blocking; one whose buffer is full
// is cut off. h.mu is held.
func (h *hub) send(ev hubEvent) {
	for w := range h.watchers {
		select {
		case w.ch <- ev:
		default:
			if !w.gone {
				w.gone = true
				close(w.cut)
			}
			delete(h.watchers, w)
		}
	}
}

// subscribe returns the status of every loaded unit, sorted by name, and a
// watcher that receives every change after it.
func (h *hub) subscribe() ([]unit.Status, *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := &watcher{ch: make(chan hubEvent, watcherBuffer), cut: make(chan struct{})}
	h.watchers[w] = true
	snap := slices.SortedFunc(maps.Values(h.states), func(a, b unit.Status) int { return strings.Compare(a.Name, b.Name) })
	return snap, w
}

func (h *hub) unsubscribe(w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.watchers, w)
}
