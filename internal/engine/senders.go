package engine

import (
	"runtime"
	"sync"
	"time"
)

// sendPool sends the agents' streams their messages on a few goroutines,
// not one a stream. A leader holds a stream per machine; each stream's
// sender used to be a goroutine of its own, and a pass that placed a slice
// of units woke thousands of them at once (wakeAll): with 10,000 agents
// the runtime's queue held thousands of runnable senders, and every other
// goroutine of the leader (its loop, the reports' inbox, the lease's
// renewals) waited behind them for a CPU, up to a second and more at a
// million units (docs/benchmarks.md, session 23). Here a stream with
// something to send is queued, once, and a worker takes it; a stream
// readied while a worker serves it is served again after.
//
// A send blocks while the agent's flow-control window is full (an agent
// that stops reading): while every worker is blocked and streams wait,
// the pool adds a worker (the stall check), up to most, so one stuck agent
// delays no other. Workers past base leave once nothing waits.
type sendPool struct {
	serve func(*agentConn)

	mu    sync.Mutex
	cond  sync.Cond
	queue []*agentConn // ready streams, first ready first; from head on
	head  int
	// workers are running, idle of them waiting for a stream.
	workers, idle int
	base, most    int
	// served counts the serves done: the stall check's measure of
	// progress.
	served   uint64
	watching bool
	stopped  bool
	done     <-chan struct{}
}

// A stream's place in the pool (agentConn.sendState, under the pool's mu).
type sendState uint8

const (
	sendIdle    sendState = iota
	sendQueued            // waiting for a worker
	sendRunning           // a worker serves it
	sendAgain             // a worker serves it and it was readied since
)

// stallCheck is how often the pool looks for stuck workers.
const stallCheck = 250 * time.Millisecond

// sendWorkers is a pool's base: enough to keep the CPUs busy while some
// sends wait on a connection's writer.
func sendWorkers() int { return max(4, 2*runtime.GOMAXPROCS(0)) }

// maxSendWorkers bounds the workers the stall check adds.
const maxSendWorkers = 1024

// newSendPool makes a pool that calls serve for each stream readied, until
// done is closed.
func newSendPool(serve func(*agentConn), base, most int, done <-chan struct{}) *sendPool {
	p := &sendPool{serve: serve, base: base, most: max(base, most), done: done}
	p.cond.L = &p.mu
	go func() {
		<-done
		p.stop()
	}()
	return p
}

// ready queues c to be served, unless it waits already; if a worker is
// serving it, it is served again once that ends.
func (p *sendPool) ready(c *agentConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch c.sendState {
	case sendRunning:
		c.sendState = sendAgain
		return
	case sendQueued, sendAgain:
		return
	}
	if p.stopped {
		return
	}
	c.sendState = sendQueued
	p.queue = append(p.queue, c)
	switch {
	case p.idle > 0:
		p.cond.Signal()
	case p.workers < p.base:
		p.startLocked()
	}
}

// waiting is how many streams wait for a worker. Callers hold mu.
func (p *sendPool) waiting() int { return len(p.queue) - p.head }

func (p *sendPool) startLocked() {
	p.workers++
	go p.work()
	if !p.watching {
		p.watching = true
		go p.watch()
	}
}

// work serves ready streams until the pool stops or, for a worker past
// base, until none waits.
func (p *sendPool) work() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		for p.waiting() == 0 || p.stopped {
			if p.stopped || p.workers > p.base {
				p.workers--
				return
			}
			p.idle++
			p.cond.Wait()
			p.idle--
		}
		c := p.queue[p.head]
		p.queue[p.head] = nil
		p.head++
		if p.head == len(p.queue) {
			p.queue, p.head = p.queue[:0], 0
		} else if p.head >= 1024 && p.head*2 >= len(p.queue) {
			n := copy(p.queue, p.queue[p.head:])
			clear(p.queue[n:])
			p.queue, p.head = p.queue[:n], 0
		}
		c.sendState = sendRunning
		p.mu.Unlock()
		p.serve(c)
		p.mu.Lock()
		p.served++
		if c.sendState == sendAgain && !p.stopped {
			c.sendState = sendQueued
			p.queue = append(p.queue, c)
		} else {
			c.sendState = sendIdle
		}
	}
}

// watch adds a worker whenever streams have waited a whole stallCheck
// while every worker was busy and none finished a serve.
func (p *sendPool) watch() {
	tick := time.NewTicker(stallCheck)
	defer tick.Stop()
	last := ^uint64(0)
	for {
		select {
		case <-p.done:
			return
		case <-tick.C:
		}
		p.mu.Lock()
		if p.waiting() > 0 && p.idle == 0 && p.served == last && p.workers < p.most && !p.stopped {
			p.startLocked()
		}
		last = p.served
		p.mu.Unlock()
	}
}

// stop ends the workers once they finish what they serve; streams readied
// after are not served.
func (p *sendPool) stop() {
	p.mu.Lock()
	p.stopped = true
	clear(p.queue)
	p.queue, p.head = nil, 0
	p.mu.Unlock()
	p.cond.Broadcast()
}
