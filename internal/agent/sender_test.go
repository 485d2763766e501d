package agent

import (
	"sync"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// sentStream records what a sender sends.
type sentStream struct {
	agentpb.Engine_ConnectClient
	mu   sync.Mutex
	msgs []sentMsg
}

type sentMsg struct {
	at     time.Time
	update bool
}

func (s *sentStream) Send(m *agentpb.AgentMessage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = append(s.msgs, sentMsg{at: time.Now(), update: m.GetUpdate() != nil})
	return nil
}

func (s *sentStream) sent() []sentMsg {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sentMsg(nil), s.msgs...)
}

// A burst of changes goes in one message within about gatherDelay; an idle
// stream gets a heartbeat a heartbeat interval after its last message, and
// nothing else: no message is sent empty.
func TestSenderGathersChangesAndBeatsWhenIdle(t *testing.T) {
	a, _ := newTestAgent(t, time.Hour)
	const beat = 400 * time.Millisecond
	a.heartbeatNano.Store(int64(beat))
	change := func(name string) {
		a.mu.Lock()
		a.haves[name] = have{Hash: "h", Applied: unit.Launched}
		a.dirty[name] = true
		a.mu.Unlock()
	}
	st := &sentStream{}
	s := newSender(a, st, make(chan error, 1))
	defer s.stop()

	start := time.Now()
	for _, name := range []string{"a.service", "b.service", "c.service"} {
		change(name)
		s.flush()
	}
	waitSent := func(n int) []sentMsg {
		t.Helper()
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
			if m := st.sent(); len(m) >= n {
				return m
			}
		}
		t.Fatalf("%d messages sent, want %d", len(st.sent()), n)
		return nil
	}
	m := waitSent(1)
	if !m[0].update || m[0].at.Sub(start) > beat/2 {
		t.Fatalf("first message: update %v after %v; want the burst's changes within about %v", m[0].update, m[0].at.Sub(start), gatherDelay)
	}
	m = waitSent(2)
	if m[1].update {
		t.Fatal("a second update was sent for one burst of changes")
	}
	if gap := m[1].at.Sub(m[0].at); gap < beat*3/4 {
		t.Fatalf("heartbeat %v after the last message, want about %v", gap, beat)
	}

	// A change between heartbeats goes at once, not with the next beat,
	// and the beat after it counts from it.
	time.Sleep(beat / 2)
	changed := time.Now()
	change("d.service")
	s.flush()
	m = waitSent(3)
	if !m[2].update || m[2].at.Sub(changed) > beat/4 {
		t.Fatalf("a change between heartbeats: update %v after %v", m[2].update, m[2].at.Sub(changed))
	}
	m = waitSent(4)
	if m[3].update || m[3].at.Sub(m[2].at) < beat*3/4 {
		t.Fatalf("fourth message: update %v, %v after the change's", m[3].update, m[3].at.Sub(m[2].at))
	}
	if n := len(st.sent()); n != 4 {
		t.Fatalf("%d messages, want 4", n)
	}
}

// The heartbeat's time that comes while a gather's run is under way is
// not lost when that run finds nothing to send (the heartbeat's run took
// the changes before): the heartbeat goes at once.
func TestSenderKeepsABeatThatCameDuringAGather(t *testing.T) {
	a, _ := newTestAgent(t, time.Hour)
	a.heartbeatNano.Store(int64(time.Hour)) // the timer itself never fires here
	st := &sentStream{}
	s := newSender(a, st, make(chan error, 1))
	defer s.stop()
	s.mu.Lock()
	s.sending = true // a gather's run is under way...
	s.mu.Unlock()
	s.send(false) // ...when the heartbeat's timer fires
	s.mu.Lock()
	s.sending = false
	s.mu.Unlock()
	s.send(true) // the gather's run, with nothing to send
	waitfor.True(t, 5*time.Second, "a message", func() bool { return len(st.sent()) > 0 })
	if m := st.sent(); len(m) != 1 || m[0].update {
		t.Fatalf("sent %v, want one heartbeat", m)
	}
}
