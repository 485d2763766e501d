package engine

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/unit"
)

// Reads answer from the leader's memory, so they keep answering while etcd
// is unreachable. Each returns ErrNotLeader on an engine that does not lead.
// They take no lock: the few the loop publishes views for read those
// (views.go: Machines, Scheduler, KeepVersions); the others are read
// requests the loop answers between its steps and while it waits for etcd
// (onLoop), so that a read sees every write acknowledged before it began.

// Units lists units, all of them or those named (glob patterns allowed), sorted by name.
func (e *Engine) Units(names []string) ([]apiv1.Unit, error) {
	t, err := e.reader()
	if err != nil {
		return nil, err
	}
	return readOnLoop(t, func() ([]apiv1.Unit, error) { return t.listUnits(names) })
}

// listUnits is Units on the loop.
func (t *term) listUnits(names []string) ([]apiv1.Unit, error) {
	var out []apiv1.Unit
	if len(names) > 0 && !hasGlob(names) {
		for _, n := range names {
			if r := t.units[n]; r != nil {
				out = append(out, t.unitView(r, false))
			}
		}
	} else {
		out = make([]apiv1.Unit, 0, len(t.units))
		for _, r := range t.units {
			if len(names) == 0 || matchAny(names, r.name()) {
				out = append(out, t.unitView(r, false))
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Unit returns one unit with its file, or ErrNotFound.
func (e *Engine) Unit(name string) (apiv1.Unit, error) {
	t, err := e.reader()
	if err != nil {
		return apiv1.Unit{}, err
	}
	return readOnLoop(t, func() (apiv1.Unit, error) { return t.unit(name) })
}

// unit is Unit on the loop.
func (t *term) unit(name string) (apiv1.Unit, error) {
	r := t.units[name]
	if r == nil {
		return apiv1.Unit{}, fmt.Errorf("unit %s %w", name, ErrNotFound)
	}
	return t.unitView(r, true), nil
}

// UnitStates lists what agents report, optionally for one machine and/or
// some units, sorted by unit then machine.
func (e *Engine) UnitStates(machine string, names []string) ([]apiv1.UnitState, error) {
	t, err := e.reader()
	if err != nil {
		return nil, err
	}
	return readOnLoop(t, func() ([]apiv1.UnitState, error) { return t.listStates(machine, names) })
}

// listStates is UnitStates on the loop.
func (t *term) listStates(machine string, names []string) ([]apiv1.UnitState, error) {
	out := []apiv1.UnitState{}
	add := func(id string, m *machineRec) {
		eachState(m, func(name string, st storedStatus) {
			if len(names) == 0 || matchAny(names, name) {
				out = append(out, stateView(st.status(id, name)))
			}
		})
	}
	if machine != "" {
		// One machine's: looked up, not found among every machine (a
		// client reading each of 10,000 machines' states in turn walked
		// the 10,000 each time).
		if m := t.machines[machine]; m != nil {
			add(machine, m)
		}
	} else {
		for id, m := range t.machines {
			add(id, m)
		}
	}
	slices.SortFunc(out, func(a, b apiv1.UnitState) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Machine, b.Machine)
	})
	return out, nil
}

// Machines lists the connected machines, sorted by ID.
func (e *Engine) Machines() ([]apiv1.Machine, error) {
	t, err := e.reader()
	if err != nil {
		return nil, err
	}
	// The machines' views are made when asked, on the loop (which shows
	// every write acknowledged before the call), not published with the
	// loop's other views: made again at each publish, after every pass
	// and every agent's attach, they were most of the engine's added
	// garbage during a start (docs/benchmarks.md).
	return readOnLoop(t, func() ([]apiv1.Machine, error) { return t.machineViews(), nil })
}

// machineViews renders the connected machines sorted by ID. It runs on the
// loop (Machines, and the state's builds).
func (t *term) machineViews() []apiv1.Machine {
	out := make([]apiv1.Machine, 0, len(t.machines))
	var moving map[string]int // draining machine -> its units mid-move
	if len(t.moves.drainMachines) > 0 {
		moving = map[string]int{}
		for _, from := range t.moves.draining {
			moving[from]++
		}
		for _, h := range t.moves.handovers {
			moving[h.From]++
		}
	}
	for id, m := range t.machines {
		if m.conn == nil {
			continue
		}
		md := t.metadata(m)
		if md == nil {
			md = map[string]string{}
		}
		out = append(out, apiv1.Machine{ID: id, IP: m.info.IP, Metadata: md, Leader: id == t.info.Machine, ConnectedAt: m.conn.since,
			APIAddr: m.info.APIAddr, Version: m.info.Version, Protocol: m.info.Protocol, Units: len(m.units) + len(m.globals),
			Capacity: apiv1.Resources{CPUPercent: m.info.CPUPercent, MemoryBytes: m.info.MemoryBytes},
			Free:     apiv1.Resources{CPUPercent: free(m.info.CPUPercent, m.used.CPUPercent), MemoryBytes: free(m.info.MemoryBytes, m.used.MemoryBytes)},
			Draining: t.moves.drainMachines[id] > 0, MaxParallel: t.moves.drainMachines[id], Drivers: drivers(m.info.Drivers)})
		if v := &out[len(out)-1]; v.Draining {
			v.Moving = moving[id]
			for _, e := range m.units {
				if t.moves.held[e.name()] {
					v.Staying = append(v.Staying, apiv1.UnitReason{Name: e.name(), Reason: t.units[e.name()].reason})
				}
			}
			sort.Slice(v.Staying, func(i, j int) bool { return v.Staying[i].Name < v.Staying[j].Name })
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// drivers names the drivers of a machine; one that names none runs exec.
func drivers(set unit.DriverSet) []string {
	if set == 0 {
		set = unit.DriverExec
	}
	return set.Names()
}

// UnitMachine returns the API address of the machine that runs (or last
// reported) the unit, for journal requests.
func (e *Engine) UnitMachine(name string) (id, apiAddr string, err error) {
	t, err := e.reader()
	if err != nil {
		return "", "", err
	}
	if lerr := t.onLoop(func() { id, apiAddr, err = t.unitMachine(name) }); lerr != nil {
		return "", "", lerr
	}
	return id, apiAddr, err
}

// unitMachine is UnitMachine on the loop.
func (t *term) unitMachine(name string) (id, apiAddr string, err error) {
	if r := t.units[name]; r != nil && r.machine != "" {
		if m := t.machines[r.machine]; m != nil && m.info.APIAddr != "" {
			return m.info.ID, m.info.APIAddr, nil
		}
	}
	for id, m := range t.machines {
		if _, ok := t.stateOf(m, name); ok && m.info.APIAddr != "" {
			return id, m.info.APIAddr, nil
		}
	}
	return "", "", ErrNotFound
}

// unitView renders a unit. It runs on the loop.
func (t *term) unitView(r *unitRec, withFile bool) apiv1.Unit {
	u := apiv1.Unit{
		Name: r.name(), Hash: r.file.Hash, Description: r.file.Description,
		DesiredState: string(r.desired()), Machine: r.machine, Reason: r.reason, CurrentState: string(unit.Inactive),
		Global: r.file.Fleet.Global, Singleton: r.file.Fleet.Singleton, LostAfter: lostAfterText(r.file.Fleet.LostAfter),
	}
	if withFile {
		u.File = r.file.Raw
	}
	u.History = t.unitHistory(r.name())
	if r.machine == "" {
		u.MovingFrom = t.moves.draining[r.name()]
	} else {
		u.MovingFrom = t.moves.handovers[r.name()].From
		u.Staying = t.moves.held[r.name()]
	}
	if r.file.Fleet.Global {
		// A global unit is where it fits: it has reached its desired state
		// when every machine it is assigned to has carried it out.
		n, done := 0, 0
		for _, m := range t.machines {
			if _, ok := m.globals[r.name()]; ok {
				n++
				if s, ok := t.statusOf(m, r.name()); ok && s.Applied == string(r.desired()) {
					done++
				}
			}
		}
		if n > 0 && done == n {
			u.CurrentState = string(r.desired())
		}
		return u
	}
	if r.machine != "" {
		if m := t.machines[r.machine]; m != nil {
			if s, ok := t.statusOf(m, r.name()); ok {
				sv := stateView(s)
				u.State = &sv
				if s.Applied != "" {
					u.CurrentState = s.Applied
				}
			}
		}
	}
	return u
}

func stateView(s agentStatus) apiv1.UnitState {
	v := apiv1.UnitState{Name: s.Name, Machine: s.Machine, Hash: s.Hash, Load: s.Load, Active: s.Active,
		Sub: s.Sub, PID: s.PID, Result: s.Result, Message: s.Message, Health: s.Health}
	if !s.Since.IsZero() {
		v.Since = s.Since.UTC().Format(time.RFC3339Nano)
	}
	if !s.Observed.IsZero() {
		v.ObservedAt = s.Observed.UTC().Format(time.RFC3339Nano)
	}
	return v
}

func hasGlob(names []string) bool {
	for _, n := range names {
		for _, c := range n {
			if c == '*' || c == '?' || c == '[' {
				return true
			}
		}
	}
	return false
}

func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// free is what capacity leaves after used; 0 when the capacity is not
// declared (anything fits).
func free(capacity, used int64) int64 {
	if capacity == 0 {
		return 0
	}
	return max(capacity-used, 0)
}

// lostAfterText renders [X-Fleet] LostAfter= for the API: "" when unset (the
// agent TTL applies), "infinity", or a Go duration.
func lostAfterText(d time.Duration) string {
	switch d {
	case 0:
		return ""
	case unit.Infinity:
		return "infinity"
	}
	return d.String()
}
