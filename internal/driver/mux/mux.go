// Package mux runs one machine's units on several drivers at once
// (flotilla daemon --driver exec,docker): each unit goes to the first
// driver, in the order given, that can run it (unit.File.Drivers), and
// every later call for that unit goes to the same driver.
package mux

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/flotilla/flotilla/internal/driver"
	"github.com/flotilla/flotilla/internal/monotime"
	"github.com/flotilla/flotilla/internal/unit"
)

// Entry is one driver of a Mux and the kind it is.
type Entry struct {
	Kind   unit.DriverSet // exactly one driver's bit
	Driver driver.Driver
}

// Mux is a driver.Driver over several drivers. It implements the optional
// driver interfaces (BatchLoader, Killer, Fencer, Detacher, LogRemover,
// StartRecorder) by passing each call to the drivers that implement them;
// a driver that does not is treated as driver.Driver alone would be (a
// Load per unit of a batch, Kill unloads, no fence: the agent's own
// watchdog then stops its singleton units).
type Mux struct {
	entries []Entry

	mu    sync.Mutex
	owner map[string]int // unit name -> index in entries
}

// New returns a Mux of the drivers, in order of preference. The units each
// driver already holds (adopted from an earlier daemon) stay with it.
func New(entries ...Entry) (*Mux, error) {
	if len(entries) == 0 {
		return nil, errors.New("mux: no driver")
	}
	m := &Mux{entries: entries, owner: map[string]int{}}
	for i, e := range entries {
		for _, s := range e.Driver.States() {
			if j, dup := m.owner[s.Name]; dup {
				return nil, fmt.Errorf("mux: unit %s is held by both the %v and the %v driver", s.Name, entries[j].Kind, e.Kind)
			}
			m.owner[s.Name] = i
		}
	}
	return m, nil
}

// Kinds returns the set of the Mux's drivers.
func (m *Mux) Kinds() unit.DriverSet {
	var set unit.DriverSet
	for _, e := range m.entries {
		set |= e.Kind
	}
	return set
}

// pick returns the index of the driver for f: the one holding it, else
// the first that can run it.
func (m *Mux) pick(f *unit.File) (int, error) {
	if i, ok := m.owner[f.Name]; ok {
		if m.entries[i].Kind.Runs(f.Drivers()) {
			return i, nil
		}
	}
	for i, e := range m.entries {
		if e.Kind.Runs(f.Drivers()) {
			return i, nil
		}
	}
	return 0, fmt.Errorf("no driver of this machine (%v) can run %s: it needs %s", m.Kinds(), f.Name, unit.DriversReason(f.Name, f.Drivers()))
}

// Load loads the unit on the driver that runs it. A unit whose new
// definition needs another driver is unloaded from the old one first.
func (m *Mux) Load(f *unit.File) error {
	m.mu.Lock()
	i, err := m.pick(f)
	old, had := m.owner[f.Name]
	m.mu.Unlock()
	if err != nil {
		return err
	}
	if had && old != i {
		if err := m.entries[old].Driver.Unload(context.Background(), f.Name); err != nil && !errors.Is(err, driver.ErrUnknownUnit) {
			return err
		}
	}
	if err := m.entries[i].Driver.Load(f); err != nil {
		return err
	}
	m.mu.Lock()
	m.owner[f.Name] = i
	m.mu.Unlock()
	return nil
}

// LoadBatch loads each unit on the driver that runs it, as Load does
// (driver.BatchLoader): a driver that loads in batches gets its units in
// one LoadBatch, the others a Load per unit. A unit whose new definition
// needs another driver moves as with Load.
func (m *Mux) LoadBatch(files []*unit.File) []error {
	errs := make([]error, len(files))
	per := make([][]int, len(m.entries)) // indexes in files, per driver
	for i, f := range files {
		if f == nil {
			errs[i] = errors.New("mux: load: nil unit file")
			continue
		}
		m.mu.Lock()
		j, err := m.pick(f)
		old, had := m.owner[f.Name]
		m.mu.Unlock()
		switch {
		case err != nil:
			errs[i] = err
		case had && old != j:
			errs[i] = m.Load(f)
		default:
			per[j] = append(per[j], i)
		}
	}
	for j, idx := range per {
		if len(idx) == 0 {
			continue
		}
		d := m.entries[j].Driver
		out := make([]error, len(idx))
		if bl, ok := d.(driver.BatchLoader); ok {
			batch := make([]*unit.File, len(idx))
			for k, i := range idx {
				batch[k] = files[i]
			}
			out = bl.LoadBatch(batch)
		} else {
			for k, i := range idx {
				out[k] = d.Load(files[i])
			}
		}
		m.mu.Lock()
		for k, i := range idx {
			if errs[i] = out[k]; errs[i] == nil {
				m.owner[files[i].Name] = j
			}
		}
		m.mu.Unlock()
	}
	return errs
}

// of returns the driver holding the unit.
func (m *Mux) of(name string) (driver.Driver, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i, ok := m.owner[name]
	if !ok {
		return nil, false
	}
	return m.entries[i].Driver, true
}

