package api_test

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/agent"
	"github.com/flotilla/flotilla/internal/api"
	"github.com/flotilla/flotilla/internal/driver/sim"
	"github.com/flotilla/flotilla/internal/election"
	"github.com/flotilla/flotilla/internal/engine"
	"github.com/flotilla/flotilla/internal/etcdtest"
	"github.com/flotilla/flotilla/internal/metrics"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/state"
	"github.com/flotilla/flotilla/internal/waitfor"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// cluster is one engine (leading), one sim agent and the API on httptest.
type cluster struct {
	url string
	eng *engine.Engine
}

// start runs the cluster; opts may change the API's configuration.
func start(t *testing.T, opts ...func(*api.Config, *clientv3.Client)) *cluster {
	t.Helper()
	return startOn(t, etcdtest.Start(t).Client(t), opts...)
}

// startOn is start with the etcd client cli.
func startOn(t *testing.T, cli *clientv3.Client, opts ...func(*api.Config, *clientv3.Client)) *cluster {
	t.Helper()
	return startElected(t, cli, time.Second, opts...)
}

// startElected is startOn with the engine's election TTL.
func startElected(t *testing.T, cli *clientv3.Client, electionTTL time.Duration, opts ...func(*api.Config, *clientv3.Client)) *cluster {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ms := metrics.New()
	ts := httptest.NewUnstartedServer(nil)
	eng, err := engine.New(engine.Config{Machine: "m1", Client: cli, ElectionTTL: electionTTL, AgentTTL: max(5*time.Second, 3*electionTTL),
		GRPCAddr: ln.Addr().String(), APIAddr: ts.Listener.Addr().String(), Metrics: ms})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	agentpb.RegisterEngineServer(gs, eng)
	go gs.Serve(ln)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { eng.Run(ctx); done <- struct{}{} }()
	a, err := agent.New(agent.Config{Machine: agent.Machine{ID: "m1", IP: "127.0.0.1"}, TTL: 5 * time.Second,
		Leaders: func(ctx context.Context) <-chan election.Info {
			return election.Observe(ctx, cli, registry.Keys{}.Election())
		}})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := sim.New(sim.Config{Machine: "m1", Notify: a.Notify})
	a.SetDriver(d)
	go func() { a.Run(ctx); done <- struct{}{} }()
	acfg := api.Config{Machine: "m1", Engine: eng, Driver: d, Metrics: ms, MaxBodyBytes: 1 << 20}
	for _, o := range opts {
		o(&acfg, cli)
	}
	ts.Config.Handler = api.New(acfg)
	ts.Start()
	t.Cleanup(func() { ts.Close(); cancel(); <-done; <-done; gs.Stop() })
	c := &cluster{url: ts.URL, eng: eng}
	waitfor.Until(t, 10*time.Second, "the engine leading with one machine", func() error {
		if ms, err := eng.Machines(); len(ms) != 1 {
			return fmt.Errorf("machines %v, %v", ms, err)
		}
		return nil
	})
	return c
}

func (c *cluster) do(t *testing.T, method, path, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, c.url+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultTransport.RoundTrip(req) // no transparent gzip
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func batch(units ...apiv1.UnitChange) string {
	b, _ := json.Marshal(apiv1.Batch{Units: units})
	return string(b)
}

const okUnit = "[Service]\nExecStart=/bin/true\n"

// TestBadInput: every kind of bad input gets a 4xx naming what is wrong, and
// changes nothing.
func TestBadInput(t *testing.T) {
	c := start(t)
	big := strings.Repeat("x", 2<<20)
	for _, tc := range []struct {
		name, method, path, body string
		code                     int
		msg                      string
	}{
		{"malformed unit", "POST", "/v1/batch", batch(apiv1.UnitChange{Name: "a.service", File: "[Service\nExecStart=/bin/true\n"}), 400, "a.service"},
		{"unknown option", "POST", "/v1/batch", batch(apiv1.UnitChange{Name: "a.service", File: okUnit + "ExecStrat=/bin/true\n"}), 400, "ExecStrat"},
		{"unknown section", "POST", "/v1/batch", batch(apiv1.UnitChange{Name: "a.service", File: okUnit + "[X-Flet]\nGlobal=true\n"}), 400, "X-Flet"},
		{"bad name", "POST", "/v1/batch", batch(apiv1.UnitChange{Name: "../etc/passwd", File: okUnit}), 400, "../etc/passwd"},
		{"conflicting constraints", "POST", "/v1/batch", batch(apiv1.UnitChange{Name: "a.service", File: okUnit + "[X-Fleet]\nMachineID=m1\nGlobal=true\n"}), 400, "MachineID"},
		{"bad desired state", "POST", "/v1/batch", batch(apiv1.UnitChange{Name: "a.service", File: okUnit, DesiredState: "running"}), 400, "running"},
		{"one bad unit fails the batch", "POST", "/v1/batch", batch(apiv1.UnitChange{Name: "a.service", File: okUnit}, apiv1.UnitChange{Name: "b.service", File: "nope"}), 400, "b.service"},
		{"unknown JSON field", "POST", "/v1/batch", `{"unitz": []}`, 400, "unitz"},
		{"oversized body", "POST", "/v1/batch", `{"units":[{"name":"a.service","file":"` + big + `"}]}`, 413, "exceeds"},
		{"start a unit never submitted", "PUT", "/v1/units/ghost.service", `{"desiredState":"launched"}`, 404, "ghost.service"},
		{"unknown endpoint", "GET", "/v1/nope", "", 404, "/v1/nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := c.do(t, tc.method, tc.path, tc.body)
			var e apiv1.Error
			json.Unmarshal([]byte(body), &e)
			if resp.StatusCode != tc.code || !strings.Contains(e.Error, tc.msg) {
				t.Errorf("%s %s = %d %q, want %d naming %q", tc.method, tc.path, resp.StatusCode, e.Error, tc.code, tc.msg)
			}
		})
	}
	if us, _ := c.eng.Units(nil); len(us) != 0 {
		t.Errorf("bad requests left units behind: %v", us)
	}
}

