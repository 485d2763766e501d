// Package waitfor is how tests wait: for a condition, polled, within a
// bound, never for a fixed time that an assertion relies on. One helper
// for the module, so every test waits the same way and says the same
// thing when the bound passes: what it waited for, and the condition's
// last word.
//
// Where a test asserts that something does not happen, it should first
// wait for a positive event that proves the system had the chance (a
// later heartbeat, a pass counted). Where there is none, Never keeps the
// observation window explicit: the test reads as an assertion over a
// bounded time, and fails as soon as the thing happens.
package waitfor

import (
	"bytes"
	"errors"
	"fmt"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

// First and longest pause between two calls of a condition: polled often
// at first (most conditions hold within milliseconds), then less, so a
// long wait does not spin.
const (
	firstPause = 5 * time.Millisecond
	maxPause   = 100 * time.Millisecond
)

// Poll calls cond until it returns nil, and returns nil; or, once within
// has passed since the first call, returns an error wrapping cond's last.
func Poll(within time.Duration, cond func() error) error {
	return poll(within, maxPause, cond)
}

// poll is Poll with the longest pause between two calls of cond.
func poll(within, maxPause time.Duration, cond func() error) error {
	var last error
	if calls(within, maxPause, func() bool { last = cond(); return last == nil }) {
		return nil
	}
	return fmt.Errorf("not within %v: %w", within, last)
}

// calls calls f until it returns true, and returns true; or, once within
// has passed since the first call (and a call after it), returns false.
// The pause between two calls starts at firstPause and doubles up to
// maxPause.
func calls(within, maxPause time.Duration, f func() bool) bool {
	deadline := time.Now().Add(within)
	pause := firstPause
	for {
		if f() {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(min(pause, time.Until(deadline)+time.Millisecond))
		pause = min(2*pause, maxPause)
	}
}

// Until fails the test unless cond returns nil within the bound, naming
// what it waited for and cond's last error.
func Until(t testing.TB, within time.Duration, what string, cond func() error) {
	t.Helper()
	if err := Poll(within, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Watch is Until for a condition that also checks an invariant at each
// call (failing the test there): it calls cond every few milliseconds
// throughout, never backing off, so that a breach that lasts only a
// moment (a unit running on two machines mid-move) is seen.
func Watch(t testing.TB, within time.Duration, what string, cond func() error) {
	t.Helper()
	if err := poll(within, firstPause, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// errFalse is the last word of a condition that says only no.
var errFalse = errors.New("condition false")

// True fails the test unless cond holds within the bound.
func True(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	Until(t, within, what, errWhen(cond, false, errFalse))
}

// errWhen is a condition that returns err when cond returns when, else nil.
func errWhen(cond func() bool, when bool, err error) func() error {
	return func() error {
		if cond() == when {
			return err
		}
		return nil
	}
}

// Holds fails the test if invariant returns an error at any of its calls
// during the window, with that error: polled as Poll does, and once more
// when the window has passed. It is for asserting that something does not
// happen where no positive event proves that the system had the chance
// to do it; it always takes the whole window unless it fails.
func Holds(t testing.TB, window time.Duration, what string, invariant func() error) {
	t.Helper()
	var breach error
	if calls(window, maxPause, func() bool { breach = invariant(); return breach != nil }) {
		t.Fatalf("%s: %v, within %v", what, breach, window)
	}
}

// errHappened is the word of a condition Never saw hold.
var errHappened = errors.New("it happened")

// Never fails the test if cond holds at any of its calls during the
// window, as Holds does; what names the thing that must not happen.
func Never(t testing.TB, window time.Duration, what string, cond func() bool) {
	t.Helper()
	Holds(t, window, what, errWhen(cond, true, errHappened))
}

// Parked is a condition for Poll and Until: nil once a goroutine waits
// (is neither running, runnable nor in a system call, which may be a
// file being read) inside the function fn, named as the
// goroutine profile names it ("client.(*EventStream).Next"). It is the
// positive event for asserting that a call blocks: once it is parked,
// it has had its chance to return.
func Parked(fn string) func() error {
	frame := fn + "("
	return func() error {
		var b bytes.Buffer
		pprof.Lookup("goroutine").WriteTo(&b, 2)
		for _, g := range strings.Split(b.String(), "\n\n") {
			head, _, _ := strings.Cut(g, "\n")
			if strings.Contains(g, frame) && !strings.Contains(head, "[running") && !strings.Contains(head, "[runnable") && !strings.Contains(head, "[syscall") {
				return nil
			}
		}
		return fmt.Errorf("no goroutine waits in %s", fn)
	}
}
