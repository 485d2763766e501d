package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/api"
	"github.com/flotilla/flotilla/internal/cli"
	"github.com/flotilla/flotilla/internal/election"
	"github.com/flotilla/flotilla/internal/etcdtest"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// TestEtcdUnreachable: a leader cut off from etcd answers reads with the
// X-Flotilla-Etcd-Unreachable-Since header (also through a follower),
// /v1/state says since when, /metrics has the gauge, writes answer 503
// etcd_unreachable, and the CLI prints a warning on stderr.
func TestEtcdUnreachable(t *testing.T) {
	srv := etcdtest.Start(t)
	px := srv.Proxy(t)
	c := startOn(t, px.Client(t))
	eng, leaderURL := c.eng, c.url
	// A follower without an engine forwards to the leader it last knew.
	follower := httptest.NewServer(api.New(api.Config{Machine: "m2",
		Leader: func() (election.Info, bool) {
			return election.Info{Machine: "m1", APIAddr: strings.TrimPrefix(c.url, "http://")}, true
		}}))
	t.Cleanup(follower.Close)
	if resp, body := c.do(t, "POST", "/v1/batch", batch(apiv1.UnitChange{Name: "web.service", File: okUnit, DesiredState: "launched"})); resp.StatusCode != 200 {
		t.Fatalf("batch: %s %s", resp.Status, body)
	}
	if resp, _ := c.do(t, "GET", "/v1/units", ""); resp.Header.Get(apiv1.EtcdUnreachableHeader) != "" {
		t.Errorf("header %s set while etcd answers", apiv1.EtcdUnreachableHeader)
	}

	px.Cut()
	waitfor.True(t, 10*time.Second, "the leader degraded", func() bool { _, ok := eng.EtcdUnreachableSince(); return ok })
	since, _ := eng.EtcdUnreachableSince()
	want := since.UTC().Format(time.RFC3339)
	for _, base := range []string{leaderURL, follower.URL} {
		c := &cluster{url: base}
		paths := []string{"/v1/units", "/v1/units/web.service", "/v1/unit-states", "/v1/machines", "/v1/scheduler", "/v1/state"}
		if base == leaderURL {
			paths = append(paths, "/v1/status", "/metrics") // answered by the daemon asked, not forwarded
		}
		for _, path := range paths {
			resp, body := c.do(t, "GET", path, "")
			if resp.StatusCode != 200 || resp.Header.Get(apiv1.EtcdUnreachableHeader) != want {
				t.Errorf("GET %s%s while etcd is unreachable: %s, header %q, want 200 with %q: %s",
					base, path, resp.Status, resp.Header.Get(apiv1.EtcdUnreachableHeader), want, body)
			}
		}
	}
	// A read may get the state as it was before and start a fresh one.
	var st apiv1.State
	var err error
	waitfor.True(t, 5*time.Second, "GET /v1/state saying since when etcd is unreachable", func() bool {
		_, body := c.do(t, "GET", "/v1/state", "")
		st = apiv1.State{}
		err = json.Unmarshal([]byte(body), &st)
		return err == nil && st.EtcdUnreachableSince == want
	})
	if err != nil || st.EtcdUnreachableSince != want || len(st.Units) != 1 {
		t.Errorf("GET /v1/state: %v; etcdUnreachableSince %q and %d units, want %q and 1", err, st.EtcdUnreachableSince, len(st.Units), want)
	}
	_, body := c.do(t, "GET", "/metrics", "")
	if !strings.Contains(body, "flotilla_etcd_unreachable_since_seconds ") || strings.Contains(body, "flotilla_etcd_unreachable_since_seconds 0\n") {
		t.Errorf("/metrics does not show flotilla_etcd_unreachable_since_seconds set")
	}
	for _, w := range []struct{ method, path, body string }{
		{"PUT", "/v1/units/web.service", `{"desiredState":"inactive"}`},
		{"DELETE", "/v1/units/web.service", ""},
		{"POST", "/v1/batch", batch(apiv1.UnitChange{Name: "new.service", File: okUnit})},
		{"PATCH", "/v1/machines/m1", `{"metadata":{"role":"web"}}`},
		{"PUT", "/v1/scheduler", `{"placement":"binpack"}`},
	} {
		resp, body := c.do(t, w.method, w.path, w.body)
		var e apiv1.Error
		json.Unmarshal([]byte(body), &e)
		if resp.StatusCode != 503 || e.Code != "etcd_unreachable" || !strings.Contains(e.Error, "etcd unreachable since "+want) ||
			!strings.Contains(e.Error, "nothing was changed") {
			t.Errorf("%s %s while etcd is unreachable: %s %s, want 503 etcd_unreachable naming etcd", w.method, w.path, resp.Status, body)
		}
	}

	// The CLI warns on stderr and shows the leader's memory.
	for _, base := range []string{leaderURL, follower.URL} {
		root := &cobra.Command{Use: "flotilla", SilenceErrors: true, SilenceUsage: true}
		cli.AddCommands(root)
		var out, errOut bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errOut)
		root.SetArgs([]string{"--endpoint", base, "list-units"})
		if err := root.Execute(); err != nil {
			t.Fatalf("list-units through %s: %v\n%s", base, err, errOut.String())
		}
		wantWarn := "warning: etcd unreachable since " + want + "; showing the leader's memory"
		if !strings.Contains(errOut.String(), wantWarn) || strings.Count(errOut.String(), "warning:") != 1 {
			t.Errorf("list-units through %s: stderr %q, want one %q", base, errOut.String(), wantWarn)
		}
		if !strings.Contains(out.String(), "web.service") {
			t.Errorf("list-units through %s: stdout %q, want web.service", base, out.String())
		}
	}
	px.Restore()
}

