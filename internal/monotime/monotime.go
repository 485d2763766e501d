// Package monotime reads the system's monotonic clock (CLOCK_MONOTONIC) as
// one scale shared by every process of the machine.
//
// Go's time.Time carries a monotonic reading too, but only relative to its
// own process: a deadline computed by the agent cannot be handed to the
// supervisor as a time.Time. A monotime.Time can, and it cannot be moved by
// a change of the wall clock. The agent uses it to time when it last heard a
// leader and the supervisor to kill singleton units at their deadline, even
// while the agent's process is frozen.
package monotime

import (
	"time"

	"golang.org/x/sys/unix"
)

// Time is a reading of CLOCK_MONOTONIC, in nanoseconds since an arbitrary
// point fixed at boot. The zero Time means "unset".
type Time int64

// Now returns the current reading of the machine's monotonic clock.
func Now() Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		// CLOCK_MONOTONIC exists on every Linux this runs on; fall back to
		// the process's own monotonic clock rather than to zero.
		return Time(time.Since(processStart) + bootOffset)
	}
	return Time(ts.Nano())
}

var (
	processStart = time.Now()
	bootOffset   = time.Duration(1) // keeps a fallback reading non-zero
)

// Add returns t+d.
func (t Time) Add(d time.Duration) Time { return t + Time(d) }

// Sub returns t-u.
func (t Time) Sub(u Time) time.Duration { return time.Duration(t - u) }

// Before reports whether t is before u.
func (t Time) Before(u Time) bool { return t < u }

// Until returns how long until t, negative when t has passed.
func Until(t Time) time.Duration { return t.Sub(Now()) }

// Since returns how long ago t was.
func Since(t Time) time.Duration { return Now().Sub(t) }
