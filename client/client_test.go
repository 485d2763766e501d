package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/daemon/daemontest"
	"github.com/flotilla/flotilla/internal/supervisor/supervisortest"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// TestMain lets this test binary be the supervisor of the units the
// tests' daemons run with the exec driver.
func TestMain(m *testing.M) { supervisortest.Main(m) }

var machines = []daemontest.Machine{
	{ID: "113f16a7c1a44b8f9d0e1a2b3c4d5e6f", IP: "172.17.8.101", Metadata: map[string]string{"role": "web"}},
	{ID: "2c0ffee0aa44b8f9d0e1a2b3c4d5e6f7", IP: "172.17.8.102"},
}

func newClient(t *testing.T, endpoint string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(endpoint, opts...)
	if err != nil {
		t.Fatalf("New(%q): %v", endpoint, err)
	}
	return c
}

func TestNewValidatesEndpoint(t *testing.T) {
	for _, tc := range []struct {
		endpoint string
		wantErr  string // "" for a valid endpoint
	}{
		{"http://127.0.0.1:7480", ""},
		{"https://flotilla.example.com", ""},
		{"http://h:7480/prefix/", ""},
		{"", "scheme must be http, https or unix"},
		{"127.0.0.1:7480", ""}, // HOST:PORT, as etcdctl takes it
		{"localhost:7480", ""},
		{"[::1]:7480", ""},
		{"127.0.0.1:port", "want a URL such as http://127.0.0.1:7480, HOST:PORT"},
		{"localhost:port", "scheme must be http, https or unix"},
		{"ftp://h", "scheme must be http, https or unix"},
		{"http://", "no host"},
		{"http:///v1", "no host"},
		{"http://h?x=1", "scheme, host and optional path only"},
		{"http://user:pw@h", "scheme, host and optional path only"},
		{"unix:///var/run/fleet.sock", ""},
		{"/var/run/fleet.sock", ""},
		{"unix://var/run/fleet.sock", "three slashes"},
		{"unix://", "three slashes"},
		{"unix:///s?x=1", "three slashes"},
	} {
		t.Run(tc.endpoint, func(t *testing.T) {
			_, err := client.New(tc.endpoint)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("New(%q): %v", tc.endpoint, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("New(%q) = nil error, want %q", tc.endpoint, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.endpoint)) {
				t.Errorf("New(%q) = %q, want it to name the endpoint and say %q", tc.endpoint, err, tc.wantErr)
			}
		})
	}
}

func TestRoundTrip(t *testing.T) {
	c := newClient(t, daemontest.Start(t, machines...).URL)
	ctx := context.Background()

	st, err := c.Status(ctx)
	if err != nil || st.Leader != machines[0].ID {
		t.Fatalf("Status = %+v, %v", st, err)
	}

	file := "[Unit]\nDescription=Hello\n[Service]\nExecStart=/bin/sleep 1000\n[X-Fleet]\nMachineID=" + machines[0].ID + "\n"
	res, err := c.Batch(ctx, api.Batch{Units: []api.UnitChange{
		{Name: "hello.service", File: file, DesiredState: "launched"},
		{Name: "other.service", File: "[Service]\nExecStart=/bin/true\n"},
	}})
	if err != nil {
		t.Fatalf("Batch: %v", err)
	}
	if len(res.Units) != 2 || res.Units[0].DesiredState != "launched" {
		t.Fatalf("Batch = %+v", res)
	}
	// The engine places and the agent starts the unit after the batch.
	daemontest.WaitUnit(t, c, "hello.service", func(u *api.Unit) bool {
		return u.Machine == machines[0].ID && u.CurrentState == "launched" && u.State != nil && u.State.Sub == "running"
	})

	l, err := c.Units(ctx, "hello.service", "nope.service")
	if err != nil {
		t.Fatalf("Units: %v", err)
	}
	if len(l.Units) != 1 || l.Units[0].Name != "hello.service" || l.Units[0].File != "" || l.Units[0].CurrentState != "launched" {
		t.Fatalf("Units(hello, nope) = %+v", l.Units)
	}
	all, err := c.Units(ctx)
	if err != nil || len(all.Units) != 2 {
		t.Fatalf("Units() = %+v, %v", all, err)
	}

	u, err := c.Unit(ctx, "hello.service")
	if err != nil || u.File != file || u.Description != "Hello" {
		t.Fatalf("Unit = %+v, %v", u, err)
	}

	states, err := c.UnitStates(ctx, client.UnitStateFilter{Machine: machines[0].ID})
	if err != nil || len(states.States) != 1 || states.States[0].Sub != "running" {
		t.Fatalf("UnitStates = %+v, %v", states, err)
	}
	states, err = c.UnitStates(ctx, client.UnitStateFilter{Machine: machines[1].ID})
	if err != nil || len(states.States) != 0 {
		t.Fatalf("UnitStates(other machine) = %+v, %v", states, err)
	}

	ms, err := c.Machines(ctx)
	if err != nil || len(ms.Machines) != 2 || ms.Machines[0].Units != 1 {
		t.Fatalf("Machines = %+v, %v", ms, err)
	}

	pu, err := c.PutUnit(ctx, api.UnitChange{Name: "other.service", DesiredState: "loaded"})
	if err != nil || pu.DesiredState != "loaded" {
		t.Fatalf("PutUnit = %+v, %v", pu, err)
	}
	if err := c.DestroyUnit(ctx, "other.service"); err != nil {
		t.Fatalf("DestroyUnit: %v", err)
	}
	if _, err := c.Unit(ctx, "other.service"); !client.IsNotFound(err) {
		t.Fatalf("other.service after DestroyUnit: %v, want not found", err)
	}

	web, db := "web", "db"
	m, err := c.PatchMachine(ctx, machines[1].ID, api.MachinePatch{Metadata: map[string]*string{"role": &db, "az": nil}})
	if err != nil || m.ID != machines[1].ID || len(m.Metadata) != 1 || m.Metadata["role"] != "db" {
		t.Fatalf("PatchMachine = %+v, %v", m, err)
	}
	m, err = c.PatchMachine(ctx, machines[0].ID, api.MachinePatch{Metadata: map[string]*string{"role": nil, "az": &web}})
	if err != nil || len(m.Metadata) != 1 || m.Metadata["az"] != "web" || m.Units != 1 {
		t.Fatalf("PatchMachine(remove role) = %+v, %v", m, err)
	}
	// hello.service is bound by MachineID=, not metadata: it stays.
	if u, _ := c.Unit(ctx, "hello.service"); u.Machine != machines[0].ID {
		t.Errorf("hello.service moved to %q", u.Machine)
	}
}

