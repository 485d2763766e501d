package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flotilla/flotilla/api"
)

// Reconnection and liveness of an event stream.
const (
	// eventsRetryMin is the first wait before reconnecting, unless the
	// server sent a retry: field; the wait doubles up to eventsRetryMax.
	eventsRetryMin = 250 * time.Millisecond
	eventsRetryMax = 5 * time.Second
	// eventsIdleTimeout: the server writes a comment every 15s on an idle
	// stream, so a connection silent for this long is dead (a half-open
	// TCP connection, a stuck proxy) and is replaced.
	eventsIdleTimeout = 45 * time.Second
	// maxEventLine bounds one line of the stream.
	maxEventLine = 8 << 20
)

// ErrMalformedEvent is the error of an event whose data does not decode;
// the stream goes on after it.
var ErrMalformedEvent = errors.New("malformed event")

// EventStream follows GET /v1/events (Server-Sent Events). It reconnects
// by itself when the connection drops or the leader changes, resuming after
// the last event it delivered (Last-Event-ID), so no event is lost or
// repeated; when the server no longer knows that position it sends an event
// of type "reset": re-read the state (e.g. /v1/state) and go on.
//
// An EventStream is not safe for concurrent use, except Close.
type EventStream struct {
	c      *Client
	ctx    context.Context
	cancel context.CancelFunc

	// OnRetry, if set, is called before each reconnection with what ended
	// the previous connection and how long the stream waits to reconnect.
	OnRetry func(err error, wait time.Duration)

	lastID  string
	retry   time.Duration // the server's retry:, 0 if none
	backoff time.Duration // the next wait before reconnecting, 0: the first
	conn    *eventConn
	lost    error // what ended the last connection, for OnRetry
	idle    time.Duration

	closeOnce sync.Once
}

// eventConn is one HTTP connection of a stream.
type eventConn struct {
	body   io.ReadCloser
	cancel context.CancelFunc
	timer  *time.Timer
	sse    *sseReader
}

func (ec *eventConn) close() {
	ec.timer.Stop()
	ec.cancel()
	ec.body.Close()
}

// Events opens the cluster's event stream from position since: an event ID
// ("TERM.SEQ") to resume after, or "" for the events from now on. It
// returns once the server has accepted the stream, so a state read after
// Events returns is at least as recent as the stream's start: apply the
// events to it. The stream ends when ctx is done or Close is called.
func (c *Client) Events(ctx context.Context, since string) (*EventStream, error) {
	ctx, cancel := context.WithCancel(ctx)
	s := &EventStream{c: c, ctx: ctx, cancel: cancel, lastID: since, idle: eventsIdleTimeout}
	if err := s.connect(); err != nil {
		cancel()
		return nil, err
	}
	return s, nil
}

// LastID is the position of the last event delivered (or the position the
// stream started from): give it to Events to resume there later.
func (s *EventStream) LastID() string { return s.lastID }

// Close ends the stream; a Next in progress returns.
func (s *EventStream) Close() error {
	s.closeOnce.Do(s.cancel)
	return nil
}

// Next returns the next event, waiting as long as it takes and
// reconnecting as needed. It returns an error when the stream's context is
// done or the stream is closed (the context's error), when the server
// refuses the stream for good (an *APIError that IsUnavailable does not
// match), or for an event it cannot decode (ErrMalformedEvent; the stream
// goes on after it).
func (s *EventStream) Next() (api.Event, error) {
	for {
		if s.conn == nil {
			if err := s.reconnect(); err != nil {
				return api.Event{}, err
			}
		}
		// The idle timer runs only while Next reads: a caller slow to come
		// back does not make a healthy connection look dead.
		s.conn.timer.Reset(s.idle)
		raw, err := s.conn.sse.next()
		if err == nil {
			s.conn.timer.Stop()
		}
		if err != nil {
			s.conn.close()
			s.conn = nil
			if s.ctx.Err() != nil {
				return api.Event{}, s.ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				err = errors.New("the server ended the stream")
			} else if errors.Is(err, context.Canceled) {
				err = fmt.Errorf("nothing received for %s", s.idle)
			}
			s.lost = err
			continue
		}
		if raw.retry > 0 {
			s.retry = raw.retry
		}
		s.lastID = raw.lastID
		if raw.data == "" {
			continue // only an ID or a retry: nothing to deliver
		}
		s.backoff = 0 // this connection works
		var ev api.Event
		if err := json.Unmarshal([]byte(raw.data), &ev); err != nil {
			return api.Event{}, fmt.Errorf("event %s: %w: %q: %v", raw.lastID, ErrMalformedEvent, truncate(raw.data, 200), err)
		}
		if ev.Type == "" {
			ev.Type = raw.typ
		}
		if ev.ID == "" {
			ev.ID = raw.lastID
		}
		return ev, nil
	}
}

