package api

import (
	"context"
	"errors"
	"testing"
	"time"
)

// fakeClock is a pacer's clock on which sleeping passes at once.
type fakeClock struct {
	now    time.Time
	sleeps []time.Duration
}

func (c *fakeClock) pacer(share float64) *pacer {
	p := newPacer(share)
	p.now = func() time.Time { return c.now }
	p.sleep = func(ctx context.Context, d time.Duration) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		c.now = c.now.Add(d)
		c.sleeps = append(c.sleeps, d)
		return nil
	}
	return p
}

// TestPacer: answers costing c start c/share apart (the first at once);
// a quiet spell leaves no credit for a burst; a waiter whose context ends
// gets its error and takes nothing from the budget.
func TestPacer(t *testing.T) {
	var c fakeClock
	p := c.pacer(0.05)
	answer := func(cost time.Duration) (waited time.Duration) {
		t.Helper()
		before := c.now
		done, err := p.wait(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		waited = c.now.Sub(before)
		c.now = c.now.Add(cost) // the write takes its cost
		done(cost)
		return waited
	}
	ms := time.Millisecond
	for i, tt := range []struct {
		quiet, cost, wait time.Duration
	}{
		{0, ms, 0},                // the first answer: at once
		{0, ms, 19 * ms},          // 1 ms of 20: 19 ms after the first ended
		{0, 2 * ms, 19 * ms},      // costs 2 ms...
		{0, ms, 38 * ms},          // ...so the next waits 40 ms after its start
		{10 * time.Second, ms, 0}, // after a quiet spell: at once...
		{0, ms, 19 * ms},          // ...but no burst
		{5 * ms, ms, 14 * ms},     // a client that came late waits less
		{100 * ms, 0, 0},          // an answer that cost nothing...
		{0, ms, 0},                // ...moves the next one nothing
	} {
		c.now = c.now.Add(tt.quiet)
		if got := answer(tt.cost); got != tt.wait {
			t.Errorf("answer %d (after %v quiet, costing %v) waited %v, want %v", i, tt.quiet, tt.cost, got, tt.wait)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("wait with an ended context = %v, want context.Canceled", err)
	}
	if got := answer(ms); got != 19*ms {
		t.Errorf("after a waiter gave up, the next answer waited %v, want 19ms: as if nobody had come", got)
	}
}

// TestPacerTurns: a waiter gives up when its context ends, whether it
// waits for its turn (behind one sleeping) or for the time.
func TestPacerTurns(t *testing.T) {
	p := newPacer(0.05)
	first, err := p.wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	first(50 * time.Millisecond) // the next one sleeps a second
	asleep := make(chan struct{})
	go func() {
		done, err := p.wait(context.Background())
		if err == nil {
			done(0)
		}
		close(asleep)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := p.wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a waiter behind a sleeping one, its context ended: %v, want context.DeadlineExceeded", err)
	}
	<-asleep
}
