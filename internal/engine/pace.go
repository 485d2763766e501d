package engine

import "time"

// passPacing spaces the passes that inputs ask for (an agent's Hello, a
// report after a silence, a stream's end, a drained unit): such a pass
// waits until twice the last pass's cost has gone by since that pass
// ended, at most maxPassGap, so that passes take at most about a third
// of the loop's time however many inputs ask for them. A pass costs in
// proportion to the machines (syncMachines, planInput and planReconcile
// look at each), and when 10,000 agents came back to a new leader at
// once, each Hello asked for one at once: the passes took 17 of the new
// leader's 37 CPU-seconds while the agents reconnected (docs/benchmarks.md,
// session 16). Requests, the heartbeat tick, a recheck and a pass that
// asks for the next at once (pokeNow: a chunk of placements, a handover
// to go on) are not paced. Only the loop touches it.
type passPacing struct {
	cost  time.Duration // the last pass's, by the system's clock
	ended time.Time
	now   bool // the next pass is asked for at once (pokeNow)
}

const (
	// maxPassGap bounds a paced pass's wait.
	maxPassGap = 250 * time.Millisecond
	// minPacedCost is the cost below which passes are not paced: a small
	// cluster's, or a test's.
	minPacedCost = 2 * time.Millisecond
)

// wait is how long a pass asked for by an input waits from now.
func (p *passPacing) wait(now time.Time) time.Duration {
	if p.now || p.cost < minPacedCost {
		return 0
	}
	return min(p.ended.Add(2*p.cost).Sub(now), maxPassGap)
}

// passed notes a pass that began and ended then (a pokeNow during it
// stands: it asks for the next).
func (p *passPacing) passed(began, ended time.Time) {
	p.cost, p.ended = ended.Sub(began), ended
}

// pokeNow asks for a pass at once, not paced. It runs on the loop.
func (t *term) pokeNow() {
	t.pace.now = true
	t.poke()
}