// All returns the stream as an iterator: for ev, err := range s.All().
// It stops after the first error.
func (s *EventStream) All() iter.Seq2[api.Event, error] {
	return func(yield func(api.Event, error) bool) {
		for {
			ev, err := s.Next()
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
}

// reconnect waits (doubling from the server's retry: or eventsRetryMin)
// and connects again, until it works, the error is for good, or the stream
// ends.
func (s *EventStream) reconnect() error {
	for {
		wait := s.backoff
		if wait == 0 {
			wait = s.retry
			if wait == 0 {
				wait = eventsRetryMin
			}
		}
		s.backoff = min(2*wait, eventsRetryMax)
		if s.OnRetry != nil && s.lost != nil {
			s.OnRetry(s.lost, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return s.ctx.Err()
		case <-t.C:
		}
		err := s.connect()
		if err == nil {
			s.lost = nil
			return nil
		}
		if s.ctx.Err() != nil {
			return s.ctx.Err()
		}
		if !isTransient(err) {
			return err
		}
		s.lost = err
	}
}

// errNotEventStream is an answer that is not an event stream: a server
// without /v1/events, or something else at the endpoint.
var errNotEventStream = errors.New("not an event stream")

// isTransient reports whether a failure to connect may go away: the
// connection broke or timed out, or the server said it cannot answer now
// (no leader yet), as opposed to refusing the request.
func isTransient(err error) bool {
	if errors.Is(err, errNotEventStream) {
		return false
	}
	var ae *APIError
	return !errors.As(err, &ae) || IsUnavailable(err)
}

// connect opens one connection, resuming after s.lastID.
func (s *EventStream) connect() error {
	idx := s.c.cur.Load()
	err := s.connectAt(s.c.eps[idx])
	if err != nil && isTransient(err) {
		// The next attempt goes to the next endpoint (of several).
		s.c.cur.CompareAndSwap(idx, (idx+1)%int32(len(s.c.eps)))
	}
	return err
}

// connectAt opens one connection to endpoint e.
func (s *EventStream) connectAt(e *apiEndpoint) error {
	u := e.abs(s.c.url(nil, "v1", "events"))
	ctx, cancel := context.WithCancel(s.ctx)
	req, err := s.c.newRequest(ctx, http.MethodGet, u, nil)
	if err != nil {
		cancel()
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-cache")
	if s.lastID != "" {
		req.Header.Set("Last-Event-ID", s.lastID)
	}
	// Until the headers come, the client's timeout applies; after, the
	// idle timer does.
	var timer *time.Timer
	if s.c.timeout > 0 {
		timer = time.AfterFunc(s.c.timeout, cancel)
	}
	resp, err := e.hc.Do(req)
	if timer != nil && !timer.Stop() && s.ctx.Err() == nil {
		if err == nil {
			resp.Body.Close()
		}
		cancel()
		return s.c.timeoutError(e, req)
	}
	if err != nil {
		cancel()
		return s.c.requestError(s.ctx, e, req, err)
	}
	s.c.noteAnswer(resp)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer cancel()
		defer resp.Body.Close()
		return s.c.readAPIError(e, resp)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		resp.Body.Close()
		cancel()
		return fmt.Errorf("GET %s at %s: answered %q: %w", u.Path, e.name, ct, errNotEventStream)
	}
	ec := &eventConn{body: resp.Body, cancel: cancel, timer: time.AfterFunc(s.idle, cancel)}
	ec.sse = newSSEReader(resp.Body, s.lastID, func() { ec.timer.Reset(s.idle) })
	s.conn = ec
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// sseEvent is one dispatched Server-Sent Event.
type sseEvent struct {
	typ    string        // "message" when the event named none
	data   string        // the data: lines joined by "\n"
	lastID string        // the stream's last event ID after this event
	retry  time.Duration // a retry: field since the previous event, or 0
}

// sseReader parses the text/event-stream format as the HTML standard
// defines it (§9.2.6): lines end in LF, CRLF or CR; a blank line
// dispatches; ":" starts a comment; fields are event, data, id and retry.
type sseReader struct {
	sc     *bufio.Scanner
	lastID string
	onLine func() // called for every line read, comments included
}

func newSSEReader(r io.Reader, lastID string, onLine func()) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventLine)
	sc.Split(scanSSELines)
	return &sseReader{sc: sc, lastID: lastID, onLine: onLine}
}

// next returns the next event; at the end of the stream, io.EOF (an event
// not terminated by a blank line is dropped, as the standard says).
func (p *sseReader) next() (sseEvent, error) {
	var (
		typ     string
		data    strings.Builder
		hasData bool
		id      = p.lastID
		retry   time.Duration
	)
	for p.sc.Scan() {
		if p.onLine != nil {
			p.onLine()
		}
		line := p.sc.Bytes()
		if len(line) == 0 {
			moved := id != p.lastID
			p.lastID = id
			if !hasData {
				if retry > 0 || moved {
					return sseEvent{lastID: id, retry: retry}, nil
				}
				typ = ""
				continue
			}
			if typ == "" {
				typ = "message"
			}
			return sseEvent{typ: typ, data: data.String(), lastID: id, retry: retry}, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			typ = string(value)
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.Write(value)
			hasData = true
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				id = string(value)
			}
		case "retry":
			if ms, err := strconv.ParseUint(string(value), 10, 31); err == nil && isDigits(value) {
				retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
	if err := p.sc.Err(); err != nil {
		return sseEvent{}, err
	}
	return sseEvent{}, io.EOF
}

func isDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}

// scanSSELines splits at LF, CRLF or CR.
func scanSSELines(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if atEOF && len(data) == 0 {
		return 0, nil, nil
	}
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		if data[i] == '\n' {
			return i + 1, data[:i], nil
		}
		switch {
		case i+1 < len(data) && data[i+1] == '\n':
			return i + 2, data[:i], nil
		case i+1 < len(data) || atEOF:
			return i + 1, data[:i], nil
		}
		return 0, nil, nil // a CR at the end of what we have: is an LF next?
	}
	if atEOF {
		return len(data), data, nil
	}
	return 0, nil, nil
}
