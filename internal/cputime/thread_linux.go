package cputime

import (
	"time"

	"golang.org/x/sys/unix"
)

// Thread is the CPU time the calling thread has used (user and system); ok
// is false when it cannot be read. Callers lock the goroutine to its
// thread (runtime.LockOSThread) between two readings.
func Thread() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
