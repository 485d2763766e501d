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
type sender struct {
	a      *Agent
	stream agentpb.Engine_ConnectClient
	errc   chan<- error // told a Send's error, once
	// sendMu is held while a message is sent: by the timer's run, and by
	// leave.
	sendMu sync.Mutex

	mu      sync.Mutex
	t       *time.Timer
	soon    bool // t fires within gatherDelay
	sending bool // the timer's run is under way
	flushed bool // a change came while it was
	stopped bool
}

// newSender starts sending on stream; errc gets a Send's error.
func newSender(a *Agent, stream agentpb.Engine_ConnectClient, errc chan<- error) *sender {
	s := &sender{a: a, stream: stream, errc: errc}
	s.mu.Lock()
	s.t = time.AfterFunc(a.heartbeat(), s.send)
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
	case s.t.Stop():
		s.t.Reset(gatherDelay)
		s.soon = true
	default:
		// The timer fired and its run is about to take the changes.
	}
}

// send is the timer's run: the changes, or a heartbeat if there are none.
func (s *sender) send() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.sending, s.soon, s.flushed = true, false, false
	s.mu.Unlock()
	s.sendMu.Lock()
	msg := s.a.takeUpdate()
	if msg == nil {
		msg = &agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Heartbeat{Heartbeat: &agentpb.Heartbeat{UnixNano: s.a.cfg.Now().UnixNano()}}}
	}
	err := s.stream.Send(msg)
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
	case s.flushed:
		s.flushed, s.soon = false, true
		s.t.Reset(gatherDelay)
	default:
		s.t.Reset(s.a.heartbeat())
	}
}

// stop ends the sending; a Send under way ends with the stream.
func (s *sender) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	s.t.Stop()
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