func TestAPIErrors(t *testing.T) {
	c := newClient(t, daemontest.Start(t, machines...).URL)
	ctx := context.Background()

	_, err := c.Unit(ctx, "nope.service")
	var ae *client.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("Unit(nope) error = %T %v, want *APIError", err, err)
	}
	if ae.Status != http.StatusNotFound || ae.Code != "not_found" || err.Error() != "unit nope.service not found" {
		t.Errorf("Unit(nope) = %#v, want 404 not_found with the server's message", ae)
	}
	if !client.IsNotFound(err) || client.IsConflict(err) {
		t.Errorf("IsNotFound/IsConflict wrong for %v", err)
	}

	if _, err := c.Batch(ctx, api.Batch{Units: []api.UnitChange{{Name: "a.service", File: "[Service]\nExecStart=/bin/x\n"}}}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Batch(ctx, api.Batch{Units: []api.UnitChange{{Name: "a.service", File: "[Service]\nExecStart=/bin/y\n"}}})
	if !client.IsConflict(err) {
		t.Errorf("different file: error = %v, want a conflict", err)
	}

	v := "x"
	_, err = c.PatchMachine(ctx, "nope", api.MachinePatch{Metadata: map[string]*string{"k": &v}})
	if !client.IsNotFound(err) || !strings.Contains(err.Error(), "machine nope is not part of the cluster") {
		t.Errorf("PatchMachine(nope) error = %v, want not found", err)
	}
	for _, p := range []api.MachinePatch{{}, {Metadata: map[string]*string{"a b": &v}}} {
		_, err = c.PatchMachine(ctx, machines[0].ID, p)
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Code != "bad_request" {
			t.Errorf("PatchMachine(%v) error = %#v, want 400 bad_request", p.Metadata, err)
		}
	}
}

func TestNonJSONError(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream is down", http.StatusBadGateway)
	}))
	defer ts.Close()
	_, err := newClient(t, ts.URL).Machines(context.Background())
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusBadGateway || ae.Code != "" {
		t.Fatalf("error = %#v, want *APIError 502 without code", err)
	}
	if !strings.Contains(err.Error(), "upstream is down") || !strings.Contains(err.Error(), "502") {
		t.Errorf("error = %q, want the status and the body", err)
	}
	if !client.IsUnavailable(err) {
		t.Errorf("IsUnavailable(%v) = false", err)
	}
}

func TestConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + ln.Addr().String()
	ln.Close()

	_, err = newClient(t, endpoint).Units(context.Background())
	if err == nil {
		t.Fatal("no error from a closed port")
	}
	var ue *client.UnreachableError
	if !errors.As(err, &ue) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("error = %T %v, want *UnreachableError wrapping ECONNREFUSED", err, err)
	}
	for _, want := range []string{endpoint, "flotilla dev"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if !client.IsUnavailable(err) {
		t.Errorf("IsUnavailable(%v) = false", err)
	}
}

func TestTimeout(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	defer ts.Close()
	c := newClient(t, ts.URL, client.WithTimeout(50*time.Millisecond))
	start := time.Now()
	_, err := c.Status(context.Background())
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "within 50ms") {
		t.Fatalf("error = %v, want a timeout naming 50ms", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("timed out after %s", d)
	}

	// A canceled context says so, not "timeout".
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Status(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: error = %v, want context.Canceled", err)
	}
}

