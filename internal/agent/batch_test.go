package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/driver"
	"github.com/flotilla/flotilla/internal/driver/sim"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// batchDriver is a sim driver that loads in batches (driver.BatchLoader)
// and cannot load units named bad*.service, as systemd cannot load a unit
// with a bad setting.
type batchDriver struct {
	*sim.Driver
	mu      sync.Mutex
	batches [][]string // the names of each LoadBatch
	singles []string   // the units given to Load
	starts  []string
}

func (d *batchDriver) Load(f *unit.File) error {
	d.mu.Lock()
	d.singles = append(d.singles, f.Name)
	d.mu.Unlock()
	return d.Driver.Load(f)
}

func (d *batchDriver) LoadBatch(files []*unit.File) []error {
	var names []string
	errs := make([]error, len(files))
	for i, f := range files {
		names = append(names, f.Name)
		if len(f.Name) > 3 && f.Name[:3] == "bad" {
			errs[i] = errors.New("bad setting")
			continue
		}
		errs[i] = d.Driver.Load(f)
	}
	d.mu.Lock()
	d.batches = append(d.batches, names)
	d.mu.Unlock()
	return errs
}

func (d *batchDriver) Start(name string) error {
	d.mu.Lock()
	d.starts = append(d.starts, name)
	d.mu.Unlock()
	return d.Driver.Start(name)
}

var _ driver.BatchLoader = (*batchDriver)(nil)

// TestPassLoadsInOneBatch: a driver that loads in batches gets every load
// of a pass in one LoadBatch, each named for its unit (instances share a
// parsed file); a unit it cannot load is reported failed and not started,
// and the others start.
func TestPassLoadsInOneBatch(t *testing.T) {
	a, sd := newTestAgent(t, time.Hour)
	d := &batchDriver{Driver: sd}
	a.SetDriver(d)
	var units []*agentpb.Assignment
	for _, n := range []string{"web@1.service", "web@2.service", "bad.service", "db.service"} {
		units = append(units, &agentpb.Assignment{Name: n, File: unitText(false), DesiredState: "launched"})
	}
	a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: &agentpb.Assignments{Full: true, Units: units}}}, a.cfg.Mono())
	var wg sync.WaitGroup
	a.pass(context.Background(), &wg)
	wg.Wait()
	if got := fmt.Sprint(d.batches); got != "[[bad.service db.service web@1.service web@2.service]]" {
		t.Errorf("batches %s, want the four units in one", got)
	}
	if len(d.singles) != 0 {
		t.Errorf("Load called for %v, want none (all in the batch)", d.singles)
	}
	if got := active(sd); fmt.Sprint(got) != "map[db.service:active web@1.service:active web@2.service:active]" {
		t.Errorf("driver states %v, want the three good units active", got)
	}
	for _, n := range d.starts {
		if n == "bad.service" {
			t.Errorf("bad.service was started though its load failed")
		}
	}
	a.mu.Lock()
	h, st := a.haves["bad.service"], a.statuses["bad.service"]
	a.mu.Unlock()
	if !h.Broken {
		t.Errorf("bad.service has %+v, want Broken", h)
	}
	if st.states == nil || *st.states != (reportStates{"error", "failed", "failed", "load-error"}) || st.message != "bad setting" {
		t.Errorf("bad.service status %+v (states %v), want error/failed/failed load-error saying why", st, st.states)
	}
	// Nothing is left to do: the next pass plans no action.
	a.mu.Lock()
	acts := plan(a.wants, a.haves)
	a.mu.Unlock()
	if len(acts) != 0 {
		t.Errorf("after the pass: %v still planned", acts)
	}
}
