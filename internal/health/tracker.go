// Package health judges whether a unit is healthy, beyond running: the
// probes of its [X-Check] section (a command, an HTTP GET, a TCP
// connection), a tracker that turns their outcomes into a state, and a
// runner that runs them every Interval while the unit is active.
package health

import "time"

// The states of a unit's health.
const (
	// Unknown: the checks have not yet decided (too few failures in a row,
	// or passes that have not yet lasted HealthyAfter).
	Unknown = "unknown"
	// Healthy: the checks have passed for HealthyAfter.
	Healthy = "healthy"
	// Unhealthy: UnhealthyAfter runs of the checks in a row have failed.
	Unhealthy = "unhealthy"
)

// Tracker turns the outcomes of a unit's runs of checks into its health.
// It has no clock: the caller says when each run ended. The zero value is
// not ready; make one with NewTracker. It is not safe for concurrent use.
type Tracker struct {
	healthyAfter   time.Duration
	unhealthyAfter int

	state        string
	passingSince time.Time // the first pass of the current streak; zero while failing
	passing      bool
	fails        int // failed runs in a row
	// graceUntil ends the start period: failures before it do not count
	// until a run has passed (passed).
	graceUntil time.Time
	passed     bool
}

// NewTracker returns a tracker in state Unknown: a unit becomes healthy once
// its runs have passed for healthyAfter (at the first pass when 0), and
// unhealthy after unhealthyAfter failed runs in a row (at least 1).
func NewTracker(healthyAfter time.Duration, unhealthyAfter int) *Tracker {
	return &Tracker{healthyAfter: max(healthyAfter, 0), unhealthyAfter: max(unhealthyAfter, 1), state: Unknown}
}

// StartPeriod has failures that end before until not count, until a run
// passes: a unit given time to come up (Docker's --start-period). A pass
// within it counts as ever, and ends it.
func (t *Tracker) StartPeriod(until time.Time) { t.graceUntil = until }

// State is the current health.
func (t *Tracker) State() string { return t.state }

// Observe records a run of the checks that ended at at, passed or not, and
// returns the health after it and whether it changed. A healthy unit stays
// healthy through fewer than unhealthyAfter failures in a row; an unhealthy
// one stays unhealthy until it has passed again for healthyAfter.
func (t *Tracker) Observe(passed bool, at time.Time) (state string, changed bool) {
	prev := t.state
	if passed {
		t.passed = true
		t.fails = 0
		if !t.passing {
			t.passing, t.passingSince = true, at
		}
		if at.Sub(t.passingSince) >= t.healthyAfter {
			t.state = Healthy
		}
	} else {
		t.passing, t.passingSince = false, time.Time{}
		if !t.passed && at.Before(t.graceUntil) {
			return t.state, false // still coming up
		}
		t.fails++
		if t.fails >= t.unhealthyAfter {
			t.state = Unhealthy
		}
	}
	return t.state, t.state != prev
}
