package fleetapi

import (
	"sync"
	"time"

	"github.com/flotilla/flotilla/internal/unit"
)

// trailFor is how long a launched unit stopped through this API may still
// be shown launched, once (trail).
const trailFor = 5 * time.Second

// trail makes a unit's currentState trail its stop by one read, as fleet's
// did by an agent's reconcile interval, for fleetctl's restart: it sets
// the unit's desiredState to loaded and then waits for currentState to
// read launched (its setUnitStateAndWait always waits for launched) before
// it sets launched. Flotilla's agent has stopped the unit before fleetctl
// looks, so without the trail restart waits for ever.
//
// A launched unit that a PUT sets to loaded is remembered; the first GET
// of the unit that finds it stopped (loaded, still desired loaded) within
// trailFor shows it launched, once, and forgets it. fleetctl restart then
// sets launched and the unit starts again (a new process); fleetctl stop,
// which waits for loaded, reads loaded one poll (250 ms) later. Lists,
// /v1 and the CLI always show the unit as it is.
type trail struct {
	mu    sync.Mutex
	since map[string]time.Time // by unit: when its stop was asked
}

// stopped remembers that a launched unit was set to loaded.
func (t *trail) stopped(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	for n, at := range t.since {
		if now.Sub(at) > trailFor {
			delete(t.since, n)
		}
	}
	t.since[name] = now
}

// take reports whether a GET of a unit in the given states shows it
// launched: the first read after its stop, within trailFor.
func (t *trail) take(name, desired, current string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.since[name]
	if !ok {
		return false
	}
	if desired != string(unit.Loaded) || time.Since(at) > trailFor {
		delete(t.since, name) // started again, or too late
		return false
	}
	if current == string(unit.Launched) {
		return false // not stopped yet: shown as it is
	}
	delete(t.since, name)
	return true
}
