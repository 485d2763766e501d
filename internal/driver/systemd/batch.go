package systemddriver

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/flotilla/flotilla/internal/driver"
	"github.com/flotilla/flotilla/internal/unit"
)

var _ driver.BatchLoader = (*Driver)(nil)

// callWorkers bounds the D-Bus calls the driver has in flight at once when
// it asks about many units: systemd answers them one after another, but
// meanwhile the next question is already on its way.
const callWorkers = 8

// each calls f(0) ... f(n-1) from up to callWorkers goroutines.
func each(n int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, callWorkers) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				f(i)
			}
		})
	}
	wg.Wait()
}

// batchItem is one unit of a LoadBatch.
type batchItem struct {
	i    int // index in files
	name string
	p    props
}

// LoadBatch loads the units of files, each as Load does, and returns one
// error per file, nil for each unit loaded (driver.BatchLoader). It writes
// every file before systemd reads any: systemd rebuilds its map of unit
// files once it finds a unit directory changed, a scan of every file there,
// so one file at a time costs a scan per unit and the scans grow with the
// units loaded. Then systemd loads the new units (those it does not hold)
// all at once, with one ListUnitsByNames call per 512 units, and their
// FragmentPath is read to check systemd reads each from the driver's file.
// Units systemd already holds (from an older file, or as they failed to
// load) and any unit that did not load so are checked one by one as Load
// always did, with one daemon-reload for all those that need it. A unit
// that is refused, that systemd cannot load, or reads from another file
// has its own error and is not kept; the others are loaded all the same.
func (d *Driver) LoadBatch(files []*unit.File) []error {
	errs := make([]error, len(files))
	items := make([]*batchItem, 0, len(files))
	first := make(map[string]int, len(files))
	for i, f := range files {
		if err := d.check(f); err != nil {
			errs[i] = err
			continue
		}
		if j, dup := first[f.Name]; dup {
			errs[i] = fmt.Errorf("systemddriver: load %s: the batch holds it twice (files %d and %d)", f.Name, j, i)
			continue
		}
		first[f.Name] = i
		items = append(items, &batchItem{i: i, name: f.Name})
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		for _, it := range items {
			errs[it.i] = fmt.Errorf("load %s: %w", it.name, ErrClosed)
		}
		return errs
	}
	for _, it := range items {
		u := d.units[it.name]
		if u == nil {
			u = &sdUnit{typ: unit.TypeOf(it.name)}
			d.units[it.name] = u
		}
		u.hash, u.removed = files[it.i].Hash, false
	}
	d.mu.Unlock()

	written := items[:0]
	for _, it := range items {
		want := content(files[it.i], d.cfg.Inaccessible)
		if have, err := os.ReadFile(d.path(it.name)); err != nil || !bytes.Equal(have, want) {
			if err := writeFile(d.path(it.name), want); err != nil {
				d.forget(it.name)
				errs[it.i] = fmt.Errorf("load %s: %w", it.name, err)
				continue
			}
		}
		written = append(written, it)
	}
	items = written
	if len(items) == 0 {
		return errs
	}

	// systemd loads a unit it does not hold from its file when asked for
	// it, so a new unit needs no reload. The units it holds (but as not
	// found) take the slow path.
	held, err := d.held()
	var fast, slow []*batchItem
	for _, it := range items {
		if st, ok := held[it.name]; err != nil || ok && st != "not-found" {
			slow = append(slow, it)
		} else {
			fast = append(fast, it)
		}
	}
	slow = append(slow, d.loadNew(fast)...)
	if len(slow) > 0 {
		d.loadHeld(slow, errs)
	}
	for _, it := range items {
		if errs[it.i] != nil {
			continue
		}
		var loadErr error
		switch {
		case it.p.Load != "loaded":
			loadErr = fmt.Errorf("load %s: systemd could not load it (%s): %s", it.name, it.p.Load, it.p.LoadError)
		case it.p.Fragment != d.path(it.name):
			loadErr = fmt.Errorf("load %s: %w: %s takes precedence over %s", it.name, ErrNotOurs, it.p.Fragment, d.path(it.name))
		}
		if loadErr != nil {
			d.forget(it.name)
			os.Remove(d.path(it.name))
			errs[it.i] = loadErr
		}
	}
	return errs
}