// TestStateAndEvents: /v1/state answers with ETag, 304, gzip and filters;
// /v1/events streams the changes; /metrics shows them.
func TestStateAndEvents(t *testing.T) {
	c := start(t)
	// Follow events from now on.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", c.url+"/v1/events", nil)
	evResp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer evResp.Body.Close()
	if ct := evResp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("events Content-Type = %q", ct)
	}

	var units []apiv1.UnitChange
	for i := range 5 {
		units = append(units, apiv1.UnitChange{Name: fmt.Sprintf("web@%d.service", i), File: okUnit, DesiredState: "launched"})
	}
	units = append(units, apiv1.UnitChange{Name: "db.service", File: okUnit + "[X-Fleet]\nMachineMetadata=role=db\n", DesiredState: "launched"})
	if resp, body := c.do(t, "POST", "/v1/batch", batch(units...)); resp.StatusCode != 200 {
		t.Fatalf("batch: %d %s", resp.StatusCode, body)
	}

	// The event stream shows web@0 becoming active.
	sc := bufio.NewScanner(evResp.Body)
	sawActive := false
	var lastID string
	for !sawActive && sc.Scan() {
		line := sc.Text()
		if id, ok := strings.CutPrefix(line, "id: "); ok {
			lastID = id
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var ev apiv1.Event
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatalf("event %q: %v", data, err)
			}
			sawActive = ev.Type == "state" && ev.Unit == "web@0.service" && ev.Active == "active" && ev.ID == lastID && ev.Revision > 0
		}
	}
	if !sawActive {
		t.Fatal("the event stream ended without web@0.service becoming active")
	}

	var st apiv1.State
	var etag string
	waitfor.Until(t, 10*time.Second, "5 units active in /v1/state", func() error {
		resp, body := c.do(t, "GET", "/v1/state", "")
		json.Unmarshal([]byte(body), &st)
		etag = resp.Header.Get("ETag")
		active := 0
		for _, u := range st.Units {
			if u.Active == "active" {
				active++
			}
		}
		if active != 5 {
			return fmt.Errorf("%d active", active)
		}
		return nil
	})
	if len(st.Units) != 6 || st.Total != 6 || len(st.Machines) != 1 || st.Leader != "m1" || st.Revision == 0 {
		t.Fatalf("state = %+v", st)
	}
	// A read may get the state as it was and start a fresh one: a 200 with
	// a new ETag means the state moved on, and the new one is the current.
	waitfor.Until(t, 10*time.Second, "If-None-Match with the current ETag answered 304", func() error {
		resp, _ := c.do(t, "GET", "/v1/state", "", "If-None-Match", etag)
		switch newTag := resp.Header.Get("ETag"); {
		case resp.StatusCode == http.StatusNotModified:
			return nil
		case resp.StatusCode != 200 || newTag == etag:
			t.Fatalf("If-None-Match with the current ETag %s = %d with ETag %s, want 304", etag, resp.StatusCode, newTag)
		default:
			etag = newTag
		}
		return fmt.Errorf("a new state each time, the last %s", etag)
	})
	resp, body := c.do(t, "GET", "/v1/state?state=unplaced", "", "Accept-Encoding", "gzip")
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("no gzip: %v", resp.Header)
	}
	zr, err := gzip.NewReader(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := io.ReadAll(zr)
	var unplaced apiv1.State
	json.Unmarshal(plain, &unplaced)
	if len(unplaced.Units) != 1 || unplaced.Units[0].Name != "db.service" || !strings.Contains(unplaced.Units[0].Reason, "role=db") {
		t.Errorf("state=unplaced = %+v, want db.service with its reason", unplaced.Units)
	}
	_, body = c.do(t, "GET", "/v1/state?unit=web@*&limit=2", "")
	var page apiv1.State
	json.Unmarshal([]byte(body), &page)
	if len(page.Units) != 2 || page.Total != 5 || page.Next != "web@1.service" {
		t.Errorf("first page = %d units, total %d, next %q; want 2, 5, web@1.service", len(page.Units), page.Total, page.Next)
	}
	if resp, _ := c.do(t, "GET", "/v1/state?limit=x", ""); resp.StatusCode != 400 {
		t.Errorf("limit=x = %d, want 400", resp.StatusCode)
	}

	// Resuming from an unknown position gets a reset first.
	rreq, _ := http.NewRequestWithContext(ctx, "GET", c.url+"/v1/events", nil)
	rreq.Header.Set("Last-Event-ID", "999.1")
	rresp, err := http.DefaultClient.Do(rreq)
	if err != nil {
		t.Fatal(err)
	}
	rsc := bufio.NewScanner(rresp.Body)
	for rsc.Scan() {
		if strings.HasPrefix(rsc.Text(), "event: ") {
			if rsc.Text() != "event: reset" {
				t.Errorf("first event after an unknown Last-Event-ID = %q, want reset", rsc.Text())
			}
			break
		}
	}
	rresp.Body.Close()

	_, body = c.do(t, "GET", "/metrics", "")
	for _, want := range []string{`flotilla_units{active="active",desired="launched",health="healthy"} 5`, "flotilla_units_unplaced 1", "flotilla_machines_up 1",
		"flotilla_agent_streams 1", `flotilla_scheduling_latency_seconds_count{phase="active"}`, "flotilla_reconcile_duration_seconds_count",
		`flotilla_etcd_request_duration_seconds_count{kind="txn"}`, "flotilla_is_leader 1", "flotilla_state_request_duration_seconds_count"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestStateFromEtcd: a daemon that cannot reach the leader answers
// /v1/state from etcd's durable record, and says so in a header.
func TestStateFromEtcd(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	deadAddr := dead.Listener.Addr().String()
	dead.Close() // nothing listens there any more
	durable := func(ctx context.Context) (*state.Snapshot, error) {
		return &state.Snapshot{Revision: 42, Units: []state.Unit{
			state.NewUnit(apiv1.StateUnit{Name: "b.service", DesiredState: "launched", Machine: "m2"}),
			state.NewUnit(apiv1.StateUnit{Name: "a.service", DesiredState: "inactive"})}}, nil
	}
	h := api.New(api.Config{Machine: "m9", Durable: durable,
		Leader: func() (election.Info, bool) { return election.Info{Machine: "m1", APIAddr: deadAddr}, true }})
	ts := httptest.NewServer(h)
	defer ts.Close()
	resp, err := http.Get(ts.URL + "/v1/state")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st apiv1.State
	json.NewDecoder(resp.Body).Decode(&st)
	if resp.StatusCode != 200 || resp.Header.Get("X-Flotilla-State-Source") != "etcd" {
		t.Fatalf("GET /v1/state with the leader unreachable = %d, source %q; want 200 from etcd", resp.StatusCode, resp.Header.Get("X-Flotilla-State-Source"))
	}
	if st.Revision != 42 || len(st.Units) != 2 || st.Units[0].Name != "a.service" {
		t.Errorf("state from etcd = %+v, want revision 42 and both units in name order", st)
	}
	// Its ETag is etcd's revision: confirmed while etcd has not changed.
	if tag := resp.Header.Get("ETag"); tag != `"etcd.42"` {
		t.Errorf("ETag of the state from etcd = %s, want \"etcd.42\"", tag)
	}
	req, _ := http.NewRequest("GET", ts.URL+"/v1/state", nil)
	req.Header.Set("If-None-Match", `"etcd.42"`)
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match \"etcd.42\" on the state from etcd: %s, want 304", resp2.Status)
	}
}
