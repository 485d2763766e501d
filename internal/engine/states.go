package engine

import (
	"time"
	"unique"

	"github.com/flotilla/flotilla/internal/unit"
)

// unitStates are unit states a machine's agent reported, by unit name: a
// machine's others (a scheduled unit's is in its machine's list; see
// term.stateOf). A state is kept compactly, as the leader holds one for
// every unit in the cluster, and as agentStatus values (200 bytes: eight
// strings, two times) a million of them were the largest thing in its
// heap. The strings that take few values across units (load, active, sub,
// result, applied, the file's hash, and the message, most often empty) are
// one handle to an interned tuple; the name is the key (or the list
// entry's) and the machine is the owner; times are Unix nanoseconds. 32
// bytes a unit.
type unitStates map[string]storedStatus

type storedStatus struct {
	codes    unique.Handle[statusCodes]
	since    int64
	observed int64
	pid      int32
}

type statusCodes struct {
	load, active, sub, result, applied, hash, message, health string
}

// ok reports whether st holds a state (the zero value holds none).
func (st storedStatus) ok() bool { return st.codes != unique.Handle[statusCodes]{} }

// The states a machine's agent reported are kept in two places: a unit
// scheduled on the machine has its state in its entry of the machine's
// list (unitList, at its record's slot); any other unit's is in the
// machine's others. These find the one a name goes to. They run on the
// loop.

// listed returns unit name's entry in m's list, nil unless it is
// scheduled there.
func (t *term) listed(m *machineRec, name string) *machineUnit {
	return listedRec(m, t.units[name])
}

// listedRec is listed for a caller holding the unit's record r (nil: none).
func listedRec(m *machineRec, r *unitRec) *machineUnit {
	if r == nil || r.machine != m.info.ID || r.file.Fleet.Global {
		return nil
	}
	return &m.units[r.slot]
}

// stateOf returns unit name's state as m's agent reported it.
func (t *term) stateOf(m *machineRec, name string) (storedStatus, bool) {
	return stateAt(m, t.listed(m, name), name)
}

// stateAt is stateOf for a caller holding the unit's entry in m's list (e;
// nil when it is not listed there).
func stateAt(m *machineRec, e *machineUnit, name string) (storedStatus, bool) {
	if e != nil {
		return e.st, e.st.ok()
	}
	st, ok := m.others[name]
	return st, ok
}

// slotsOf returns the loop's scratch map of m's units by name to their
// place in m.units (the units listed on m, as listed finds them); the
// caller clears it.
func (t *term) slotsOf(m *machineRec) map[string]int32 {
	if t.slotScratch == nil {
		t.slotScratch = make(map[string]int32, len(m.units))
	}
	for i, e := range m.units {
		t.slotScratch[e.name()] = int32(i)
	}
	return t.slotScratch
}

// stateIn is stateOf for a caller holding m's slots (slotsOf).
func stateIn(m *machineRec, slots map[string]int32, name string) (storedStatus, bool) {
	if i, ok := slots[name]; ok {
		return m.units[i].st, m.units[i].st.ok()
	}
	st, ok := m.others[name]
	return st, ok
}

// putStateIn is putState for a caller holding m's slots (slotsOf).
func putStateIn(m *machineRec, slots map[string]int32, s agentStatus) {
	if i, ok := slots[s.Name]; ok {
		m.units[i].st = store(s)
		return
	}
	m.others[s.Name] = store(s)
}

// statusOf is stateOf, expanded.
func (t *term) statusOf(m *machineRec, name string) (agentStatus, bool) {
	st, ok := t.stateOf(m, name)
	if !ok {
		return agentStatus{}, false
	}
	return st.status(m.info.ID, name), true
}

// putState stores s as m's agent's state of unit s.Name.
func (t *term) putState(m *machineRec, s agentStatus) {
	putStateAt(m, t.listed(m, s.Name), s)
}

// putStateAt is putState for a caller holding the unit's entry (stateAt).
func putStateAt(m *machineRec, e *machineUnit, s agentStatus) {
	if e != nil {
		e.st = store(s)
		return
	}
	m.others[s.Name] = store(s)
}

// dropState forgets m's state of unit name, and returns it.
func (t *term) dropState(m *machineRec, name string) (agentStatus, bool) {
	s, ok := t.statusOf(m, name)
	if !ok {
		return s, false
	}
	if e := t.listed(m, name); e != nil {
		e.st = storedStatus{}
	} else {
		delete(m.others, name)
	}
	return s, true
}

// eachState calls f with every state m's agent reported, in no order; f
// must not change them.
func eachState(m *machineRec, f func(name string, st storedStatus)) {
	for _, e := range m.units {
		if e.st.ok() {
			f(e.name(), e.st)
		}
	}
	for name, st := range m.others {
		f(name, st)
	}
}

// clearStates forgets every state m's agent reported.
func clearStates(m *machineRec) {
	for i := range m.units {
		m.units[i].st = storedStatus{}
	}
	if len(m.others) > 0 {
		m.others = unitStates{}
	}
}

// store returns s in its stored form, without its name and machine.
func store(s agentStatus) storedStatus {
	return storedStatus{
		codes: unique.Make(statusCodes{load: s.Load, active: s.Active, sub: s.Sub, result: s.Result, applied: s.Applied, hash: s.Hash, message: s.Message, health: s.Health}),
		since: nanos(s.Since), observed: nanos(s.Observed), pid: int32(s.PID),
	}
}

// status expands a stored state.
func (st storedStatus) status(machine, name string) agentStatus {
	c := st.codes.Value()
	return agentStatus{Applied: c.applied, Observed: unixNano(st.observed), Status: unit.Status{
		Name: name, Hash: c.hash, Machine: machine, Load: c.load, Active: c.active, Sub: c.sub,
		PID: int(st.pid), Since: unixNano(st.since), Result: c.result, Message: c.message, Health: c.health,
	}}
}

// active is the stored state's Active, without expanding it.
func (st storedStatus) active() string { return st.codes.Value().active }

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
