package api

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/flotilla/flotilla/internal/election"
)

// A daemon cut off from the leader must not let every request it forwards
// wait for the client's whole timeout (issue 24): it answers 503
// leader_unreachable, naming the leader, within about a second, so that
// clients try another daemon.
//
// Reachability is the network's: a TCP connection to the leader's API
// address, not an answer from it (a leader slow to answer under load is
// reachable, and its requests wait for it). A request is forwarded at once
// unless the leader was found unreachable in the last reachRecheck; while
// it waits for the leader's answer, the leader is dialled every
// reachProbeEvery, and the request is cut off when a dial fails.
const (
	// reachDialTimeout bounds one dial of the leader.
	reachDialTimeout = 700 * time.Millisecond
	// reachProbeEvery is how long a forwarded request waits for the
	// leader's answer before the leader is dialled (and again after).
	reachProbeEvery = 500 * time.Millisecond
	// reachRecheck is how long a leader found unreachable is taken to be
	// so without dialling it again.
	reachRecheck = time.Second
)

// leaderUnreachableError is the answer of a request forwarded to a leader
// that cannot be reached.
type leaderUnreachableError struct {
	leader election.Info
	err    error
	// sent is set when the request had been sent when the leader was
	// found unreachable: it may or may not have reached it.
	sent bool
}

func (e *leaderUnreachableError) Error() string {
	msg := fmt.Sprintf("this daemon cannot reach the engine leader %s at %s: %v", e.leader.Machine, e.leader.APIAddr, e.err)
	if e.sent {
		return msg + "; the request was sent and may or may not have reached it (ask another daemon, or retry)"
	}
	return msg + "; nothing was forwarded (ask another daemon, or retry)"
}

// code is the API error code: leader_unreachable when nothing was
// forwarded (any request may be sent to another daemon), unavailable when
// the request may have reached the leader.
func (e *leaderUnreachableError) code() string {
	if e.sent {
		return "unavailable"
	}
	return "leader_unreachable"
}

// reach remembers which leaders' addresses could not be dialled lately.
type reach struct {
	mu          sync.Mutex
	unreachable map[string]reachFailure // by address
	dial        func(ctx context.Context, addr string) error
}

type reachFailure struct {
	at  time.Time
	err error
}

func newReach() *reach {
	return &reach{unreachable: map[string]reachFailure{}, dial: func(ctx context.Context, addr string) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	}}
}

// check returns an error when addr was found unreachable within
// reachRecheck, or, found so earlier, still cannot be dialled.
func (rc *reach) check(addr string) error {
	rc.mu.Lock()
	f, ok := rc.unreachable[addr]
	rc.mu.Unlock()
	switch {
	case !ok:
		return nil
	case time.Since(f.at) < reachRecheck:
		return f.err
	}
	return rc.probe(context.Background(), addr)
}

// probe dials addr once, remembering the outcome.
func (rc *reach) probe(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, reachDialTimeout)
	defer cancel()
	err := rc.dial(ctx, addr)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("no connection within %v", reachDialTimeout)
		}
		rc.unreachable[addr] = reachFailure{at: time.Now(), err: err}
		return err
	}
	delete(rc.unreachable, addr)
	return nil
}

// forwardToLeader forwards r to the leader, answering 503 when the leader
// cannot be reached (see reach).
func (s *server) forwardToLeader(w http.ResponseWriter, r *http.Request, leader election.Info) {
	if err := s.reach.check(leader.APIAddr); err != nil {
		e := &leaderUnreachableError{leader: leader, err: err}
		refuse(w, r, http.StatusServiceUnavailable, e.code(), e.Error())
		return
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	hw := &headWriter{ResponseWriter: w, head: make(chan struct{})}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		tick := time.NewTicker(reachProbeEvery)
		defer tick.Stop()
		for {
			select {
			case <-hw.head:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if err := s.reach.probe(ctx, leader.APIAddr); err != nil && ctx.Err() == nil {
				cancel(&leaderUnreachableError{leader: leader, err: err, sent: true})
				return
			}
		}
	}()
	s.forward(hw, r.WithContext(ctx), leader.APIAddr, r.URL.Path)
	cancel(nil)
	<-watched
}

// headWriter closes head when the leader's answer begins.
type headWriter struct {
	http.ResponseWriter
	head chan struct{}
	once sync.Once
}

func (h *headWriter) WriteHeader(code int) {
	h.once.Do(func() { close(h.head) })
	h.ResponseWriter.WriteHeader(code)
}

func (h *headWriter) Write(p []byte) (int, error) {
	h.once.Do(func() { close(h.head) })
	return h.ResponseWriter.Write(p)
}

func (h *headWriter) Flush() {
	if f, ok := h.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (h *headWriter) Unwrap() http.ResponseWriter { return h.ResponseWriter }