// held returns the load state of every unit systemd holds.
func (d *Driver) held() (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	sts, err := d.conn.ListUnitsContext(ctx)
	if err != nil {
		d.log.Warn("list the units systemd holds", "err", err)
		return nil, err
	}
	out := make(map[string]string, len(sts))
	for _, s := range sts {
		out[s.Name] = s.LoadState
	}
	return out, nil
}

// loadNew has systemd load units it did not hold, reads their states and
// applies those loaded, from the driver's file, and inactive. It returns
// the others, for loadHeld.
func (d *Driver) loadNew(items []*batchItem) (rest []*batchItem) {
	if len(items) == 0 {
		return nil
	}
	byName := make(map[string]*batchItem, len(items))
	names := make([]string, len(items))
	for i, it := range items {
		byName[it.name] = it
		names[i] = it.name
	}
	// rmu keeps the watcher from applying a state read after these.
	d.rmu.Lock()
	defer d.rmu.Unlock()
	listed := make(map[string]bool, len(items))
	for chunk := range slices.Chunk(names, batchMax) {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		sts, err := d.conn.ListUnitsByNamesContext(ctx, chunk)
		cancel()
		if err != nil {
			d.log.Warn("load units", "units", len(chunk), "err", err)
			continue
		}
		for _, s := range sts {
			if it := byName[s.Name]; it != nil {
				it.p.Load, it.p.Active, it.p.Sub = s.LoadState, s.ActiveState, s.SubState
				listed[s.Name] = true
			}
		}
	}
	var loaded []*batchItem
	for _, it := range items {
		if listed[it.name] && it.p.Load == "loaded" {
			loaded = append(loaded, it)
		} else {
			rest = append(rest, it)
		}
	}
	each(len(loaded), func(i int) {
		it := loaded[i]
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		if v, err := d.conn.GetUnitPropertyContext(ctx, it.name, "FragmentPath"); err == nil {
			it.p.Fragment, _ = v.Value.Value().(string)
		}
	})
	for _, it := range loaded {
		// A unit that is not inactive (a socket's service started at
		// once) needs its whole state: loadHeld reads it.
		if it.p.Fragment != d.path(it.name) || it.p.Active != "inactive" {
			rest = append(rest, it)
			continue
		}
		it.p.Result = "success" // as readTyped has it for an inactive unit
		d.mu.Lock()
		u := d.units[it.name]
		if u == nil {
			d.mu.Unlock()
			continue
		}
		d.set(it.name, u, it.p)
	}
	return rest
}

// loadHeld loads units as Load did each: it reads the unit's whole state,
// and if systemd holds it from an older file (or as not found, or from
// another file) reloads systemd once for them all and reads it again.
func (d *Driver) loadHeld(items []*batchItem, errs []error) {
	var again []*batchItem
	for _, it := range items {
		path := d.path(it.name)
		it.p = props{}
		d.refresh(it.name, func(q props) bool {
			it.p = q
			return q.Load == "loaded" && q.Fragment == path && !q.NeedReload
		})
		if !(it.p.Load == "loaded" && it.p.Fragment == path && !it.p.NeedReload) {
			again = append(again, it)
		}
	}
	if len(again) == 0 {
		return
	}
	if err := d.reloads.do(); err != nil {
		for _, it := range again {
			errs[it.i] = fmt.Errorf("load %s: reload systemd: %w", it.name, err)
		}
		return
	}
	for _, it := range again {
		path := d.path(it.name)
		d.refresh(it.name, func(q props) bool {
			it.p = q
			return q.Load == "loaded" && q.Fragment == path
		})
	}
}
