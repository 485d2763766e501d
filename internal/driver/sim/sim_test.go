package sim

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flotilla/flotilla/internal/unit"
)

type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) notify(s unit.Status) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, s.Name+" "+s.Active+"/"+s.Sub)
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.got, ", ")
}

func TestStartDelayStopUnload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder
		d, err := New(Config{Machine: "m1", Notify: r.notify, StartDelay: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Load(&unit.File{Name: "a.service", Hash: "h"}); err != nil {
			t.Fatal(err)
		}
		d.Start("a.service")
		time.Sleep(999 * time.Millisecond)
		synctest.Wait()
		if got, want := r.String(), "a.service inactive/dead, a.service activating/start"; got != want {
			t.Fatalf("before the delay: %s, want %s", got, want)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if s := d.States(); len(s) != 1 || s[0].Active != "active" || s[0].PID == 0 || s[0].Machine != "m1" {
			t.Fatalf("after the delay: %+v, want active with a PID", s)
		}
		d.Stop("a.service")
		if err := d.Unload(context.Background(), "a.service"); err != nil {
			t.Fatal(err)
		}
		if s := d.States(); len(s) != 0 {
			t.Errorf("after Unload: %+v, want nothing", s)
		}
		if err := d.Start("a.service"); err == nil {
			t.Error("Start of an unloaded unit succeeded")
		}
	})
}

func TestFailureRateIsRepeatable(t *testing.T) {
	count := func() int {
		d, _ := New(Config{Notify: func(unit.Status) {}, FailureRate: 0.3})
		n := 0
		for i := range 1000 {
			name := fmt.Sprintf("u%d.service", i)
			d.Load(&unit.File{Name: name})
			d.Start(name)
		}
		for _, s := range d.States() {
			if s.Active == "failed" {
				n++
			}
		}
		return n
	}
	a, b := count(), count()
	if a != b || a < 200 || a > 400 {
		t.Errorf("failed units of 1000 at rate 0.3: %d then %d; want the same count, about 300", a, b)
	}
	if _, err := New(Config{Notify: func(unit.Status) {}, FailureRate: 2}); err == nil {
		t.Error("New with failure rate 2 succeeded")
	}
}

// TestStopDelay: a delayed stop deactivates the unit for StopDelay; a
// start cuts it short, a kill ends it at once, and an unload waits for it.
func TestStopDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder
		d, err := New(Config{Machine: "m1", Notify: r.notify, StopDelay: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"a.service", "b.service", "c.service"} {
			d.Load(&unit.File{Name: n, Hash: "h"})
			d.Start(n)
			d.Stop(n)
		}
		d.Start("a.service") // cuts a's stop short
		d.Kill(context.Background(), "b.service")
		unloaded := make(chan struct{})
		go func() { d.Unload(context.Background(), "c.service"); close(unloaded) }()
		time.Sleep(999 * time.Millisecond)
		synctest.Wait()
		select {
		case <-unloaded:
			t.Fatal("Unload returned before the delayed stop ended")
		default:
		}
		if s := d.States(); len(s) != 2 || s[0].Name != "a.service" || s[0].Active != "active" || s[1].Active != "deactivating" {
			t.Fatalf("within the stop delay: %+v, want a.service active, c.service deactivating (b.service killed)", s)
		}
		time.Sleep(time.Millisecond)
		<-unloaded
		if s := d.States(); len(s) != 1 || s[0].Name != "a.service" || s[0].Active != "active" {
			t.Fatalf("after the delay: %+v, want a.service active alone", s)
		}
		want := "a.service inactive/dead, a.service active/running, a.service deactivating/stop-sigterm, " +
			"b.service inactive/dead, b.service active/running, b.service deactivating/stop-sigterm, " +
			"c.service inactive/dead, c.service active/running, c.service deactivating/stop-sigterm, " +
			"a.service active/running, b.service inactive/dead, c.service inactive/dead"
		if got := r.String(); got != want {
			t.Errorf("notified %s,\nwant %s", got, want)
		}
	})
}

// TestJournalKeptInUnit: a unit's journal starts in the unit itself
// (LoadShared) and keeps every change, in order, as it grows past that
// room, up to maxJournal lines.
func TestJournalKeptInUnit(t *testing.T) {
	var r recorder
	d, err := New(Config{Machine: "m1", Notify: r.notify})
	if err != nil {
		t.Fatal(err)
	}
	// Loaded from a file parsed for another instance: known by its own name.
	if err := d.LoadShared("web@2.service", &unit.File{Name: "web@1.service", Hash: "h1"}); err != nil {
		t.Fatal(err)
	}
	if st := d.States(); len(st) != 1 || st[0].Name != "web@2.service" || st[0].Hash != "h1" {
		t.Fatalf("states = %v, want web@2.service with hash h1", st)
	}
	journal := func(lines int) []string {
		var b strings.Builder
		if err := d.Journal(context.Background(), "web@2.service", lines, false, &b); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
			out = append(out, l[strings.Index(l, " ")+1:]) // without the time
		}
		return out
	}
	want := []string{"web@2.service: inactive/dead"}
	for i := 0; len(want) < maxJournal+10; i++ {
		if i%2 == 0 {
			d.Start("web@2.service")
			want = append(want, "web@2.service: active/running")
		} else {
			d.Stop("web@2.service")
			want = append(want, "web@2.service: inactive/dead")
		}
		keep := want[max(0, len(want)-maxJournal):]
		if got := journal(-1); strings.Join(got, ",") != strings.Join(keep, ",") {
			t.Fatalf("after %d changes the journal is\n%s\nwant\n%s", len(want), strings.Join(got, "\n"), strings.Join(keep, "\n"))
		}
	}
	if got := journal(2); len(got) != 2 || got[1] != want[len(want)-1] {
		t.Errorf("last two lines = %v", got)
	}
}
