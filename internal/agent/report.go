package agent

import (
	"sync"

	"github.com/flotilla/flotilla/internal/unit"
)

// report is a unit's latest report from the driver, as the agent keeps it
// until it is sent: a unit.Status is 176 bytes, and a host of simulated
// agents (flotilla bench) holds half a million units a process. The
// machine is the agent's own and the name is the key it is kept under;
// the load, active, sub and result strings come from a small set, and are
// kept once for all units (internStates).
type report struct {
	hash    string
	states  *reportStates // Load, Active, Sub, Result
	pid     int32
	since   int64 // Unix nanoseconds; 0: none
	message string
}

// reportStates are a report's Load, Active, Sub and Result, and the
// health its driver judged (a Docker image's HEALTHCHECK), "" for none.
type reportStates [5]string

// maxInterned bounds the distinct states kept once for all units: a driver
// reports a few dozen; past the bound, a report keeps its own.
const maxInterned = 1024

var interned = struct {
	sync.RWMutex
	m map[reportStates]*reportStates
}{m: map[reportStates]*reportStates{}}

// internStates returns the one copy of k kept for all units.
func internStates(k reportStates) *reportStates {
	interned.RLock()
	p := interned.m[k]
	interned.RUnlock()
	if p != nil {
		return p
	}
	interned.Lock()
	defer interned.Unlock()
	if p = interned.m[k]; p != nil {
		return p
	}
	p = new(reportStates) // not &k: k would be moved to the heap on every call
	*p = k
	if len(interned.m) < maxInterned {
		interned.m[k] = p
	}
	return p
}

// compact keeps s as a report.
func compact(s unit.Status) report {
	c := report{hash: s.Hash, states: internStates(reportStates{s.Load, s.Active, s.Sub, s.Result, s.Health}), pid: int32(s.PID), message: s.Message}
	if !s.Since.IsZero() {
		c.since = s.Since.UnixNano()
	}
	return c
}
