// Package sim is a driver that runs units in memory. A started unit becomes
// active after a configurable delay, or fails with a configurable
// probability; nothing is executed. It lets one machine host thousands of
// agents for benchmarks (flotilla bench), and tests drive agents with it.
package sim

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flotilla/flotilla/internal/driver"
	"github.com/flotilla/flotilla/internal/unit"
)

// Config configures a simulated machine.
type Config struct {
	// Machine is put in every Status.
	Machine string
	// Notify receives every state change. Required.
	Notify driver.Notify
	// StartDelay is how long a start takes (default 0: at once).
	StartDelay time.Duration
	// StopDelay is how long a stop takes (default 0: at once); meanwhile the
	// unit is deactivating/stop-sigterm.
	StopDelay time.Duration
	// FailureRate in [0,1] is the share of starts that fail. Which units fail
	// is decided by a hash of the unit name and its start count, so a run is
	// repeatable.
	FailureRate float64
	// Now is the clock (default time.Now).
	Now func() time.Time
}

type simUnit struct {
	// The unit's status, kept compactly (Driver.status makes the
	// unit.Status; the name is the key the unit is kept under): 10,000
	// simulated agents hold a million units, and their memory is what
	// the bench can spend on the engine.
	hash    string
	since   int64 // Unix nanoseconds
	pid     int32
	starts  int32
	state   state
	delay   *delay // a delayed start or stop, if one was made
	journal []entry
	first   [2]entry // the journal's room until it grows (Load)
}

// delay is a unit's delayed start or stop (Config.StartDelay, StopDelay).
type delay struct {
	timer   *time.Timer
	stopped chan struct{} // a stop's: closed when it ends
}

// entry is one line of a unit's journal, formatted when read.
type entry struct {
	at    int64 // Unix nanoseconds
	state state
}

// state indexes states: the (active, sub, result) a simulated unit can be in.
type state uint8

var states = [...]struct{ active, sub, result string }{
	{"inactive", "dead", ""},
	{"activating", "start", ""},
	{"active", "running", ""},
	{"failed", "failed", "exit-code"},
	{"inactive", "dead", "success"},
	{"deactivating", "stop-sigterm", ""},
	{"inactive", "dead", "signal"},
}

func stateOf(active, sub, result string) state {
	for i, st := range states {
		if st.active == active && st.sub == sub && st.result == result {
			return state(i)
		}
	}
	panic(fmt.Sprintf("sim driver: no state %s/%s (%s)", active, sub, result))
}

func (u *simUnit) active() string { return states[u.state].active }

// status is unit name's unit.Status, u. Callers hold mu.
func (d *Driver) status(name string, u *simUnit) unit.Status {
	st := states[u.state]
	s := unit.Status{Name: name, Hash: u.hash, Machine: d.cfg.Machine, Load: "loaded",
		Active: st.active, Sub: st.sub, Result: st.result, PID: int(u.pid)}
	if u.since != 0 {
		s.Since = time.Unix(0, u.since)
	}
	return s
}

// maxJournal is how many state changes a unit's journal keeps.
const maxJournal = 100

// Driver is a simulated machine.
type Driver struct {
	cfg   Config
	mu    sync.Mutex
	units map[string]*simUnit
	pid   int
	// started counts the units started, ever: what a bench judges restarts
	// by, from outside the cluster's API.
	started atomic.Int64
}

// Started returns how many times the driver has started a unit.
func (d *Driver) Started() int64 { return d.started.Load() }

