package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/waitfor"
)

func TestSSEReader(t *testing.T) {
	in := ": a comment\n" +
		"retry: 1500\n" +
		"id: 1.1\nevent: unit\ndata: {\"a\":1}\n\n" +
		"data: first line\r\ndata: second line\r\n\r\n" + // CRLF; keeps the last ID; default type
		"id: 1.3\revent: state\rdata:no space\r\r" + // CR line ends; no space after the colon
		"id: bad\x00id\ndata: x\n\n" + // an ID with NUL is ignored
		"event: ignored\n\n" + // no data: nothing dispatched, the type is forgotten
		"id: 1.5\n\n" + // only an ID: the position moves
		"unknown: field\ndata\n\n" + // "data" alone is an empty data line
		"data: not terminated"
	p := newSSEReader(strings.NewReader(in), "1.0", nil)
	want := []sseEvent{
		{typ: "unit", data: `{"a":1}`, lastID: "1.1", retry: 1500 * time.Millisecond},
		{typ: "message", data: "first line\nsecond line", lastID: "1.1"},
		{typ: "state", data: "no space", lastID: "1.3"},
		{typ: "message", data: "x", lastID: "1.3"},
		{lastID: "1.5"},
		{typ: "message", data: "", lastID: "1.5"},
	}
	for i, w := range want {
		got, err := p.next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if got != w {
			t.Errorf("event %d = %+v, want %+v", i, got, w)
		}
	}
	if ev, err := p.next(); err != io.EOF {
		t.Errorf("after the last event: %+v, %v; want io.EOF (an unterminated event is dropped)", ev, err)
	}
}

// fakeEvents is a /v1/events server that serves scripted connections:
// each connection writes its script and then ends (or stalls).
type fakeEvents struct {
	t     *testing.T
	mu    sync.Mutex
	conns []func(w http.ResponseWriter, r *http.Request)
	seen  []string // Last-Event-ID of each connection
}

func (f *fakeEvents) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/events" {
		http.NotFound(w, r)
		return
	}
	f.mu.Lock()
	f.seen = append(f.seen, r.Header.Get("Last-Event-ID"))
	n := len(f.seen)
	var h func(http.ResponseWriter, *http.Request)
	if n <= len(f.conns) {
		h = f.conns[n-1]
	}
	f.mu.Unlock()
	if h == nil {
		<-r.Context().Done() // no more scripted connections: stay open
		return
	}
	h(w, r)
}

func (f *fakeEvents) lastEventIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.seen...)
}

// stream answers with the SSE text and then ends the connection, or keeps
// it open when hold is set.
func stream(text string, hold bool) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, text)
		w.(http.Flusher).Flush()
		if hold {
			<-r.Context().Done()
		}
	}
}

func event(id, typ, unit string) string {
	return fmt.Sprintf("id: %s\nevent: %s\ndata: {\"id\":%q,\"type\":%q,\"revision\":7,\"unit\":%q,\"active\":\"active\"}\n\n", id, typ, id, typ, unit)
}

func startEvents(t *testing.T, f *fakeEvents, since string) (*EventStream, context.CancelFunc) {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	s, err := c.Events(ctx, since)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, cancel
}

func next(t *testing.T, s *EventStream) api.Event {
	t.Helper()
	ev, err := s.Next()
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return ev
}

// TestEventsResume: a dropped connection is resumed after the last event
// delivered, without losing or repeating events.
func TestEventsResume(t *testing.T) {
	f := &fakeEvents{t: t, conns: []func(http.ResponseWriter, *http.Request){
		stream("retry: 10\n\n"+event("3.1", "unit", "a.service")+event("3.2", "state", "a.service"), false),
		stream(event("3.3", "unit", "b.service"), false),
		stream(event("3.4", "machine", ""), true),
	}}
	s, _ := startEvents(t, f, "")
	var retries []error
	s.OnRetry = func(err error, wait time.Duration) {
		retries = append(retries, err)
		if wait > time.Second {
			t.Errorf("waits %s before reconnecting, want the server's retry: 10ms, doubling", wait)
		}
	}
	var got []string
	for range 4 {
		ev := next(t, s)
		got = append(got, ev.ID+" "+ev.Type+" "+ev.Unit)
		if ev.Revision != 7 {
			t.Errorf("event %s: revision %d, want 7", ev.ID, ev.Revision)
		}
	}
	want := []string{"3.1 unit a.service", "3.2 state a.service", "3.3 unit b.service", "3.4 machine "}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events = %q, want %q", got, want)
	}
	if ids := f.lastEventIDs(); fmt.Sprint(ids) != fmt.Sprint([]string{"", "3.2", "3.3"}) {
		t.Errorf("Last-Event-ID of the connections = %q, want none, 3.2, 3.3", ids)
	}
	if len(retries) != 2 {
		t.Errorf("OnRetry called %d times (%v), want 2", len(retries), retries)
	}
	if s.LastID() != "3.4" {
		t.Errorf("LastID = %q, want 3.4", s.LastID())
	}
}

// TestEventsSince: the starting position goes out as Last-Event-ID.
func TestEventsSince(t *testing.T) {
	f := &fakeEvents{t: t, conns: []func(http.ResponseWriter, *http.Request){stream(event("3.8", "unit", "a.service"), true)}}
	s, _ := startEvents(t, f, "3.7")
	if ev := next(t, s); ev.ID != "3.8" {
		t.Errorf("first event %s, want 3.8", ev.ID)
	}
	if ids := f.lastEventIDs(); len(ids) != 1 || ids[0] != "3.7" {
		t.Errorf("Last-Event-ID = %q, want 3.7", ids)
	}
}

