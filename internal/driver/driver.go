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

// Killer is implemented by drivers that can end a unit at once, skipping its
// stop commands and stop timeout, and forget it. An agent cut off from the
// leader kills its units this way: they are being started elsewhere, and a
// graceful stop of TimeoutStopSec= would let them run twice meanwhile.
type Killer interface {
	Kill(ctx context.Context, name string) error
}
