// Package driver defines how an agent runs units on its machine.
//
// A Driver owns the processes (or simulated units) of one machine. The agent
// tells it which units to load, start, stop and unload; the driver reports
// every change of a unit's state through the Notify function given when it was
// made. Start and Stop return once the action has begun; its outcome arrives
// through Notify.
package driver

import (
	"context"
	"errors"
	"io"

	"github.com/flotilla/flotilla/internal/monotime"
	"github.com/flotilla/flotilla/internal/unit"
)

// ErrUnknownUnit is returned for a unit the driver has not loaded.
var ErrUnknownUnit = errors.New("driver: unknown unit")

// Notify receives every state change of a unit. It must not block for long
// and must not call back into the driver.
type Notify func(unit.Status)

// Driver runs units on one machine. All methods are safe for concurrent use.
type Driver interface {
	// Load makes the unit known, in state loaded/inactive/dead. Loading a unit
	// already loaded with another hash replaces its definition; a running
	// unit keeps running with the old definition until it is restarted.
	Load(f *unit.File) error
	// Start begins starting a loaded unit; a running unit is left alone.
	Start(name string) error
	// Stop begins stopping a unit; a stopped unit is left alone.
	Stop(name string) error
	// Unload stops the unit if it runs, waits for it to stop, and forgets it.
	Unload(ctx context.Context, name string) error
	// States returns the current status of every loaded unit.
	States() []unit.Status
	// Journal writes the last lines of the unit's log to w (all when lines<0)
	// and, when follow is set, keeps writing new lines until ctx is done.
	Journal(ctx context.Context, name string, lines int, follow bool, w io.Writer) error
	// Close stops every unit (waiting for each up to its stop timeout) and
	// releases the driver's resources.
	Close(ctx context.Context) error
}

// BatchLoader is implemented by drivers that load many units at once for
// much less than loading each alone: the systemd driver has systemd read
// its unit directory once for a batch, not once per unit. LoadBatch loads
// each file as Load would and returns one error per file, in order (nil:
// that unit is loaded); a unit that cannot be loaded fails alone. The
// agent hands a reconciliation pass's loads to LoadBatch together, and
// then issues that pass's starts and stops from several goroutines at
// once, so that a driver that waits on another process for each (a D-Bus
// round trip to systemd) has several in flight.
type BatchLoader interface {
	LoadBatch(files []*unit.File) []error
}

// Killer is implemented by drivers that can end a unit at once, skipping its
// stop commands and stop timeout, and forget it. An agent cut off from the
// leader kills its units this way: they are being started elsewhere, and a
// graceful stop of TimeoutStopSec= would let them run twice meanwhile.
type Killer interface {
	Kill(ctx context.Context, name string) error
}

// Fencer is implemented by drivers that can kill units at a deadline on their
// own, without the agent's help. The agent fences its Singleton=true units:
// each time it hears from a current leader it moves their deadline to when
// that word was sent plus LostAfter=. The driver must kill a unit whose
// deadline passes (as Kill does, but leaving it loaded, inactive/dead, with
// a Status.Message saying it was cut off) even when the agent's process is
// frozen: the deadline is on the machine's monotonic clock, which the
// supervisor of the units reads for itself.
type Fencer interface {
	// Fence sets the deadline of exactly the named units: every other unit
	// has none. A deadline already passed kills them at once. A unit started
	// later keeps the deadline it was given (it is armed before Start).
	Fence(deadline monotime.Time, names []string) error
}

// Detacher is implemented by drivers whose units outlive the daemon: Detach
// releases the driver's resources in this process and leaves every unit
// running, to be adopted by the next driver made on the same state (whose
// States then reports them). Close, by contrast, stops them.
type Detacher interface {
	Detach(ctx context.Context) error
}

// LogRemover is implemented by drivers that keep units' logs after they are
// unloaded: RemoveLog removes the log of a unit that is not loaded. The
// agent calls it once it has unloaded a unit the leader says was destroyed
// (a unit that stops, or moves to another machine, keeps its log here).
type LogRemover interface {
	RemoveLog(name string) error
}

// StartRecorder is implemented by drivers on which a unit may run without
// the agent having started it: systemd starts the unit a socket, timer or
// path triggers, and the units another one requires. Started reports
// whether the agent's last Start of the unit was not undone by a Stop (or
// an unload); known is false when the driver keeps no such record of the
// unit (a Mux's other drivers). An agent adopting the driver's units takes
// those started as launched, and the others as loaded, whatever they are
// doing, so it does not stop a socket-activated service the leader wants
// loaded.
type StartRecorder interface {
	Started(name string) (started, known bool)
}

// Checker is implemented by drivers that may run units' [X-Check] health
// checks themselves, where they outlive the agent's process (the exec
// driver in the machine's supervisor process). RunsChecks reports whether
// the driver runs those of the unit, and OnUnhealthy=restart; it then
// reports their outcome in Status.Health (also "unhealthy" through a
// restart for being unhealthy), and the agent does not run them. It must
// not block.
type Checker interface {
	RunsChecks(name string) bool
}