// TestEventsReset: a new leader that does not know the position says
// "reset", and the stream goes on from the reset's position.
func TestEventsReset(t *testing.T) {
	f := &fakeEvents{t: t, conns: []func(http.ResponseWriter, *http.Request){
		stream("retry: 10\n\n"+event("3.1", "unit", "a.service"), false),
		func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, `{"error":"no engine leader is elected yet; retry shortly","code":"unavailable"}`, http.StatusServiceUnavailable)
		},
		stream("id: 9.40\nevent: reset\ndata: {\"id\":\"9.40\",\"type\":\"reset\"}\n\n"+event("9.41", "state", "a.service"), false),
	}}
	s, _ := startEvents(t, f, "")
	if ev := next(t, s); ev.ID != "3.1" {
		t.Fatalf("first event %s, want 3.1", ev.ID)
	}
	if ev := next(t, s); ev.Type != "reset" || ev.ID != "9.40" {
		t.Errorf("after the leader change: %+v, want a reset event 9.40", ev)
	}
	if ev := next(t, s); ev.ID != "9.41" {
		t.Errorf("after the reset: %s, want 9.41", ev.ID)
	}
	if ids := f.lastEventIDs(); fmt.Sprint(ids[:3]) != fmt.Sprint([]string{"", "3.1", "3.1"}) {
		t.Errorf("Last-Event-ID of the connections = %q, want none, 3.1 (refused with 503), 3.1", ids)
	}
}

// TestEventsRefused: an answer that is not "retry later" ends the stream.
func TestEventsRefused(t *testing.T) {
	f := &fakeEvents{t: t, conns: []func(http.ResponseWriter, *http.Request){
		stream("retry: 10\n\n"+event("3.1", "unit", "a.service"), false),
		func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":"bad position","code":"bad_request"}`)
		},
	}}
	s, _ := startEvents(t, f, "")
	next(t, s)
	_, err := s.Next()
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != "bad_request" {
		t.Errorf("Next after a 400 = %v, want the APIError", err)
	}

	// At the start, any refusal is returned by Events itself.
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	c, _ := New(srv.URL)
	if _, err := c.Events(context.Background(), ""); !IsNotFound(err) {
		t.Errorf("Events from a server without /v1/events = %v, want not found", err)
	}
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<html>")
	}))
	defer html.Close()
	c, _ = New(html.URL)
	if _, err := c.Events(context.Background(), ""); !errors.Is(err, errNotEventStream) {
		t.Errorf("Events from an HTML page = %v, want errNotEventStream", err)
	}
}

// TestEventsIdle: a connection that goes silent (no event, no keep-alive)
// is replaced.
func TestEventsIdle(t *testing.T) {
	f := &fakeEvents{t: t, conns: []func(http.ResponseWriter, *http.Request){
		stream("retry: 10\n\n"+event("3.1", "unit", "a.service"), true), // then silence
		stream(": keep-alive\n\n"+event("3.2", "unit", "b.service"), true),
	}}
	s, _ := startEvents(t, f, "")
	s.idle = 200 * time.Millisecond
	var lost error
	s.OnRetry = func(err error, _ time.Duration) { lost = err }
	next(t, s)
	if ev := next(t, s); ev.ID != "3.2" {
		t.Errorf("after the silent connection: %s, want 3.2", ev.ID)
	}
	if lost == nil || !strings.Contains(lost.Error(), "nothing received") {
		t.Errorf("OnRetry got %v, want the idle timeout", lost)
	}
}

// TestEventsCancel: Next returns as soon as the context ends or the
// stream is closed, even mid-wait.
func TestEventsCancel(t *testing.T) {
	for _, how := range []string{"cancel", "close"} {
		f := &fakeEvents{t: t, conns: []func(http.ResponseWriter, *http.Request){stream(": hello\n\n", true)}}
		s, cancel := startEvents(t, f, "")
		go func() {
			// Mid-wait: once Next is parked reading the stream (or the
			// bound passed, and Next fails below if it was not).
			waitfor.Poll(5*time.Second, waitfor.Parked("client.(*EventStream).Next"))
			if how == "cancel" {
				cancel()
			} else {
				s.Close()
			}
		}()
		start := time.Now()
		_, err := s.Next()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: Next = %v, want context.Canceled", how, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: Next took %s to return", how, d)
		}
	}
}

func TestEventsIterator(t *testing.T) {
	f := &fakeEvents{t: t, conns: []func(http.ResponseWriter, *http.Request){
		stream(event("3.1", "unit", "a.service")+event("3.2", "unit", "b.service")+event("3.3", "unit", "c.service"), true),
	}}
	s, _ := startEvents(t, f, "")
	var units []string
	for ev, err := range s.All() {
		if err != nil {
			t.Fatal(err)
		}
		units = append(units, ev.Unit)
		if len(units) == 2 {
			break
		}
	}
	if fmt.Sprint(units) != "[a.service b.service]" {
		t.Errorf("units = %v", units)
	}
	if ev := next(t, s); ev.Unit != "c.service" {
		t.Errorf("after the loop: %s, want c.service", ev.Unit)
	}
}

// TestEventsMalformed: an event that does not decode is an error, and the
// stream goes on.
func TestEventsMalformed(t *testing.T) {
	f := &fakeEvents{t: t, conns: []func(http.ResponseWriter, *http.Request){
		stream("id: 3.1\nevent: unit\ndata: {nope\n\n"+event("3.2", "unit", "b.service"), true),
	}}
	s, _ := startEvents(t, f, "")
	if _, err := s.Next(); !errors.Is(err, ErrMalformedEvent) {
		t.Errorf("Next on bad JSON = %v, want an error", err)
	}
	if ev := next(t, s); ev.ID != "3.2" {
		t.Errorf("after the bad event: %s, want 3.2", ev.ID)
	}
}
