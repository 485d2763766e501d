package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// TestFollowLimit: a daemon serves at most cap(follows) journal follows at
// once; the next is answered 429 naming the limit, reads without follow
// are not counted, and a slot freed by a client that left is taken again.
func TestFollowLimit(t *testing.T) {
	const n = 3
	release := make(chan struct{})
	entered := make(chan struct{}, n+1)
	s := &server{log: slog.New(slog.DiscardHandler)}
	h := s.limit(newStreamSet("journal follows", n, n), isFollow, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		if isFollow(r) {
			entered <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	})
	ts := httptest.NewServer(h)
	defer ts.Close()
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	get := func(ctx context.Context, query string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/v1/local/journal/a.service"+query, nil)
		return http.DefaultClient.Do(req)
	}
	var first context.CancelFunc
	for i := range n {
		fctx, fcancel := context.WithCancel(ctx)
		defer fcancel()
		if i == 0 {
			first = fcancel
		}
		resp, err := get(fctx, "?follow=true")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("follow %d: %v %v", i+1, resp, err)
		}
		<-entered
	}
	resp, err := get(ctx, "?follow=1")
	if err != nil {
		t.Fatal(err)
	}
	var e apiv1.Error
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(e.Error, fmt.Sprintf("%d journal follows, its limit", n)) {
		t.Errorf("follow %d = %d %q, want 429 naming the limit", n+1, resp.StatusCode, e.Error)
	}
	if resp, err := get(ctx, "?lines=5"); err != nil || resp.StatusCode != 200 {
		t.Errorf("a read without follow beside %d follows: %v %v, want 200", n, resp, err)
	}
	first() // the first follower leaves: its slot frees
	waitfor.Until(t, 5*time.Second, "a follow taken after one left", func() error {
		fctx, fcancel := context.WithCancel(ctx)
		t.Cleanup(fcancel)
		resp, err := get(fctx, "?follow=true")
		if err != nil {
			return err
		}
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s", resp.Status)
		}
		return nil
	})
	<-entered
}

// TestLongLivedStreams: the server's read and write timeouts end ordinary
// requests that outlast them, but not the event stream nor a journal
// follow, which clear them.
func TestLongLivedStreams(t *testing.T) {
	const timeout = 200 * time.Millisecond
	stream := func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		for i := range 8 { // 4 × timeout
			if _, err := fmt.Fprintf(w, "line %d\n", i); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(timeout / 2) // the stream's pace, past the timeouts: what the test is about
		}
		fmt.Fprintln(w, "end")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/events", longLived(stream))
	mux.HandleFunc("/v1/units/a.service/journal", longLived(stream))
	ts := httptest.NewUnstartedServer(mux)
	ts.Config.ReadTimeout, ts.Config.WriteTimeout = timeout, timeout
	ts.Start()
	defer ts.Close()
	for _, tc := range []struct {
		path string
		full bool
	}{
		{"/v1/events", true},
		{"/v1/units/a.service/journal?follow=true", true},
		{"/v1/units/a.service/journal?lines=10", false}, // not a stream: the timeout holds
	} {
		resp, err := http.Get(ts.URL + tc.path)
		if err != nil {
			t.Fatalf("GET %s: %v", tc.path, err)
		}
		var lines []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		got := len(lines) > 0 && lines[len(lines)-1] == "end"
		if got != tc.full {
			t.Errorf("GET %s outlasting the %v timeouts: read %q; want it whole: %v", tc.path, timeout, lines, tc.full)
		}
	}
}