func TestPaths(t *testing.T) {
	var got []string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.RequestURI())
		w.Write([]byte("{}"))
	}))
	defer ts.Close()
	c := newClient(t, ts.URL+"/prefix/")
	ctx := context.Background()
	c.Unit(ctx, "web@1.service")
	c.Units(ctx, "a.service", "b.service")
	c.UnitStates(ctx, client.UnitStateFilter{Machine: "m1", Names: []string{"a.service"}})
	c.DestroyUnit(ctx, "a b.service")
	c.PatchMachine(ctx, "m/1", api.MachinePatch{})
	want := []string{
		"GET /prefix/v1/units/web@1.service",
		"GET /prefix/v1/units?name=a.service&name=b.service",
		"GET /prefix/v1/unit-states?machine=m1&name=a.service",
		"DELETE /prefix/v1/units/a%20b.service",
		"PATCH /prefix/v1/machines/m%2F1",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestJournal(t *testing.T) {
	c := newClient(t, daemontest.Start(t, daemontest.Machine{ID: "m1", Exec: true}).URL)
	file := "[Service]\nExecStart=/bin/sh -c 'echo l1; echo l2; echo l3; exec sleep 1000'\n"
	if _, err := c.PutUnit(context.Background(), api.UnitChange{Name: "hello.service", File: file, DesiredState: "launched"}); err != nil {
		t.Fatal(err)
	}
	daemontest.WaitUnit(t, c, "hello.service", func(u *api.Unit) bool { return u.State != nil && u.State.Sub == "running" })
	journal := func(lines int) []string {
		t.Helper()
		rc, err := c.Journal(context.Background(), "hello.service", client.JournalOptions{Lines: lines})
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	}
	// The product's lines are "TIME UNIT[PID]: TEXT", the unit's output
	// among the daemon's own lines ("flotilla[PID]: Started ...").
	var all []string
	waitfor.Until(t, 30*time.Second, "the unit's l1, l2, l3 in its journal", func() error {
		all = journal(100)
		var text []string
		for _, l := range all {
			if _, after, ok := strings.Cut(l, "hello.service["); ok {
				_, after, _ = strings.Cut(after, "]: ")
				text = append(text, after)
			}
		}
		if strings.Join(text, ",") != "l1,l2,l3" {
			return fmt.Errorf("journal %q", all)
		}
		return nil
	})
	if last := journal(2); strings.Join(last, "\n") != strings.Join(all[len(all)-2:], "\n") {
		t.Errorf("journal -n 2 = %q, want the last two of %q", last, all)
	}

	_, err := c.Journal(context.Background(), "nope.service", client.JournalOptions{})
	if !client.IsNotFound(err) {
		t.Fatalf("journal of missing unit: %v, want not found", err)
	}
}

// A followed journal outlives the request timeout and ends with its context.
func TestJournalFollowOutlivesTimeout(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("follow") != "true" || r.URL.Query().Get("lines") != "0" {
			http.Error(w, "bad query "+r.URL.RawQuery, http.StatusBadRequest)
			return
		}
		w.Write([]byte("first\n"))
		w.(http.Flusher).Flush()
		select {
		case <-time.After(150 * time.Millisecond):
			w.Write([]byte("late\n"))
			w.(http.Flusher).Flush()
		case <-r.Context().Done():
			return
		}
		<-r.Context().Done()
	}))
	defer ts.Close()
	c := newClient(t, ts.URL, client.WithTimeout(50*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rc, err := c.Journal(ctx, "hello.service", client.JournalOptions{Lines: 0, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var got strings.Builder
	buf := make([]byte, 64)
	for !strings.Contains(got.String(), "late\n") {
		n, err := rc.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			t.Fatalf("read after %q: %v", got.String(), err)
		}
	}
	cancel()
	if _, err := io.ReadAll(rc); err == nil {
		t.Error("stream did not end with its context")
	}
}

// TestUnixSocket: a unix:// endpoint (or a bare socket path) reaches the
// API over the socket; one nothing listens on is unreachable, named as given.
func TestUnixSocket(t *testing.T) {
	sock := daemontest.Start(t, machines...).Socket
	dir := filepath.Dir(sock)
	for _, ep := range []string{"unix://" + sock, sock} {
		c := newClient(t, ep)
		if c.Endpoint() != "unix://"+sock {
			t.Errorf("Endpoint() = %q, want unix://%s", c.Endpoint(), sock)
		}
		if st, err := c.Status(context.Background()); err != nil || st.Leader != machines[0].ID {
			t.Errorf("Status through %s = %+v, %v", ep, st, err)
		}
	}
	_, err := newClient(t, "unix://"+filepath.Join(dir, "none.sock")).Status(context.Background())
	var ue *client.UnreachableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "unix://"+filepath.Join(dir, "none.sock")) {
		t.Errorf("Status through a socket nothing listens on = %v, want an UnreachableError naming it", err)
	}
}
