package systemddriver

import (
	"context"
	"slices"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"

	"github.com/flotilla/flotilla/internal/unit"
)

// typeInterfaces maps a unit type to the D-Bus interface holding its
// Result (and, for services, MainPID).
var typeInterfaces = map[string]string{
	"service": "Service", "socket": "Socket", "timer": "Timer", "path": "Path",
	"mount": "Mount", "automount": "Automount", "swap": "Swap",
}

// batchMax bounds how many units one ListUnitsByNames call reads.
const batchMax = 512

// seen is what the signals about one unit said, merged so that their
// order does not matter: godbus hands signals over from goroutines of its
// own once its buffer is full, so they may arrive out of order.
type seen struct {
	started    bool  // left inactive at least once
	changeUsec int64 // the latest StateChangeTimestamp
}

// watch follows systemd's PropertiesChanged signals until the driver
// shuts. A signal only marks its unit dirty; once no more signals wait,
// the dirty units' current states are read in one call
// (ListUnitsByNames), so a burst of signals costs a few calls, and a
// signal that arrives late cannot put an older state back. A lost signal
// (the subscription's buffer was full) makes every loaded unit dirty.
func (d *Driver) watch() {
	defer d.watched.Done()
	dirty := map[string]seen{}
	add := func(up *sddbus.PropertiesUpdate) {
		d.mu.Lock()
		_, ours := d.units[up.UnitName]
		d.mu.Unlock()
		if !ours {
			return
		}
		s := dirty[up.UnitName]
		if t, ok := up.Changed["InactiveExitTimestampMonotonic"].Value().(uint64); ok && t > 0 {
			s.started = true
		}
		if t, ok := up.Changed["StateChangeTimestamp"].Value().(uint64); ok {
			s.changeUsec = max(s.changeUsec, int64(t))
		}
		dirty[up.UnitName] = s
	}
	all := func(err error) {
		d.log.Warn("systemd signals lost; reading every unit's state", "err", err)
		d.mu.Lock()
		for n := range d.units {
			dirty[n] = dirty[n]
		}
		d.mu.Unlock()
	}
	gather := time.NewTimer(gatherFor)
	defer gather.Stop()
	for {
		select {
		case <-d.stop:
			return
		case up := <-d.updates:
			add(up)
		case err := <-d.errs:
			all(err)
		}
		// systemd signals each unit's changes as it makes them: read at
		// once, a thousand units starting cost a read each. The signals
		// of the next few milliseconds are taken with the first.
		gather.Reset(gatherFor)
	drain:
		for {
			select {
			case up := <-d.updates:
				add(up)
			case err := <-d.errs:
				all(err)
			case <-gather.C:
				break drain
			case <-d.stop:
				return
			}
		}
		if len(dirty) > 0 {
			d.refreshMany(dirty)
			clear(dirty)
		}
	}
}

// gatherFor is how long the watcher gathers signals after the first
// before it reads the units' states.
const gatherFor = 10 * time.Millisecond

// refreshMany reads the current state of the dirty units and applies it.
func (d *Driver) refreshMany(dirty map[string]seen) {
	names := make([]string, 0, len(dirty))
	for n := range dirty {
		names = append(names, n)
	}
	slices.Sort(names)
	d.rmu.Lock()
	defer d.rmu.Unlock()
	for chunk := range slices.Chunk(names, batchMax) {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		sts, err := d.conn.ListUnitsByNamesContext(ctx, chunk)
		cancel()
		if err != nil {
			d.log.Warn("read units' state", "units", len(chunk), "err", err)
			continue
		}
		us := make([]*sdUnit, len(sts))
		ps := make([]props, len(sts))
		var reads []int // the units whose state changed
		for k, s := range sts {
			d.mu.Lock()
			u := d.units[s.Name]
			d.mu.Unlock()
			if u == nil {
				continue
			}
			p := u.props
			p.Load, p.Active, p.Sub = s.LoadState, s.ActiveState, s.SubState
			sn := dirty[s.Name]
			p.Started = p.Started || sn.started || p.Active != "inactive"
			p.ChangeUsec = max(p.ChangeUsec, sn.changeUsec)
			us[k], ps[k] = u, p
			// A state left and entered again between two reads (a
			// oneshot run by its timer) changed its time and Result.
			if p.Load != u.props.Load || p.Active != u.props.Active || p.Sub != u.props.Sub || u.status.Name == "" ||
				p.ChangeUsec != u.props.ChangeUsec || p.Started != u.props.Started {
				reads = append(reads, k)
			}
		}
		// A burst (a thousand units started) changes many units at once:
		// their MainPID and Result are read with several calls in flight.
		// A unit going from active to deactivating keeps its MainPID
		// and Result until it has stopped: nothing to read.
		reads = slices.DeleteFunc(reads, func(k int) bool {
			return ps[k].Active == "deactivating" && us[k].props.Active == "active" && ps[k].Load == us[k].props.Load
		})
		each(len(reads), func(j int) {
			k := reads[j]
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			d.readTyped(ctx, sts[k].Name, us[k].typ, &ps[k])
			cancel()
		})
		for k, s := range sts {
			if us[k] != nil {
				d.mu.Lock()
				d.set(s.Name, us[k], ps[k])
			}
		}
	}
}

