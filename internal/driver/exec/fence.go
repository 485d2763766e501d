package execdriver

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/flotilla/flotilla/internal/driver"
	"github.com/flotilla/flotilla/internal/driver/service"
	"github.com/flotilla/flotilla/internal/monotime"
)

// ErrFenced is returned by Start for a unit whose fence deadline has passed:
// it may not run until a later Fence moves its deadline on.
var ErrFenced = errors.New("execdriver: unit is fenced: its LostAfter= deadline has passed")

var _ driver.Fencer = (*Driver)(nil)

// fence is the driver's one deadline and the units it applies to.
type fence struct {
	mu       sync.Mutex
	gen      uint64 // bumped by every Fence, so a stale timer does nothing
	deadline monotime.Time
	names    map[string]bool
	expired  bool // the deadline has passed: the units were killed
	timer    *time.Timer
}

// Fence sets the deadline of exactly the named units (driver.Fencer): when
// the machine's monotonic clock reaches it, each of them that runs is
// SIGKILLed with all its process groups (whatever its KillMode=, and
// without ExecStop= or ExecStopPost=) and left loaded, inactive/dead, with
// Result "fenced"; Start then refuses them with ErrFenced until a later
// Fence leaves them out or moves the deadline on. A deadline already passed
// kills at once; a zero deadline or no names clears the fence. The driver's
// own timer does the killing, so it happens on time whatever its caller is
// doing.
func (d *Driver) Fence(deadline monotime.Time, names []string) error {
	for _, n := range names {
		if err := service.CheckName(n); err != nil {
			return fmt.Errorf("fence: %w", err)
		}
	}
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return fmt.Errorf("fence: %w", ErrClosed)
	}
	f := &d.fence
	f.mu.Lock()
	f.gen++
	if f.timer != nil {
		f.timer.Stop()
		f.timer = nil
	}
	f.deadline, f.expired = deadline, false
	f.names = make(map[string]bool, len(names))
	for _, n := range names {
		f.names[n] = true
	}
	if deadline == 0 || len(names) == 0 {
		f.names = nil
		f.mu.Unlock()
		return nil
	}
	d.log.Debug("fence set", "units", len(names), "in", monotime.Until(deadline))
	d.armFence(f.gen)
	f.mu.Unlock()
	return nil
}

// armFence kills the fenced units if the deadline has passed, or sets the
// timer for it. f.mu is held.
func (d *Driver) armFence(gen uint64) {
	f := &d.fence
	if wait := monotime.Until(f.deadline); wait > 0 {
		f.timer = time.AfterFunc(wait, func() { d.fenceDue(gen) })
		return
	}
	f.expired = true
	names := slices.Sorted(maps.Keys(f.names))
	go d.killFenced(names)
}

// fenceDue runs when the timer of fence generation gen fires.
func (d *Driver) fenceDue(gen uint64) {
	f := &d.fence
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gen != gen || f.expired {
		return // replaced meanwhile
	}
	d.armFence(gen) // re-arms should the timer have fired early
}

// killFenced kills the named units that run.
func (d *Driver) killFenced(names []string) {
	d.log.Warn("fence deadline passed; killing units", "units", len(names))
	for _, n := range names {
		if s, err := d.lookup(n); err == nil {
			s.call(request{kind: reqFence})
		}
	}
}

// fenced reports whether the unit's fence deadline has passed.
func (d *Driver) fenced(name string) bool {
	f := &d.fence
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.expired && f.names[name]
}

// stopFence stops the fence's timer (Close).
func (d *Driver) stopFence() {
	f := &d.fence
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gen++
	if f.timer != nil {
		f.timer.Stop()
		f.timer = nil
	}
}
