package engine

import (
	"slices"
	"time"
)

// A leader that cannot hear many of its machines at once doubts that they
// are gone before it places their units elsewhere. Machines fail one at a
// time, a rack at a time; a tenth of a cluster falling silent together
// is more likely the leader's own trouble (its host starved, its network
// congested, etcd slow to keep its lease) or a partition between it and
// machines that still run their units: replacing them all would start
// thousands of copies beside running ones, and stop the running ones once
// heard again (promise 3 of DESIGN.md). Kubernetes' node lifecycle
// controller stops evicting for the same reason when a zone is wholly
// unready. Observed: ten thousand simulated agents sharing a busy 2-CPU
// host with their leader, two standbys and etcd fell 28 s to minutes
// behind with their heartbeats during a million-unit start, and the
// leader placed 272,000 running units elsewhere in one pass.
//
// The doubt begins when a pass would lose units of unreachable machines
// while at least massSilenceMin machines, and a tenth of those that have
// not left, are unreachable. For doubtFor from then, no unit of an
// unreachable machine is lost (a machine that left is gone all the same:
// it said so), however many machines are heard again meanwhile: the last
// to come back are the slowest of the same trouble. Once it has run out,
// units are lost as their LostAfter= says; another doubt may begin only
// after fewer machines than that have been silent, so a real mass failure
// is doubted once. Delaying a replacement is always safe for a Singleton=
// unit.

// massSilenceMin is the fewest silent machines that make the leader doubt:
// in a small cluster a tenth is a machine or two, and those do fail.
const massSilenceMin = 10

// massSilence reports whether silent machines of known (those that have not
// left) are enough to doubt that they are gone.
func massSilence(silent, known int) bool {
	return silent >= massSilenceMin && 10*silent >= known
}

// doubtFor is how long a doubt lasts: the agent TTL, or the time a new
// term gives as many machines to reconnect (reconnectGrace) if longer.
func doubtFor(machines int, agentTTL time.Duration) time.Duration {
	return max(agentTTL, reconnectGrace(machines))
}

// doubt decides whether the pass doubts that the unreachable machines are
// gone, given p.Lost as the pass would lose them: it sets p.Doubt (zero:
// no doubt) and the counts it rests on, and reports whether the units of
// unreachable machines are held this pass.
func (in *planInput) doubt(p *reconcilePlan) bool {
	silent, known := 0, 0
	for _, m := range in.Machines {
		if m.Left {
			continue
		}
		known++
		if !m.Reachable {
			silent++
		}
	}
	p.Silent, p.Known = silent, known
	mass := massSilence(silent, known)
	switch {
	case !in.Doubt.IsZero() && in.Now.Before(in.Doubt):
		p.Doubt = in.Doubt
	case !in.Doubt.IsZero() && mass:
		p.Doubt = in.Doubt // run out, the machines still silent
		return false
	case in.Doubt.IsZero() && mass && slices.ContainsFunc(p.Lost, func(l lostUnit) bool { return !l.Left }):
		p.Doubt = in.Now.Add(in.DoubtFor)
	default:
		return false
	}
	if p.Recheck.IsZero() || p.Doubt.Before(p.Recheck) {
		p.Recheck = p.Doubt
	}
	return true
}

// noteDoubt keeps the pass's doubt for the next and says when one begins
// and when it runs out. It runs on the loop.
func (t *term) noteDoubt(p *reconcilePlan) {
	was := t.doubt
	t.doubt = p.Doubt
	if !was.Equal(p.Doubt) {
		at := 0.0
		if !p.Doubt.IsZero() {
			at = float64(p.Doubt.UnixNano()) / 1e9
		}
		t.e.cfg.Metrics.DoubtUntil.Set(at)
	}
	switch {
	case was.IsZero() && !p.Doubt.IsZero():
		t.e.log.Warn("many machines fell silent at once: doubting they are gone, the leader places none of their units elsewhere until the doubt ends",
			"silent", p.Silent, "machines", p.Known, "until", p.Doubt.Format(time.RFC3339))
	case !was.IsZero() && !t.now.Before(was) && !t.doubtRanOut:
		t.e.log.Warn("the doubt has run out: units of machines still silent are lost as their LostAfter= says",
			"silent", p.Silent, "machines", p.Known)
	}
	t.doubtRanOut = !p.Doubt.IsZero() && !t.now.Before(p.Doubt)
}