// refresh reads one loaded unit's whole state from systemd, updates its
// status and notifies a change. check, if set, sees the properties read
// first, and keeps them from being applied by returning false.
func (d *Driver) refresh(name string, check func(props) bool) {
	d.rmu.Lock()
	defer d.rmu.Unlock()
	d.mu.Lock()
	u := d.units[name]
	d.mu.Unlock()
	if u == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	all, err := d.conn.GetUnitPropertiesContext(ctx, name)
	if err != nil {
		d.log.Warn("read a unit's state", "unit", name, "err", err)
		return
	}
	p := unitProps(all)
	p.PID, p.Result = u.props.PID, u.props.Result
	d.readTyped(ctx, name, u.typ, &p)
	if check != nil && !check(p) {
		return
	}
	d.mu.Lock()
	d.set(name, u, p)
}

// readTyped reads a unit's Result and a service's MainPID. The Result of
// an inactive or active unit is "success" (systemd resets it when the
// unit starts, and puts a unit whose result is any other in failed or,
// restarting, activating), and an inactive or failed unit's status shows
// no PID: a thousand units starting, or stopping, cost a thousand calls
// fewer.
func (d *Driver) readTyped(ctx context.Context, name, typ string, p *props) {
	iface := typeInterfaces[typ]
	if iface == "" || p.Load != "loaded" {
		return
	}
	if p.Active == "inactive" || p.Active == "active" {
		p.Result = "success"
	}
	if typ == "service" && p.Active != "inactive" && p.Active != "failed" {
		if v, err := d.conn.GetUnitTypePropertyContext(ctx, name, iface, "MainPID"); err == nil {
			if pid, ok := v.Value.Value().(uint32); ok {
				p.PID = int(pid)
			}
		}
	}
	if p.Active == "inactive" || p.Active == "active" {
		return
	}
	if v, err := d.conn.GetUnitTypePropertyContext(ctx, name, iface, "Result"); err == nil {
		p.Result, _ = v.Value.Value().(string)
	}
}

// set stores a unit's properties and notifies its status if it changed.
// d.mu is held and released.
func (d *Driver) set(name string, u *sdUnit, p props) {
	if u.removed {
		d.mu.Unlock()
		return
	}
	u.props = p
	st := d.status(name, u)
	if st == u.status {
		d.mu.Unlock()
		return
	}
	u.status = st
	d.mu.Unlock()
	d.cfg.Notify(st)
}

// unitProps picks the properties of a unit's org.freedesktop.systemd1.Unit
// interface that a status is made of.
func unitProps(all map[string]any) props {
	var p props
	p.Load, _ = all["LoadState"].(string)
	p.Active, _ = all["ActiveState"].(string)
	p.Sub, _ = all["SubState"].(string)
	p.Fragment, _ = all["FragmentPath"].(string)
	p.NeedReload, _ = all["NeedDaemonReload"].(bool)
	if t, ok := all["InactiveExitTimestampMonotonic"].(uint64); ok {
		p.Started = t > 0
	}
	if t, ok := all["StateChangeTimestamp"].(uint64); ok {
		p.ChangeUsec = int64(t)
	}
	if le, ok := all["LoadError"].([]any); ok && len(le) == 2 {
		p.LoadError, _ = le[1].(string)
	}
	return p
}

// status makes a unit's status of its properties. d.mu is held.
func (d *Driver) status(name string, u *sdUnit) unit.Status {
	p := u.props
	st := unit.Status{Name: name, Hash: u.hash, Machine: d.cfg.Machine, Load: p.Load, Active: p.Active, Sub: p.Sub, PID: p.PID}
	if p.Started || p.Active == "failed" {
		st.Result = p.Result
	}
	if st.Active == "inactive" || st.Active == "failed" {
		st.PID = 0
	}
	if u.status.Active == st.Active && !u.status.Since.IsZero() {
		st.Since = u.status.Since
	} else if p.ChangeUsec > 0 {
		st.Since = time.UnixMicro(p.ChangeUsec)
	}
	if p.Load != "loaded" && p.LoadError != "" {
		st.Message = p.LoadError
	}
	if !st.Running() && d.fencedLocked(name) {
		st.Result, st.Message = resultFenced, fencedMessage
	}
	return st
}
