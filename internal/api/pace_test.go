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

// TestPacer: each answer is charged the mean cost of answers, over
// share: answers costing 1 ms start 20 ms apart (the first at once); one
// costly answer holds the next back by the mean it moves, not its own
// cost, and the charges add up to the costs; a quiet spell leaves no
// credit for a burst; a waiter whose context ends gets its error and
// takes nothing from the budget.
func TestPacer(t *testing.T) {
	var c fakeClock
	p := c.pacer(0.05)
	answer := func(quiet, cost time.Duration) (waited time.Duration) {
		t.Helper()
		c.now = c.now.Add(quiet)
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
		{0, ms, 0},       // the first answer: at once
		{0, ms, 19 * ms}, // 1 ms of 20: 19 ms after the first ended
		{0, ms, 19 * ms},
		{0, 9 * ms, 19 * ms}, // costs 9 ms: the mean becomes 2 ms...
		{0, ms, 31 * ms},     // ...so the next starts 40 ms after it, not 180
	} {
		if got := answer(tt.quiet, tt.cost); got != tt.wait {
			t.Errorf("answer %d (after %v quiet, costing %v) waited %v, want %v", i, tt.quiet, tt.cost, got, tt.wait)
		}
	}
	// The 9 ms are charged all the same, over the answers after it: 40
	// answers of 1 ms take about 20 × their cost plus the 7 ms not yet
	// charged, less what is left to charge (8 × what the mean still
	// exceeds 1 ms).
	start := c.now
	for range 40 {
		answer(0, ms)
	}
	left := time.Duration(smooth) * (p.mean - ms)
	if took, want := c.now.Sub(start), 20*(40*ms+7*ms-left); took < want-ms || took > want+ms {
		t.Errorf("40 answers of 1 ms after one of 9 ms took %v, want about %v", took, want)
	}
	if got := answer(10*time.Second, ms); got != 0 { // after a quiet spell: at once...
		t.Errorf("after a quiet spell, an answer waited %v, want 0", got)
	}
	if got, want := answer(0, ms), p.pause(p.mean)-ms; got < want-ms/10 || got > want+ms/10 { // ...but no burst
		t.Errorf("the answer after that waited %v, want about %v", got, want)
	}
	if got, want := answer(5*ms, ms), p.pause(p.mean)-6*ms; got < want-ms/10 || got > want+ms/10 {
		t.Errorf("a client that came 5 ms late waited %v, want about %v", got, want)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("wait with an ended context = %v, want context.Canceled", err)
	}
	if got, want := answer(0, ms), p.pause(p.mean)-ms; got < want-ms/10 || got > want+ms/10 {
		t.Errorf("after a waiter gave up, the next answer waited %v, want about %v: as if nobody had come", got, want)
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