// Start starts the unit on its driver.
func (m *Mux) Start(name string) error {
	d, ok := m.of(name)
	if !ok {
		return driver.ErrUnknownUnit
	}
	return d.Start(name)
}

// Stop stops the unit on its driver.
func (m *Mux) Stop(name string) error {
	d, ok := m.of(name)
	if !ok {
		return driver.ErrUnknownUnit
	}
	return d.Stop(name)
}

// Unload unloads the unit from its driver and forgets which it was.
func (m *Mux) Unload(ctx context.Context, name string) error {
	d, ok := m.of(name)
	if !ok {
		return driver.ErrUnknownUnit
	}
	err := d.Unload(ctx, name)
	if err == nil || errors.Is(err, driver.ErrUnknownUnit) {
		m.forget(name)
	}
	return err
}

func (m *Mux) forget(name string) {
	m.mu.Lock()
	delete(m.owner, name)
	m.mu.Unlock()
}

// Kill kills the unit where its driver can, and unloads it otherwise.
func (m *Mux) Kill(ctx context.Context, name string) error {
	d, ok := m.of(name)
	if !ok {
		return driver.ErrUnknownUnit
	}
	var err error
	if k, ok := d.(driver.Killer); ok {
		err = k.Kill(ctx, name)
	} else {
		err = d.Unload(ctx, name)
	}
	if err == nil || errors.Is(err, driver.ErrUnknownUnit) {
		m.forget(name)
	}
	return err
}

// States returns the states of every driver's units.
func (m *Mux) States() []unit.Status {
	var out []unit.Status
	for _, e := range m.entries {
		out = append(out, e.Driver.States()...)
	}
	return out
}

// Journal writes the unit's log from its driver.
func (m *Mux) Journal(ctx context.Context, name string, lines int, follow bool, w io.Writer) error {
	d, ok := m.of(name)
	if !ok {
		// A unit unloaded from this machine may still have its log here.
		for _, e := range m.entries {
			if err := e.Driver.Journal(ctx, name, lines, follow, w); !errors.Is(err, driver.ErrUnknownUnit) {
				return err
			}
		}
		return driver.ErrUnknownUnit
	}
	return d.Journal(ctx, name, lines, follow, w)
}

// Fence gives each driver that can fence the deadline of its own units
// among names (and none to the others', as Fence requires).
func (m *Mux) Fence(deadline monotime.Time, names []string) error {
	m.mu.Lock()
	per := make([][]string, len(m.entries))
	for _, n := range names {
		if i, ok := m.owner[n]; ok {
			per[i] = append(per[i], n)
		}
	}
	m.mu.Unlock()
	var errs []error
	for i, e := range m.entries {
		if f, ok := e.Driver.(driver.Fencer); ok {
			errs = append(errs, f.Fence(deadline, per[i]))
		}
	}
	return errors.Join(errs...)
}

// Started asks the driver holding the unit whether the agent started it
// (driver.StartRecorder); not known for a driver that keeps no record.
func (m *Mux) Started(name string) (started, known bool) {
	d, ok := m.of(name)
	if !ok {
		return false, false
	}
	if r, ok := d.(driver.StartRecorder); ok {
		return r.Started(name)
	}
	return false, false
}

// RunsChecks asks the driver holding the unit whether it runs the unit's
// [X-Check] itself (driver.Checker).
func (m *Mux) RunsChecks(name string) bool {
	d, ok := m.of(name)
	if !ok {
		return false
	}
	c, ok := d.(driver.Checker)
	return ok && c.RunsChecks(name)
}

// RemoveLog removes the unit's log from every driver that keeps logs.
func (m *Mux) RemoveLog(name string) error {
	var errs []error
	for _, e := range m.entries {
		if lr, ok := e.Driver.(driver.LogRemover); ok {
			errs = append(errs, lr.RemoveLog(name))
		}
	}
	return errors.Join(errs...)
}

// Detach detaches the drivers whose units outlive the daemon and closes
// the others.
func (m *Mux) Detach(ctx context.Context) error {
	var errs []error
	for _, e := range m.entries {
		if d, ok := e.Driver.(driver.Detacher); ok {
			errs = append(errs, d.Detach(ctx))
		} else {
			errs = append(errs, e.Driver.Close(ctx))
		}
	}
	return errors.Join(errs...)
}

// Close stops every driver's units and closes the drivers.
func (m *Mux) Close(ctx context.Context) error {
	errs := make([]error, len(m.entries))
	var wg sync.WaitGroup
	for i, e := range m.entries {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = e.Driver.Close(ctx) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

var (
	_ driver.Driver      = (*Mux)(nil)
	_ driver.BatchLoader = (*Mux)(nil)
	_ driver.Killer      = (*Mux)(nil)
	_ driver.Fencer      = (*Mux)(nil)
	_ driver.Detacher    = (*Mux)(nil)
	_ driver.LogRemover  = (*Mux)(nil)

	_ driver.StartRecorder = (*Mux)(nil)
)
