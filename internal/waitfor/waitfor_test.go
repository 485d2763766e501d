package waitfor

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPollHolds(t *testing.T) {
	n := 0
	if err := Poll(5*time.Second, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("Poll = %v after %d calls; want nil after 3", err, n)
	}
}

func TestPollGivesUp(t *testing.T) {
	start := time.Now()
	err := Poll(50*time.Millisecond, func() error { return errors.New("never") })
	if err == nil || !strings.Contains(err.Error(), "not within 50ms: never") {
		t.Fatalf("Poll = %v; want the bound and the condition's last error", err)
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Errorf("Poll gave up after %v, before its bound", took)
	}
}

// fakeT records a Fatalf instead of ending the test.
type fakeT struct {
	testing.TB
	msg string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.msg = format
	if len(args) > 0 {
		f.msg = args[0].(string)
	}
}

func TestTrueNamesWhat(t *testing.T) {
	f := &fakeT{}
	True(f, 20*time.Millisecond, "the unit active", func() bool { return false })
	if f.msg != "the unit active" {
		t.Errorf("True's failure = %q; want it to name what it waited for", f.msg)
	}
	f = &fakeT{}
	True(f, time.Second, "at once", func() bool { return true })
	if f.msg != "" {
		t.Errorf("True failed on a condition that held: %q", f.msg)
	}
}

func TestNeverHolds(t *testing.T) {
	f := &fakeT{}
	start := time.Now()
	n := 0
	Never(f, 50*time.Millisecond, "a restart", func() bool { n++; return false })
	if f.msg != "" {
		t.Errorf("Never failed on a condition that never held: %q", f.msg)
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Errorf("Never returned after %v, before its window", took)
	}
	if n < 2 {
		t.Errorf("Never called the condition %d times, want it polled and checked at the end", n)
	}
}

func TestNeverFailsAtOnce(t *testing.T) {
	f := &fakeT{}
	start := time.Now()
	n := 0
	Never(f, 5*time.Second, "a restart", func() bool { n++; return n == 3 })
	if f.msg != "a restart" {
		t.Errorf("Never's failure = %q; want it to name what happened", f.msg)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Never failed after %v; want it to fail as soon as the condition held", took)
	}
}

func TestWatchKeepsLooking(t *testing.T) {
	n := 0
	f := &fakeT{}
	Watch(f, 300*time.Millisecond, "the move done", func() error {
		n++
		return errors.New("still moving")
	})
	if f.msg != "the move done" {
		t.Errorf("Watch's failure = %q; want it to name what it waited for", f.msg)
	}
	if n < 20 {
		t.Errorf("Watch called its condition %d times in 300ms, want it called every few milliseconds", n)
	}
}

func TestHoldsNamesTheBreach(t *testing.T) {
	f := &fakeT{}
	Holds(f, time.Second, "one leader", func() error { return errors.New("two leaders") })
	if f.msg != "one leader" {
		t.Errorf("Holds' failure = %q; want it to name what must hold", f.msg)
	}
}

//go:noinline
func parkHere(ch chan struct{}) { <-ch }

func TestParked(t *testing.T) {
	cond := Parked("waitfor.parkHere")
	if err := cond(); err == nil {
		t.Fatal("Parked before any goroutine waits there = nil")
	}
	ch := make(chan struct{})
	go parkHere(ch)
	Until(t, 5*time.Second, "a goroutine parked in parkHere", cond)
	close(ch)
}
