package engine

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/waitfor"
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
	waitfor.True(t, 5*time.Second, "every stream served after its last ready", func() bool {
		for i := range conns {
			if last[i].Load() != readies {
				return false
			}
		}
		return true
	})
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
	waitfor.True(t, 5*time.Second, "a second serve for the ready during the first", func() bool { return serves.Load() == 2 })
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
	waitfor.True(t, 5*time.Second, "the base's 1 worker once nothing waits", func() bool { return workers() == 1 })
	close(done)
	waitfor.True(t, 5*time.Second, "no worker after the pool stopped", func() bool { return workers() == 0 })
	signalConn(other) // no worker starts, nothing is served
	waitfor.Never(t, 20*time.Millisecond, "a stopped pool serving a stream", func() bool { return workers() != 0 || len(otherServed) != 0 })
}
