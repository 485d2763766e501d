package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// watchServer serves what list-units --watch reads: the listings, from
// fields the test changes, and an event stream the test feeds.
type watchServer struct {
	*httptest.Server
	mu       sync.Mutex
	units    []apiv1.Unit
	states   []apiv1.UnitState
	machines []apiv1.Machine
	reads    int // of /v1/units
	events   chan apiv1.Event
	conns    int
}

func newWatchServer(t *testing.T) *watchServer {
	s := &watchServer{events: make(chan apiv1.Event, 100)}
	mux := http.NewServeMux()
	answer := func(w http.ResponseWriter, v any) {
		s.mu.Lock()
		defer s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /v1/units", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.reads++
		s.mu.Unlock()
		answer(w, apiv1.UnitList{Units: s.units})
	})
	mux.HandleFunc("GET /v1/unit-states", func(w http.ResponseWriter, r *http.Request) {
		answer(w, apiv1.UnitStateList{States: s.states})
	})
	mux.HandleFunc("GET /v1/machines", func(w http.ResponseWriter, r *http.Request) {
		answer(w, apiv1.MachineList{Machines: s.machines})
	})
	mux.HandleFunc("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.conns++
		s.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for {
			select {
			case ev := <-s.events:
				b, _ := json.Marshal(ev)
				fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", ev.ID, ev.Type, b)
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func (s *watchServer) set(units []apiv1.Unit, states []apiv1.UnitState, machines []apiv1.Machine) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.units, s.states, s.machines = units, states, machines
}

func (s *watchServer) unitReads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

// syncBuffer is an output the test reads while the command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startWatch runs flotilla with args against srv in the background; stop
// interrupts it (as Ctrl-C does) and returns its error.
func startWatch(t *testing.T, srv *watchServer, args ...string) (out, errOut *syncBuffer, stop func() error) {
	t.Helper()
	root := &cobra.Command{Use: "flotilla", SilenceErrors: true, SilenceUsage: true}
	g := &Globals{}
	g.AddFlags(root.PersistentFlags())
	root.AddCommand(Commands(g)...)
	root.SetArgs(append([]string{"--endpoint", srv.URL}, args...))
	out, errOut = &syncBuffer{}, &syncBuffer{}
	root.SetOut(out)
	root.SetErr(errOut)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	stopped := false
	stop = func() error {
		t.Helper()
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("list-units --watch did not end within 10s of the interrupt")
			return nil
		}
	}
	t.Cleanup(func() { stop() })
	return out, errOut, stop
}

const watchM3 = "3d0d0d0daa44b8f9d0e1a2b3c4d5e6f8"

func TestListUnitsWatch(t *testing.T) {
	const hash = "0123456789abcdef0123456789abcdef01234567"
	srv := newWatchServer(t)
	srv.set([]apiv1.Unit{
		{Name: "web.service", Hash: hash, DesiredState: "launched", Machine: m1},
		{Name: "db.service", Hash: hash, DesiredState: "launched", Reason: "no machine has role=db"},
		{Name: "idle.service", Hash: hash, DesiredState: "inactive"},
	}, []apiv1.UnitState{
		{Name: "web.service", Machine: m1, Hash: hash, Load: "loaded", Active: "active", Sub: "running", Health: "healthy"},
	}, testMachines)

	out, errOut, stop := startWatch(t, srv, "list-units", "--watch")
	table := "UNIT\t\tMACHINE\t\t\t\tACTIVE\tSUB\tHEALTH\n" +
		"db.service\t-\t\t\t\t-\t-\t-\n" +
		"web.service\t113f16a7.../172.17.8.101\tactive\trunning\thealthy\n"
	waitfor.Until(t, 10*time.Second, "the table", func() error {
		if got := out.String(); got != table {
			return fmt.Errorf("printed %q", got)
		}
		return nil
	})

	// What the cluster looks like once the events below happened, plus a
	// unit that appeared while the stream was down: the reset reads it.
	srv.set([]apiv1.Unit{
		{Name: "web.service", Hash: hash, DesiredState: "launched", Machine: watchM3},
		{Name: "api.service", Hash: hash, DesiredState: "launched", Machine: m1},
		{Name: "idle.service", Hash: hash, DesiredState: "inactive"},
	}, []apiv1.UnitState{
		{Name: "web.service", Machine: watchM3, Hash: hash, Load: "loaded", Active: "active", Sub: "running", Health: "healthy"},
		{Name: "api.service", Machine: m1, Hash: hash, Load: "loaded", Active: "active", Sub: "running"},
	}, append(testMachines, apiv1.Machine{ID: watchM3, IP: "172.17.8.103"}))

	for _, ev := range []apiv1.Event{
		// web.service fails on m1: its row.
		{ID: "5.1", Type: "state", Unit: "web.service", Machine: m1, Load: "loaded", Active: "failed", Sub: "failed"},
		// db.service is placed: no machine reports it yet, nothing to print.
		{ID: "5.2", Type: "unit", Unit: "db.service", Hash: hash, DesiredState: "launched", Machine: m2},
		// m2 reports it: its row replaces the "-" row.
		{ID: "5.3", Type: "state", Unit: "db.service", Machine: m2, Load: "loaded", Active: "active", Sub: "running"},
		// A repeated report changes nothing.
		{ID: "5.4", Type: "state", Unit: "db.service", Machine: m2, Load: "loaded", Active: "active", Sub: "running"},
		// db.service is destroyed: its row goes, printed with "-".
		{ID: "5.5", Type: "unit", Unit: "db.service", Removed: true},
		{ID: "5.6", Type: "state", Unit: "db.service", Machine: m2, Removed: true},
		// m1 stops reporting web.service, still wanted: the "-" row.
		{ID: "5.7", Type: "state", Unit: "web.service", Machine: m1, Removed: true},
		// A new machine: its IP is learnt for the rows that follow.
		{ID: "5.8", Type: "machine", Machine: watchM3},
		{ID: "5.9", Type: "unit", Unit: "web.service", Hash: hash, DesiredState: "launched", Machine: watchM3},
		{ID: "5.10", Type: "state", Unit: "web.service", Machine: watchM3, Load: "loaded", Active: "activating", Sub: "start"},
		{ID: "5.11", Type: "state", Unit: "web.service", Machine: watchM3, Load: "loaded", Active: "active", Sub: "running", Health: "unknown"},
		// Its checks pass: only its health changes.
		{ID: "5.12", Type: "state", Unit: "web.service", Machine: watchM3, Load: "loaded", Active: "active", Sub: "running", Health: "healthy"},
		// A new leader: everything is read again, and what differs printed.
		{ID: "6.20", Type: "reset"},
		// api.service's checks pass: its row, printed once all the above
		// has been.
		{ID: "6.21", Type: "state", Unit: "api.service", Machine: m1, Load: "loaded", Active: "active", Sub: "running", Health: "healthy"},
	} {
		srv.events <- ev
	}
	changes := "web.service\t113f16a7.../172.17.8.101\tfailed\tfailed\t-\n" +
		"db.service\t2c0ffee0.../172.17.8.102\tactive\trunning\t-\n" +
		"db.service\t2c0ffee0.../172.17.8.102\t-\t-\t-\n" +
		"web.service\t-\t\t\t\t-\t-\t-\n" +
		"web.service\t3d0d0d0d.../172.17.8.103\tactivating\tstart\t-\n" +
		"web.service\t3d0d0d0d.../172.17.8.103\tactive\trunning\tunknown\n" +
		"web.service\t3d0d0d0d.../172.17.8.103\tactive\trunning\thealthy\n" +
		"api.service\t113f16a7.../172.17.8.101\tactive\trunning\t-\n"
	last := "api.service\t113f16a7.../172.17.8.101\tactive\trunning\thealthy\n"
	changes += last
	// The row of the last event ends what the events print.
	waitfor.True(t, 10*time.Second, "the changes", func() bool { return strings.HasSuffix(out.String(), last) })
	if got := out.String(); got != table+changes {
		t.Errorf("list-units --watch printed:\n%s\nwant:\n%s", got, table+changes)
	}
	if n := srv.unitReads(); n != 2 {
		t.Errorf("units read %d times, want 2 (at the start and at the reset)", n)
	}
	if err := stop(); err != nil {
		t.Errorf("interrupted list-units --watch: %v, want success", err)
	}
	if e := errOut.String(); e != "" {
		t.Errorf("stderr: %q", e)
	}
}

// TestListUnitsWatchAlignment: later rows keep the first table's columns.
func TestListUnitsWatchAlignment(t *testing.T) {
	w := &unitWatch{fields: unitFields()[:2], out: &bytes.Buffer{}}
	w.widths = tabWidths([][]string{{"UNIT", "MACHINE"}, {"a-rather-long-name.service", "m1"}})
	if fmt.Sprint(w.widths) != "[32]" {
		t.Fatalf("widths = %v, want [32]", w.widths)
	}
	for _, tc := range []struct{ unit, want string }{
		{"x.service", "x.service\t\t\t-\n"},
		{"a-rather-long-name.service", "a-rather-long-name.service\t-\n"},
		{"a-name-longer-than-the-column.service", "a-name-longer-than-the-column.service\t-\n"},
	} {
		b := &bytes.Buffer{}
		w.out = b
		w.printRow(unitRow{Unit: tc.unit})
		if b.String() != tc.want {
			t.Errorf("row of %s = %q, want %q", tc.unit, b.String(), tc.want)
		}
	}
}

func TestListUnitsWatchJSON(t *testing.T) {
	srv := newWatchServer(t)
	srv.set(nil, nil, testMachines)
	out, _, stop := startWatch(t, srv, "list-units", "--watch", "--output", "json")
	want := []apiv1.Event{
		{ID: "5.1", Type: "unit", Unit: "a.service", Hash: "abc", DesiredState: "launched", Machine: m1, Revision: 9},
		{ID: "5.2", Type: "state", Unit: "a.service", Machine: m1, Load: "loaded", Active: "active", Sub: "running", Revision: 9},
		{ID: "6.3", Type: "reset"},
	}
	// The stream must be open before events are sent, or they would be
	// the events of no connection.
	waitfor.True(t, 10*time.Second, "the stream", func() bool { srv.mu.Lock(); defer srv.mu.Unlock(); return srv.conns == 1 })
	for _, ev := range want {
		srv.events <- ev
	}
	waitfor.True(t, 10*time.Second, "three lines", func() bool { return strings.Count(out.String(), "\n") == 3 })
	if err := stop(); err != nil {
		t.Errorf("interrupted: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	for i, l := range lines {
		var ev apiv1.Event
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("line %d %q: %v", i, l, err)
		}
		if ev != want[i] {
			t.Errorf("line %d = %+v, want %+v", i, ev, want[i])
		}
	}
	if n := srv.unitReads(); n != 0 {
		t.Errorf("--output json read the unit list %d times; it prints events only", n)
	}
}

func TestListUnitsWatchRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `{"error":"no engine leader is elected yet; retry shortly","code":"unavailable"}`)
	}))
	defer srv.Close()
	root := &cobra.Command{Use: "flotilla", SilenceErrors: true, SilenceUsage: true}
	g := &Globals{}
	g.AddFlags(root.PersistentFlags())
	root.AddCommand(Commands(g)...)
	root.SetArgs([]string{"--endpoint", srv.URL, "list-units", "--watch"})
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "no engine leader") {
		t.Errorf("list-units --watch without a leader = %v, want the server's reason", err)
	}
}
