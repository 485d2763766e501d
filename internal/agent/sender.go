package agent

import (
	"sync"
	"time"

	"github.com/flotilla/flotilla/proto/agentpb"
)

// gatherDelay is how long a burst of status changes is given to gather
// into one message.
const gatherDelay = 5 * time.Millisecond

// sender sends a session's coalesced status updates, and a heartbeat when
// the stream has been idle for a heartbeat interval. It has no goroutine
// of its own while it waits (see timers.go): a timer sends, gatherDelay
// after a change (flush) or a heartbeat after the last message, and sends
// never overlap.
//
// The two are timers of their own. A change used to bring the heartbeat's
// timer forward, from seconds away to gatherDelay, and the runtime finds a
// timer moved earlier by walking every timer of its P (a P's timers are a
// heap; a moved one is put back in its place by a walk of them all once
// the earliest moved one is due): a host of 5,000 simulated agents a
// process paid a walk at every burst of changes, 6-7% of its CPU at a
// million units. A timer that fired is added afresh when set, and a timer
// moved later costs a walk only when that later time comes: the gather
// timer is set only once fired (soon is cleared by its own run alone), the
// heartbeat's is only moved later.
type sender struct {
	a      *Agent
	stream agentpb.Engine_ConnectClient
	errc   chan<- error // told a Send's error, once
	// sendMu is held while a message is sent: by the timers' runs, and by
	// leave.
	sendMu sync.Mutex

	mu      sync.Mutex
	beat    *time.Timer // the heartbeat's
	gather  *time.Timer // the changes' (made at the first)
	soon    bool        // gather is set and has not run
	sending bool        // a timer's run is under way
	flushed bool        // a change came while it was
	// beatWaits: the heartbeat's run came while the gather's ran, which
	// sends it if it has nothing else to send.
	beatWaits bool
	stopped   bool
}

// newSender starts sending on stream; errc gets a Send's error.
func newSender(a *Agent, stream agentpb.Engine_ConnectClient, errc chan<- error) *sender {
	s := &sender{a: a, stream: stream, errc: errc}
	s.mu.Lock()
	s.beat = time.AfterFunc(a.heartbeat(), func() { s.send(false) })
	s.mu.Unlock()
	return s
}

// flush has the changes sent within gatherDelay.
func (s *sender) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.stopped || s.soon:
	case s.sending:
		s.flushed = true // sent once the message under way is
	default:
		s.gatherLocked()
	}
}

// gatherLocked sets the gather timer, which is not set (soon is false).
func (s *sender) gatherLocked() {
	s.soon = true
	if s.gather == nil {
		s.gather = time.AfterFunc(gatherDelay, func() { s.send(true) })
		return
	}
	s.gather.Reset(gatherDelay)
}

// send is the timers' run: the changes, or, for the heartbeat's
// (gathered false), a heartbeat if there are none.
func (s *sender) send(gathered bool) {
	s.mu.Lock()
	if gathered {
		s.soon = false
	}
	if s.stopped || s.sending {
		// The other timer's run is under way: it gathers again for
		// changes it did not take, and a heartbeat's time that came
		// meanwhile is not lost (beatWaits).
		if gathered {
			s.flushed = true
		} else {
			s.beatWaits = true
		}
		s.mu.Unlock()
		return
	}
	s.sending, s.flushed = true, false
	s.mu.Unlock()
	s.sendMu.Lock()
	msg := s.a.takeUpdate()
	if msg == nil && !gathered {
		msg = &agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Heartbeat{Heartbeat: &agentpb.Heartbeat{UnixNano: s.a.cfg.Now().UnixNano()}}}
	}
	var err error
	if msg != nil { // nil: the changes went with the heartbeat's run
		err = s.stream.Send(msg)
	}
	s.sendMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sending = false
	switch {
	case err != nil:
		if !s.stopped {
			s.stopped = true
			s.errc <- err
		}
	case s.stopped:
	default:
		switch {
		case msg != nil: // any message is the heartbeat
			s.beat.Reset(s.a.heartbeat())
		case s.beatWaits: // its time came and nothing went: at once
			s.beat.Reset(0)
		}
		s.beatWaits = false
		if s.flushed && !s.soon {
			s.flushed = false
			s.gatherLocked()
		}
	}
}

// stop ends the sending; a Send under way ends with the stream.
func (s *sender) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	s.beat.Stop()
	if s.gather != nil {
		s.gather.Stop()
	}
}

// leave is Leave's end of the stream, once the units are stopped: it
// sends the last update and a Leave, after any message under way, and
// returns errLeaveSent (or a Send's error).
func (s *sender) leave() error {
	s.stop()
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if msg := s.a.takeUpdate(); msg != nil {
		if err := s.stream.Send(msg); err != nil {
			return err
		}
	}
	if err := s.stream.Send(&agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Leave{Leave: &agentpb.Leave{}}}); err != nil {
		return err
	}
	s.stream.CloseSend()
	return errLeaveSent
}