// TestReadsTaggedWhenAnswered: whether a read carries the
// X-Flotilla-Etcd-Unreachable-Since header is decided when it is answered,
// not when it arrives (issue 24). Reads keep arriving at the leader from
// the moment etcd is cut off: those that arrive while its lease is still
// valid are answered current, those that arrive once it is unconfirmed
// wait for the probe of etcd and are answered from memory once the term
// degrades; every answer given after the term degraded must carry the
// header, /v1/units, /v1/units/{name}, /v1/state, fleet's /fleet/v1/units
// and the first batch of /v1/events alike.
func TestReadsTaggedWhenAnswered(t *testing.T) {
	srv := etcdtest.Start(t)
	px := srv.Proxy(t)
	c := startOn(t, px.Client(t))
	if resp, body := c.do(t, "POST", "/v1/batch", batch(apiv1.UnitChange{Name: "web.service", File: okUnit, DesiredState: "launched"})); resp.StatusCode != 200 {
		t.Fatalf("batch: %s %s", resp.Status, body)
	}
	type answer struct {
		path   string
		at     time.Time // when the status line came
		code   int
		header string
	}
	var (
		mu      sync.Mutex
		answers []answer
		wg      sync.WaitGroup
	)
	paths := []string{"/v1/units", "/v1/units/web.service", "/v1/state", "/fleet/v1/units", "/v1/events"}
	hc := &http.Client{Timeout: 10 * time.Second}
	get := func(path string) {
		defer wg.Done()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", c.url+path, nil)
		resp, err := hc.Do(req)
		at := time.Now()
		if err != nil {
			return
		}
		if path != "/v1/events" {
			io.Copy(io.Discard, resp.Body)
		}
		resp.Body.Close()
		mu.Lock()
		answers = append(answers, answer{path, at, resp.StatusCode, resp.Header.Get(apiv1.EtcdUnreachableHeader)})
		mu.Unlock()
	}
	px.Cut()
	defer px.Restore()
	// A round of reads every 25 ms from the cut until each path has been
	// answered a few times since the term degraded.
	var since time.Time
	answeredSince := func() error {
		if since.IsZero() {
			s, ok := c.eng.EtcdUnreachableSince()
			if !ok {
				return errors.New("the leader has not degraded")
			}
			since = s
		}
		mu.Lock()
		defer mu.Unlock()
		per := map[string]int{}
		for _, a := range answers {
			if !a.at.Before(since) {
				per[a.path]++
			}
		}
		for _, p := range paths {
			if per[p] < 3 {
				return fmt.Errorf("answers since it degraded: %v, want 3 a path", per)
			}
		}
		return nil
	}
	pace := time.NewTicker(25 * time.Millisecond)
	defer pace.Stop()
	deadline := time.Now().Add(15 * time.Second)
	for err := answeredSince(); err != nil; err = answeredSince() {
		if time.Now().After(deadline) {
			wg.Wait()
			t.Fatalf("15s after etcd was cut off: %v", err)
		}
		for _, p := range paths {
			wg.Add(1)
			go get(p)
		}
		<-pace.C
	}
	wg.Wait()
	after := 0
	for _, a := range answers {
		if a.at.Before(since) {
			continue
		}
		after++
		if a.code == 200 && a.header == "" {
			t.Errorf("GET %s answered 200 without %s %v after the term degraded (at %v)",
				a.path, apiv1.EtcdUnreachableHeader, a.at.Sub(since), since.Format(time.RFC3339Nano))
		}
	}
	if after == 0 {
		t.Fatal("no read was answered after the term degraded")
	}
}

