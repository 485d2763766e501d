// Package cputime reads the CPU time of the calling thread, to charge work
// what it cost rather than the wall time it took: on a busy host a build
// that waited for a CPU seconds at a time looked seconds long, and what is
// paced by its cost (the leader's published state, whole-state answers)
// was held back for many times that.
package cputime

import (
	"runtime"
	"time"
)

// Of runs f on one OS thread and returns the CPU time (user and system)
// that thread spent on it, or, where that cannot be read, the wall time f
// took (ok false). Work f hands to other goroutines is not counted.
func Of(f func()) (d time.Duration, ok bool) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu0, ok0 := Thread()
	start := time.Now()
	f()
	if cpu1, ok1 := Thread(); ok0 && ok1 && cpu1 >= cpu0 {
		return cpu1 - cpu0, true
	}
	return time.Since(start), false
}
