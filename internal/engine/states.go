package engine

import (
	"time"
	"unique"

	"github.com/flotilla/flotilla/internal/unit"
)

// unitStates are the unit states a machine's agent reported, by unit name,
// kept compactly: the leader holds one for every unit in the cluster, and
// as agentStatus values (200 bytes: eight strings, two times) a million of
// them were the largest thing in its heap. The strings that take few
// values across units (load, active, sub, result, applied, the file's hash,
// and the message, most often empty) are one handle to an interned tuple;
// the name is the map's key and the machine is the map's owner; times are
// Unix nanoseconds. 32 bytes a unit.
type unitStates map[string]storedStatus

type storedStatus struct {
	codes    unique.Handle[statusCodes]
	since    int64
	observed int64
	pid      int32
}

type statusCodes struct {
	load, active, sub, result, applied, hash, message string
}

// get returns unit name's state on machine, as agentStatus.
func (u unitStates) get(machine, name string) (agentStatus, bool) {
	st, ok := u[name]
	if !ok {
		return agentStatus{}, false
	}
	return st.status(machine, name), true
}

// put stores s under s.Name.
func (u unitStates) put(s agentStatus) { u[s.Name] = store(s) }

// store returns s in its stored form, without its name and machine.
func store(s agentStatus) storedStatus {
	return storedStatus{
		codes: unique.Make(statusCodes{load: s.Load, active: s.Active, sub: s.Sub, result: s.Result, applied: s.Applied, hash: s.Hash, message: s.Message}),
		since: nanos(s.Since), observed: nanos(s.Observed), pid: int32(s.PID),
	}
}

// status expands a stored state.
func (st storedStatus) status(machine, name string) agentStatus {
	c := st.codes.Value()
	return agentStatus{Applied: c.applied, Observed: unixNano(st.observed), Status: unit.Status{
		Name: name, Hash: c.hash, Machine: machine, Load: c.load, Active: c.active, Sub: c.sub,
		PID: int(st.pid), Since: unixNano(st.since), Result: c.result, Message: c.message,
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
