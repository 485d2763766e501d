package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/daemon/daemontest"
)

// testServer is a real cluster (daemontest: embedded etcd, engine, agents,
// API) behind a recording proxy: the commands under test talk to URL, and
// the test can count and inspect the requests they sent, and act before a
// batch reaches the cluster.
type testServer struct {
	URL     string
	api     *client.Client // straight to the cluster
	cluster *daemontest.Cluster
	now     time.Time // the commands' clock, if set

	mu       sync.Mutex
	requests map[string]int
	log      []request
	onBatch  func(apiv1.Batch)
}

// request is a request the commands sent.
type request struct {
	Method, Path string
	Query        string
	Body         []byte
}

// newServer starts a cluster of machines with the IDs, IPs and metadata
// of these, units run by the sim driver; the first leads.
func newServer(t *testing.T, machines ...apiv1.Machine) *testServer {
	t.Helper()
	var ms []daemontest.Machine
	for _, m := range machines {
		ms = append(ms, machine(m))
	}
	return newCluster(t, ms...)
}

// machine is the test cluster's machine with m's ID, IP and metadata.
func machine(m apiv1.Machine) daemontest.Machine {
	return daemontest.Machine{ID: m.ID, IP: m.IP, Metadata: m.Metadata}
}

// newCluster starts a cluster of the machines, the first leading, and
// returns once every machine is up.
func newCluster(t *testing.T, machines ...daemontest.Machine) *testServer {
	t.Helper()
	c := daemontest.Start(t, machines...)
	target, err := url.Parse(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{requests: map[string]int{}, cluster: c}
	if s.api, err = client.New(c.URL); err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1 // journal -f streams
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		s.mu.Lock()
		s.requests[r.Method+" "+r.URL.Path]++
		s.log = append(s.log, request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Body: body})
		onBatch := s.onBatch
		s.mu.Unlock()
		if onBatch != nil && r.Method == http.MethodPost && r.URL.Path == "/v1/batch" {
			var b apiv1.Batch
			if json.Unmarshal(body, &b) == nil {
				onBatch(b)
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	s.URL = ts.URL
	return s
}

// Requests returns how many requests had the method and path, e.g.
// Requests("POST /v1/batch").
func (s *testServer) Requests(methodPath string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[methodPath]
}

// Log returns the requests the commands sent, in order.
func (s *testServer) Log() []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// Batches returns the bodies of the POST /v1/batch requests sent, in order.
func (s *testServer) Batches() []apiv1.Batch {
	var bs []apiv1.Batch
	for _, r := range s.Log() {
		if r.Method == http.MethodPost && r.Path == "/v1/batch" {
			var b apiv1.Batch
			if err := json.Unmarshal(r.Body, &b); err == nil {
				bs = append(bs, b)
			}
		}
	}
	return bs
}

// OnBatch calls f with each batch the commands send, before the cluster
// receives it.
func (s *testServer) OnBatch(f func(apiv1.Batch)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onBatch = f
}

// Unit returns the unit as the cluster has it.
func (s *testServer) Unit(t *testing.T, name string) (apiv1.Unit, bool) {
	t.Helper()
	u, err := s.api.Unit(context.Background(), name)
	if client.IsNotFound(err) {
		return apiv1.Unit{}, false
	}
	if err != nil {
		t.Fatalf("unit %s: %v", name, err)
	}
	return *u, true
}

// Machine returns the machine as the cluster has it.
func (s *testServer) Machine(t *testing.T, id string) (apiv1.Machine, bool) {
	t.Helper()
	ml, err := s.api.Machines(context.Background())
	if err != nil {
		t.Fatalf("machines: %v", err)
	}
	i := slices.IndexFunc(ml.Machines, func(m apiv1.Machine) bool { return m.ID == id })
	if i < 0 {
		return apiv1.Machine{}, false
	}
	return ml.Machines[i], true
}

// put sets units up straight in the cluster (not through the commands,
// so not logged): each file at its desired state.
func (s *testServer) put(t *testing.T, desired string, files map[string]string) {
	t.Helper()
	var b apiv1.Batch
	for name, file := range files {
		b.Units = append(b.Units, apiv1.UnitChange{Name: name, File: file, DesiredState: desired})
	}
	if _, err := s.api.Batch(context.Background(), b); err != nil {
		t.Fatalf("set up units: %v", err)
	}
}

// waitUnit polls the cluster until ok(unit) or fails the test after 30s.
func (s *testServer) waitUnit(t *testing.T, name string, ok func(apiv1.Unit) bool) apiv1.Unit {
	t.Helper()
	return *daemontest.WaitUnit(t, s.api, name, func(u *apiv1.Unit) bool { return ok(*u) })
}

// running reports whether u runs where it is scheduled.
func running(u apiv1.Unit) bool {
	return u.CurrentState == stateLaunched && u.State != nil && u.State.Active == "active" && u.State.Machine == u.Machine
}