// TestStateETagDegraded: /v1/state answered from bytes encoded once still
// carries X-Flotilla-Etcd-Unreachable-Since on a degraded leader, and its
// ETag says so. A client polling with If-None-Match from before etcd is
// cut off never has a state it got without the header confirmed (304)
// once the answer would carry it, even while the snapshot served is still
// the one from before; a state got with the header is confirmed (with the
// header) while the leader is degraded, and not once etcd is back.
func TestStateETagDegraded(t *testing.T) {
	srv := etcdtest.Start(t)
	px := srv.Proxy(t)
	c := startOn(t, px.Client(t))
	if resp, body := c.do(t, "POST", "/v1/batch", batch(apiv1.UnitChange{Name: "web.service", File: okUnit, DesiredState: "launched"})); resp.StatusCode != 200 {
		t.Fatalf("batch: %s %s", resp.Status, body)
	}
	// A conditional poller, back to back, from before the cut until a
	// while after the leader degraded.
	type answer struct {
		sent, tag      string // the If-None-Match sent, the ETag got
		sentFlagged    bool   // the answer that gave sent had the header
		code           int
		header, status string
	}
	var answers []answer
	flaggedTags := map[string]bool{}
	poll := func(etag string) string {
		resp, _ := c.do(t, "GET", "/v1/state", "", "If-None-Match", etag)
		h := resp.Header.Get(apiv1.EtcdUnreachableHeader)
		answers = append(answers, answer{etag, resp.Header.Get("ETag"), flaggedTags[etag], resp.StatusCode, h, resp.Status})
		if resp.StatusCode == 200 {
			etag = resp.Header.Get("ETag")
			flaggedTags[etag] = h != ""
		}
		return etag
	}
	etag := ""
	for range 5 {
		etag = poll(etag)
	}
	px.Cut()
	defer px.Restore()
	// Polled until the leader has degraded and ten answers carried the
	// header.
	var since time.Time
	flaggedSince := func() error {
		if since.IsZero() {
			s, ok := c.eng.EtcdUnreachableSince()
			if !ok {
				return errors.New("the leader has not degraded")
			}
			since = s
		}
		n := 0
		for _, a := range answers {
			if a.header != "" {
				n++
			}
		}
		if n < 10 {
			return fmt.Errorf("%d answers carried the header", n)
		}
		return nil
	}
	deadline := time.Now().Add(15 * time.Second)
	for err := flaggedSince(); err != nil; err = flaggedSince() {
		if time.Now().After(deadline) {
			t.Fatalf("15s after etcd was cut off: %v", err)
		}
		etag = poll(etag)
	}
	want := since.UTC().Format(time.RFC3339)
	for _, a := range answers {
		if a.header == "" {
			continue
		}
		if a.header != want || a.code != 200 && a.code != http.StatusNotModified {
			t.Errorf("If-None-Match %s: %s, header %q; want 200 or 304 with %q", a.sent, a.status, a.header, want)
		}
		if a.code == http.StatusNotModified && !a.sentFlagged {
			t.Errorf("If-None-Match %s, got without the header, confirmed (304) by an answer with it", a.sent)
		}
		if a.code == 200 && a.tag == a.sent {
			t.Errorf("If-None-Match %s: 200 with the same ETag", a.sent)
		}
	}
	// While degraded: a flagged state is confirmed, with the header; the
	// same ETag twice is the same bytes, both flagged.
	var during string
	waitfor.True(t, 10*time.Second, "a 304 while etcd is unreachable", func() bool {
		resp, body := c.do(t, "GET", "/v1/state", "", "If-None-Match", during)
		if resp.Header.Get(apiv1.EtcdUnreachableHeader) != want {
			t.Fatalf("GET /v1/state while degraded: %s without the header: %s", resp.Status, body)
		}
		if resp.StatusCode == http.StatusNotModified {
			return true
		}
		during = resp.Header.Get("ETag")
		return false
	})
	r1, b1 := c.do(t, "GET", "/v1/state", "")
	r2, b2 := c.do(t, "GET", "/v1/state", "")
	if r1.Header.Get(apiv1.EtcdUnreachableHeader) != want || r2.Header.Get(apiv1.EtcdUnreachableHeader) != want {
		t.Errorf("GET /v1/state twice while degraded: headers %q and %q, want %q", r1.Header.Get(apiv1.EtcdUnreachableHeader), r2.Header.Get(apiv1.EtcdUnreachableHeader), want)
	}
	if r1.Header.Get("ETag") == r2.Header.Get("ETag") && b1 != b2 {
		t.Errorf("two answers with ETag %s differ", r1.Header.Get("ETag"))
	}

	px.Restore()
	waitfor.True(t, 30*time.Second, "a current answer once etcd is back", func() bool {
		resp, body := c.do(t, "GET", "/v1/state", "", "If-None-Match", during)
		if resp.StatusCode == http.StatusNotModified && resp.Header.Get(apiv1.EtcdUnreachableHeader) == "" {
			t.Fatalf("If-None-Match %s (degraded) confirmed by a current leader: %s", during, body)
		}
		return resp.StatusCode == 200 && resp.Header.Get(apiv1.EtcdUnreachableHeader) == ""
	})
}
