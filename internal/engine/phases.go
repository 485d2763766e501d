package engine

import (
	"log/slog"
	"time"
)

// slowPass is how long a reconcile pass or an apply round may take before
// the engine logs where its time went, as etcd logs an apply that "took too
// long": requests wait for the pass under way, so a slow pass is what an
// operator sees as a slow API.
const slowPass = time.Second

// passPhases times the phases of a pass (or a round): the time since the
// last phase ended is added to the named phase, so a phase run in slices
// (commit, apply) is summed over them.
type passPhases struct {
	began, last time.Time
	names       []string
	took        []time.Duration
	counts      []any // name, count pairs noted along the way
}

func (p *passPhases) start(now time.Time) { p.began, p.last = now, now }

// done ends the current phase as name.
func (p *passPhases) done(name string) {
	now := time.Now()
	d := now.Sub(p.last)
	p.last = now
	for i, n := range p.names {
		if n == name {
			p.took[i] += d
			return
		}
	}
	p.names = append(p.names, name)
	p.took = append(p.took, d)
}

// note records a count worth logging with the phases.
func (p *passPhases) note(name string, n int) { p.counts = append(p.counts, name, n) }

// logSlow logs the phases if the whole took slowPass or more.
func (p *passPhases) logSlow(log *slog.Logger, what string) {
	total := time.Since(p.began)
	if total < slowPass {
		return
	}
	args := []any{"took", total.Round(time.Millisecond)}
	for i, n := range p.names {
		args = append(args, n, p.took[i].Round(time.Millisecond))
	}
	log.Warn(what+" was slow", append(args, p.counts...)...)
}
