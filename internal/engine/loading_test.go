package engine

import (
	"context"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/waitfor"
)

// TestLeaderOnceLoaded: an agent's stream that reaches an engine elected
// but still loading its term waits for the term instead of being refused;
// one that reaches an engine that is not elected, or gives up, is not
// kept waiting.
func TestLeaderOnceLoaded(t *testing.T) {
	e := &Engine{}
	if got := e.leaderOnceLoaded(context.Background()); got != nil {
		t.Fatalf("not elected: got a term %p", got)
	}
	ready := make(chan struct{})
	e.loading.Store(&ready)
	got := make(chan *term, 1)
	go func() { got <- e.leaderOnceLoaded(context.Background()) }()
	waitfor.Until(t, 5*time.Second, "the stream waiting for the term", waitfor.Parked("engine.(*Engine).leaderOnceLoaded"))
	select {
	case <-got:
		t.Fatal("answered before the term was loaded")
	default:
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := e.leaderOnceLoaded(ctx); got != nil {
		t.Fatalf("a stream gone while the term loads got a term %p", got)
	}
	tm := &term{}
	e.term.Store(tm)
	e.loading.Store(nil)
	close(ready)
	select {
	case g := <-got:
		if g != tm {
			t.Fatalf("got term %p, want the loaded one %p", g, tm)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("still waiting once the term was loaded")
	}
}
