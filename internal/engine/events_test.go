package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// readAll reads c until it has want events or a few seconds passed.
func readAll(t *testing.T, c *EventCursor, want int) []byte {
	t.Helper()
	var out []byte
	deadline := time.After(5 * time.Second)
	for bytes.Count(out, []byte("\n\n")) < want {
		b, err := c.Read()
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if len(b) > 0 {
			out = append(out, b...)
			continue
		}
		select {
		case <-c.More():
		case <-deadline:
			t.Fatalf("read %d events, want %d: %q", bytes.Count(out, []byte("\n\n")), want, out)
		}
	}
	return out
}

// TestEventLog: events are encoded once and every reader gets the same
// bytes; a reader resumes after a position; a position of another term is
// a reset; a reader that falls maxReaderLag behind is dropped with a
// position it can resume from.
func TestEventLog(t *testing.T) { synctest.Test(t, testEventLog) }

func testEventLog(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := newEventLog(7, ctx.Done())
	a, reset := l.subscribe("")
	b, _ := l.subscribe("")
	if reset {
		t.Fatal("subscribe(\"\") = reset")
	}
	for i := range 3 {
		l.append(loggedEvent{kind: unitKind, unit: fmt.Sprintf("u%d.service", i)}, time.Now())
	}
	waitfor.True(t, 5*time.Second, "3 events published", func() bool { return l.published.Load() >= 3 })
	ra, _ := a.Read()
	rb, _ := b.Read()
	if len(ra) == 0 || &ra[0] != &rb[0] {
		t.Errorf("two readers got different copies of the events: %q and %q", ra, rb)
	}
	ga := append(ra, readAll(t, a, 3-bytes.Count(ra, []byte("\n\n")))...)
	if !strings.HasPrefix(string(ga), "id: 7.1\nevent: unit\ndata: {\"id\":\"7.1\",\"type\":\"unit\"") || !strings.Contains(string(ga), `"unit":"u2.service"`) {
		t.Errorf("events = %q", ga)
	}
	c, reset := l.subscribe("7.1")
	if got := readAll(t, c, 2); reset || !strings.HasPrefix(string(got), "id: 7.2\n") {
		t.Errorf("resumed after 7.1: reset=%v %q, want 7.2 and 7.3", reset, got)
	}
	for _, id := range []string{"6.2", "7.99", "x"} {
		if c, reset := l.subscribe(id); !reset || c.Pos() != "7.3" {
			t.Errorf("subscribe(%q) = %v, %s; want a reset from 7.3", id, reset, c.Pos())
		}
	}

	// A reader that reads nothing while the engine goes on is dropped, and
	// may resume where it was.
	slow, _ := l.subscribe("")
	for range maxReaderLag + 10 {
		l.append(loggedEvent{kind: stateKind, unit: "u.service"}, time.Now())
	}
	waitfor.True(t, 5*time.Second, "the events past the slow reader published", func() bool { return l.published.Load() >= 3+maxReaderLag+10 })
	if _, err := slow.Read(); !errors.Is(err, ErrSlowReader) || !strings.Contains(err.Error(), "resume from 7.3") {
		t.Errorf("a reader %d events behind: %v, want ErrSlowReader resuming from 7.3", maxReaderLag+10, err)
	}
	if again, reset := l.subscribe(slow.Pos()); reset || len(readAll(t, again, maxReaderLag+10)) == 0 {
		t.Errorf("resuming a dropped reader from %s: reset", slow.Pos())
	}
	cancel()
	if _, err := a.Read(); !errors.Is(err, ErrNotLeader) {
		t.Errorf("Read after the term = %v, want ErrNotLeader", err)
	}
}

// TestEventAppendNeverWaitsForReaders: an append takes no lock a reader
// holds. With a reader in the middle of subscribing (the window's read
// lock) and another encoding a page, and thousands of readers that read
// nothing, the engine's appends go through.
func TestEventAppendNeverWaitsForReaders(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := newEventLog(1, ctx.Done())
	for range 3000 {
		l.subscribe("")
	}
	l.append(loggedEvent{kind: unitKind, unit: "first.service"}, time.Now())
	waitfor.True(t, 5*time.Second, "the first event published", func() bool { return l.published.Load() >= 1 })
	l.winMu.RLock() // a reader finding its page
	encoding := make(chan struct{})
	release := make(chan struct{})
	go l.window[len(l.window)-1].once.Do(func() { close(encoding); <-release }) // a reader encoding a page
	<-encoding
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100_000 {
			l.append(loggedEvent{kind: stateKind, unit: "u.service"}, time.Now())
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Error("100,000 appends did not finish while readers held their locks")
	}
	l.winMu.RUnlock()
	close(release)
}

// TestLoggedEventFields checks that every kind of event the log keeps
// comes back with each field the API shows it with.
func TestLoggedEventFields(t *testing.T) {
	for _, tc := range []struct {
		le   loggedEvent
		want apiv1.Event
	}{
		{loggedEvent{kind: unitKind, rev: 7, unit: "u.service", machine: "m1", a: "h", b: "launched", c: "why", global: true},
			apiv1.Event{Type: "unit", Revision: 7, Unit: "u.service", Machine: "m1", Hash: "h", DesiredState: "launched", Reason: "why", Global: true}},
		{loggedEvent{kind: unitKind, unit: "u.service", removed: true},
			apiv1.Event{Type: "unit", Unit: "u.service", Removed: true}},
		{loggedEvent{kind: stateKind, rev: 8, unit: "u.service", machine: "m1", a: "loaded", b: "active", c: "running", d: "healthy"},
			apiv1.Event{Type: "state", Revision: 8, Unit: "u.service", Machine: "m1", Load: "loaded", Active: "active", Sub: "running", Health: "healthy"}},
		{loggedEvent{kind: machineKind, rev: 9, machine: "m2", removed: true},
			apiv1.Event{Type: "machine", Revision: 9, Machine: "m2", Removed: true}},
		{loggedEvent{kind: deploymentKind, rev: 10, unit: "web@.service", a: "running", b: "2 of 4", version: 3, done: 2},
			apiv1.Event{Type: "deployment", Revision: 10, Unit: "web@.service", Status: "running", Message: "2 of 4", Version: 3, Done: 2}},
	} {
		if got := tc.le.event(); got != tc.want {
			t.Errorf("%+v: got %+v, want %+v", tc.le, got, tc.want)
		}
	}
}

// TestEventChunks: events written across the log's chunks, some pages
// published while their chunk was still being filled, come back in order,
// each once, with their own fields.
func TestEventChunks(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := newEventLog(3, ctx.Done())
	c, _ := l.subscribe("")
	n := 0
	for _, burst := range []int{5, eventChunk, 1, 2*eventChunk + 7} {
		for range burst {
			l.append(loggedEvent{kind: unitKind, unit: fmt.Sprintf("u%d.service", n)}, time.Now())
			n++
		}
		waitfor.True(t, 5*time.Second, "the burst published", func() bool { return l.published.Load() >= uint64(n) })
	}
	frames := strings.Split(strings.TrimSuffix(string(readAll(t, c, n)), "\n\n"), "\n\n")
	if len(frames) != n {
		t.Fatalf("read %d events, want %d", len(frames), n)
	}
	for i, f := range frames {
		if id, unit := fmt.Sprintf("id: 3.%d\n", i+1), fmt.Sprintf(`"unit":"u%d.service"`, i); !strings.HasPrefix(f, id) || !strings.Contains(f, unit) {
			t.Fatalf("event %d = %q, want %q with %s", i, f, id, unit)
		}
	}
}