// New returns a simulated driver.
func New(cfg Config) (*Driver, error) {
	if cfg.Notify == nil {
		return nil, fmt.Errorf("sim driver: Notify is required")
	}
	if cfg.FailureRate < 0 || cfg.FailureRate > 1 {
		return nil, fmt.Errorf("sim driver: failure rate %v is not within [0,1]", cfg.FailureRate)
	}
	if cfg.StartDelay < 0 || cfg.StopDelay < 0 {
		return nil, fmt.Errorf("sim driver: negative start or stop delay (%v, %v)", cfg.StartDelay, cfg.StopDelay)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Driver{cfg: cfg, units: map[string]*simUnit{}, pid: 1000}, nil
}

var _ driver.Driver = (*Driver)(nil)

// set changes unit name's state and returns the status to notify. Callers
// hold mu.
func (d *Driver) set(name string, u *simUnit, active, sub, result string, pid int) unit.Status {
	now := d.cfg.Now().UnixNano()
	if u.since == 0 || u.active() != active {
		u.since = now
	}
	u.state, u.pid = stateOf(active, sub, result), int32(pid)
	if len(u.journal) == maxJournal {
		copy(u.journal, u.journal[1:])
		u.journal = u.journal[:maxJournal-1]
	}
	u.journal = append(u.journal, entry{at: now, state: u.state})
	return d.status(name, u)
}

func (d *Driver) Load(f *unit.File) error { return d.LoadShared(f.Name, f) }

// LoadShared loads unit name from f, which may be named for another
// instance of the same template: the simulation keeps only its hash, so
// the agent need not copy a shared file to name it for each unit.
func (d *Driver) LoadShared(name string, f *unit.File) error {
	d.mu.Lock()
	u, ok := d.units[name]
	if ok {
		u.hash = f.Hash
		d.mu.Unlock()
		return nil
	}
	u = &simUnit{hash: f.Hash}
	// Room for the load and a start, most units' whole journal, in the
	// unit itself: one allocation a unit rather than two (a bench of
	// 100,000 units made 200,000 in Load).
	u.journal = u.first[:0]
	d.units[name] = u
	st := d.set(name, u, "inactive", "dead", "", 0)
	d.mu.Unlock()
	d.cfg.Notify(st)
	return nil
}

func (d *Driver) Start(name string) error {
	d.mu.Lock()
	u, ok := d.units[name]
	if !ok {
		d.mu.Unlock()
		return fmt.Errorf("%w: %s", driver.ErrUnknownUnit, name)
	}
	if u.active() == "active" || u.active() == "activating" {
		d.mu.Unlock()
		return nil
	}
	if u.active() == "deactivating" { // a delayed stop: cut it short
		u.delay.timer.Stop()
		close(u.delay.stopped)
	}
	u.starts++
	d.started.Add(1)
	fail := d.fails(name, int(u.starts))
	if d.cfg.StartDelay == 0 {
		st := d.finishStart(name, u, fail)
		d.mu.Unlock()
		d.cfg.Notify(st)
		return nil
	}
	st := d.set(name, u, "activating", "start", "", 0)
	u.delay = &delay{}
	u.delay.timer = time.AfterFunc(d.cfg.StartDelay, func() {
		d.mu.Lock()
		if d.units[name] != u || u.active() != "activating" {
			d.mu.Unlock()
			return
		}
		st := d.finishStart(name, u, fail)
		d.mu.Unlock()
		d.cfg.Notify(st)
	})
	d.mu.Unlock()
	d.cfg.Notify(st)
	return nil
}

func (d *Driver) finishStart(name string, u *simUnit, fail bool) unit.Status {
	if fail {
		return d.set(name, u, "failed", "failed", "exit-code", 0)
	}
	d.pid++
	return d.set(name, u, "active", "running", "", d.pid)
}

// fails decides, repeatably, whether the n-th start of a unit fails.
func (d *Driver) fails(name string, n int) bool {
	if d.cfg.FailureRate == 0 {
		return false
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", name, n)
	return float64(h.Sum64()%1_000_000)/1_000_000 < d.cfg.FailureRate
}

func (d *Driver) Stop(name string) error {
	d.mu.Lock()
	u, ok := d.units[name]
	if !ok {
		d.mu.Unlock()
		return fmt.Errorf("%w: %s", driver.ErrUnknownUnit, name)
	}
	if u.active() == "inactive" || u.active() == "deactivating" {
		// Not the timer of a stop under way: it would never end.
		d.mu.Unlock()
		return nil
	}
	if u.delay != nil {
		u.delay.timer.Stop() // a delayed start
	}
	if d.cfg.StopDelay == 0 {
		st := d.set(name, u, "inactive", "dead", "success", 0)
		d.mu.Unlock()
		d.cfg.Notify(st)
		return nil
	}
	st := d.set(name, u, "deactivating", "stop-sigterm", "", int(u.pid))
	stopped := make(chan struct{})
	u.delay = &delay{stopped: stopped}
	u.delay.timer = time.AfterFunc(d.cfg.StopDelay, func() {
		d.mu.Lock()
		st := d.set(name, u, "inactive", "dead", "success", 0)
		close(stopped)
		d.mu.Unlock()
		d.cfg.Notify(st)
	})
	d.mu.Unlock()
	d.cfg.Notify(st)
	return nil
}

func (d *Driver) Unload(ctx context.Context, name string) error {
	if err := d.Stop(name); err != nil {
		return err
	}
	d.mu.Lock()
	var stopped chan struct{}
	if u := d.units[name]; u != nil && u.active() == "deactivating" {
		stopped = u.delay.stopped
	}
	d.mu.Unlock()
	if stopped != nil {
		select {
		case <-stopped:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	d.mu.Lock()
	delete(d.units, name)
	d.mu.Unlock()
	return nil
}

// Kill ends a unit at once, whatever its stop delay, and forgets it.
func (d *Driver) Kill(ctx context.Context, name string) error {
	d.mu.Lock()
	u, ok := d.units[name]
	if !ok {
		d.mu.Unlock()
		return nil
	}
	if u.delay != nil {
		u.delay.timer.Stop()
		if u.active() == "deactivating" {
			close(u.delay.stopped)
		}
	}
	var st unit.Status
	changed := u.active() != "inactive"
	if changed {
		st = d.set(name, u, "inactive", "dead", "signal", 0)
	}
	delete(d.units, name)
	d.mu.Unlock()
	if changed {
		d.cfg.Notify(st)
	}
	return nil
}

func (d *Driver) States() []unit.Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]unit.Status, 0, len(d.units))
	for name, u := range d.units {
		out = append(out, d.status(name, u))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Journal writes the unit's state changes; follow is not supported by the
// simulation and returns after the last line.
func (d *Driver) Journal(ctx context.Context, name string, lines int, follow bool, w io.Writer) error {
	d.mu.Lock()
	u, ok := d.units[name]
	if !ok {
		d.mu.Unlock()
		return fmt.Errorf("%w: %s", driver.ErrUnknownUnit, name)
	}
	j := u.journal
	if lines >= 0 && len(j) > lines {
		j = j[len(j)-lines:]
	}
	j = append([]entry(nil), j...)
	d.mu.Unlock()
	for _, e := range j {
		st := states[e.state]
		if _, err := fmt.Fprintf(w, "%s %s: %s/%s\n", time.Unix(0, e.at).UTC().Format(time.RFC3339Nano), name, st.active, st.sub); err != nil {
			return err
		}
	}
	return nil
}

func (d *Driver) Close(ctx context.Context) error {
	d.mu.Lock()
	names := make([]string, 0, len(d.units))
	for n := range d.units {
		names = append(names, n)
	}
	d.mu.Unlock()
	for _, n := range names {
		d.Stop(n)
	}
	return nil
}
