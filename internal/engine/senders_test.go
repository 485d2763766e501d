package engine

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A stream readied while a worker serves it is served again after, never
// by two workers at once, and every readied stream is served.
func TestSendPoolServesEachStreamAloneAndAgain(t *testing.T) {
	done := make(chan struct{})
	defer close(done)
	const streams, readies = 50, 40
	var (
		busy   [streams]atomic.Int32
		served [streams]atomic.Int32
		twice  atomic.Bool
		wg     sync.WaitGroup
	)
	conns := make([]*agentConn, streams)
	index := map[*agentConn]int{}
	for i := range conns {
		conns[i] = newAgentConn(fmt.Sprintf("m%d", i))
		index[conns[i]] = i
	}
	var last [streams]atomic.Int64 // the latest ready's number, seen by a serve
	var readied [streams]atomic.Int64
	p := newSendPool(func(c *agentConn) {
		i := index[c]
		if busy[i].Add(1) > 1 {
			twice.Store(true)
		}
		last[i].Store(readied[i].Load())
		served[i].Add(1)
		time.Sleep(50 * time.Microsecond)
		busy[i].Add(-1)
	}, 3, 3, done)
	for i, c := range conns {
		c.pool = p
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range readies {
				readied[i].Store(int64(n + 1))
				signalConn(c)
			}
		}()
	}
	wg.Wait()
	if !waitFor(5*time.Second, func() bool {
		for i := range conns {
			if last[i].Load() != readies {
				return false
			}
		}
		return true
	}) {
		t.Fatal("a stream readied after its last serve began was not served again")
	}
	if twice.Load() {
		t.Fatal("two workers served one stream at once")
	}
	for i := range conns {
		if n := served[i].Load(); n < 1 || n > readies {
			t.Fatalf("stream %d served %d times for %d readies", i, n, readies)
		}
	}
}

// A stream readied while a worker serves it is served again once that
// serve ends: what was queued meanwhile is not left waiting.
func TestSendPoolServesAgainWhatWasReadiedDuringAServe(t *testing.T) {
	done := make(chan struct{})
	defer close(done)
	in, resume := make(chan struct{}), make(chan struct{})
	var serves atomic.Int32
	c := newAgentConn("m1")
	c.pool = newSendPool(func(*agentConn) {
		if serves.Add(1) == 1 {
			close(in)
			<-resume
		}
	}, 2, 2, done)
	signalConn(c)
	<-in
	signalConn(c)
	close(resume)
	if !waitFor(5*time.Second, func() bool { return serves.Load() == 2 }) {
		t.Fatalf("served %d times, want 2: the ready during the first serve was lost", serves.Load())
	}
}

// A worker stuck in a send (an agent that stopped reading) holds back no
// other stream: the pool adds a worker, which leaves once nothing waits;
// once the pool stops, every worker does.
func TestSendPoolGrowsPastAStuckSend(t *testing.T) {
	done := make(chan struct{})
	stuck, freed := newAgentConn("stuck"), make(chan struct{})
	other := newAgentConn("other")
	otherServed := make(chan struct{}, 1)
	p := newSendPool(func(c *agentConn) {
		if c == stuck {
			<-freed
			return
		}
		otherServed <- struct{}{}
	}, 1, 4, done)
	stuck.pool, other.pool = p, p
	signalConn(stuck)
	time.Sleep(10 * time.Millisecond) // the one worker takes the stuck stream
	signalConn(other)
	select {
	case <-otherServed:
	case <-time.After(5 * time.Second):
		t.Fatal("a stream waited behind a stuck send")
	}
	workers := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.workers
	}
	signalConn(other) // again, while the first worker is still stuck
	select {
	case <-otherServed:
	case <-time.After(5 * time.Second):
		t.Fatal("a stream readied again waited behind a stuck send")
	}
	close(freed)
	if !waitFor(5*time.Second, func() bool { return workers() == 1 }) {
		t.Fatalf("%d workers once nothing waits, want the base's 1", workers())
	}
	close(done)
	if !waitFor(5*time.Second, func() bool { return workers() == 0 }) {
		t.Fatalf("%d workers after the pool stopped", workers())
	}
	signalConn(other) // no worker starts, nothing is served
	time.Sleep(20 * time.Millisecond)
	if workers() != 0 || len(otherServed) != 0 {
		t.Fatal("a stopped pool served a stream")
	}
}

func waitFor(d time.Duration, ok func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if ok() {
			return true
		}
	}
	return ok()
}
