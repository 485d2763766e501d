package bench

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"time"

	"github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
)

// FailoverReport is what --failover measures once every unit is active:
// the leading engine is killed (SIGKILL, as a crash), and the times from
// the kill until another engine serves as leader, until it lists every
// agent connected, and until its state counts every unit active again;
// and how many units the simulated machines started meanwhile, counted in
// the agents' processes (not through the API): a failover restarts none.
type FailoverReport struct {
	Killed string `json:"killed"` // the engine killed
	// StandbySeconds is how long the bench waited, before the kill, for
	// the other engines to hold ready the state they would lead with
	// (GET /v1/status "standby"), as they do in a cluster that has not
	// changed for a moment; StandbyReady says they all did (false: the
	// kill came after standbyTimeout regardless). Engines of the etcd
	// registry prepare nothing: they are not waited for.
	StandbySeconds float64 `json:"standby_seconds"`
	StandbyReady   bool    `json:"standby_ready"`
	// LeaderMovedBeforeKill says the engine leading at the kill was not
	// the one the run began with: a term had ended on its own (the
	// engines' logs are printed).
	LeaderMovedBeforeKill bool `json:"leader_moved_before_kill,omitempty"`
	// LeaderSeconds, AgentsSeconds and ActiveSeconds are from the kill
	// (nil: not reached within the timeout). AgentsSeconds is when the
	// last agent opened its stream to the new leader, as the leader lists
	// it (GET /v1/machines "connectedAt"), not when the bench's poll saw
	// it (up to a second and a poll later; AgentsSeenSeconds), and
	// Agents the spread of those times over every agent.
	LeaderSeconds     *float64     `json:"leader_seconds"`
	AgentsSeconds     *float64     `json:"agents_seconds"`
	AgentsSeenSeconds *float64     `json:"agents_seen_seconds,omitempty"`
	Agents            *Percentiles `json:"agents_back_seconds,omitempty"`
	ActiveSeconds     *float64     `json:"active_seconds"`
	// FullSets counts the full sets the new leader gave the agents from
	// its election until a second after every unit was active, by how
	// (flotilla_agent_full_sets_total): "unchanged" to an agent that held
	// the set already, "whole" otherwise.
	FullSets map[string]int64 `json:"full_sets,omitempty"`
	// Completed says all three were reached.
	Completed bool `json:"completed"`
	// Restarted is how many units were started from the kill until a
	// second after the last of them (0: none restarted).
	Restarted int64  `json:"restarted"`
	Error     string `json:"error,omitempty"`
}

// leading returns the engine leading now, the one to kill. A leader that
// is not the one the run began with lost its term on its own (the figures
// of the run and of the failover then say little about a failover): it is
// said, and noted in r.
func leading(ctx context.Context, c *cluster, r *FailoverReport, prog *progress) (*process, error) {
	if api, err := c.findLeader(ctx); err == nil && api != c.leaderAPI {
		prog.phase("failover: the leader is no longer the engine at %s but the one at %s: a term ended on its own before the kill", c.leaderAPI, api)
		for _, p := range c.engines {
			if !p.killed {
				prog.phase("the end of %s's log (warnings and errors):\n%s", p.name, p.tail(40))
			}
		}
		c.leaderAPI, r.LeaderMovedBeforeKill = api, true
	}
	for i, a := range c.engineAPI {
		if a == c.leaderAPI && !c.engines[i].killed {
			return c.engines[i], nil
		}
	}
	return nil, fmt.Errorf("failover: no running engine serves %s, the leader's API", c.leaderAPI)
}

// measureFailover kills the leading engine and measures the new leader's
// way to a whole cluster. It leaves c.leaderAPI naming the new leader.
func measureFailover(ctx context.Context, c *cluster, prog *progress) (*FailoverReport, error) {
	r := &FailoverReport{}
	// The agents' counts are written every 200 ms: let them settle first.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(500 * time.Millisecond):
	}
	before, err := c.started()
	if err != nil {
		return nil, err
	}
	victim, err := leading(ctx, c, r, prog)
	if err != nil {
		return nil, err
	}
	waited := time.Now()
	r.StandbyReady = waitStandbys(ctx, c, victim, prog)
	r.StandbySeconds = round3(time.Since(waited).Seconds())
	// The term may have ended on its own while the standbys prepared.
	if victim, err = leading(ctx, c, r, prog); err != nil {
		return nil, err
	}
	r.Killed = victim.name
	// With --profile, the surviving engines and the agents' processes are
	// profiled from the kill until the cluster is whole again (files
	// <registry>-failover-...).
	var survivors []*process
	for _, e := range c.engines {
		if e != victim && !e.killed {
			survivors = append(survivors, e)
		}
	}
	survivors = append(survivors, c.agents...)
	c.profileStartOf(survivors)
	prog.phase("killing the leader, %s (SIGKILL)", victim.name)
	t0 := time.Now()
	victim.kill()
	since := func() *float64 { s := round3(time.Since(t0).Seconds()); return &s }

	hc := c.tls.httpClient(30 * time.Second)
	countURL := func() string {
		pattern := benchTemplate + "@*"
		if c.cfg.DistinctFiles {
			pattern = unitPrefix + "*"
		}
		return c.tls.scheme() + "://" + c.leaderAPI + "/v1/state?" + url.Values{"unit": {pattern}, "state": {"active"}, "limit": {"1"}}.Encode()
	}
	deadline := t0.Add(c.cfg.Timeout)
	for !r.Completed {
		if err := c.failed(); err != nil {
			return nil, err
		}
		if time.Now().After(deadline) {
			r.Error = fmt.Sprintf("gave up after %v", c.cfg.Timeout)
			prog.phase("failover: %s", r.Error)
			for _, p := range c.engines {
				if !p.killed {
					prog.phase("the end of %s's log (warnings and errors):\n%s", p.name, p.tail(60))
				}
			}
			break
		}
		polled := time.Now()
		switch {
		case r.LeaderSeconds == nil:
			if api, err := c.findLeader(ctx); err == nil && api != victimAPI(c, victim) {
				c.leaderAPI = api
				r.LeaderSeconds = since()
				prog.phase("a new leader serves after %.3f s", *r.LeaderSeconds)
			}
		case r.AgentsSeconds == nil:
			api, err := c.client(c.leaderAPI, client.WithTimeout(10*time.Second))
			if err != nil {
				return nil, err
			}
			if ms, err := api.Machines(ctx); err == nil {
				prog.status("agents reconnected: %s/%s", thousands(int64(len(ms.Machines))), thousands(int64(c.cfg.Agents)))
				if len(ms.Machines) >= c.cfg.Agents {
					r.AgentsSeenSeconds = since()
					r.Agents, r.AgentsSeconds = agentsBack(ms.Machines, t0, *r.LeaderSeconds, *r.AgentsSeenSeconds)
					prog.phase("every agent reconnected after %.3f s (half of them after %.3f s, 90%% after %.3f s; seen after %.3f s)", *r.AgentsSeconds, r.Agents.P50, r.Agents.P90, *r.AgentsSeenSeconds)
				}
			}
		default:
			if n, err := countActive(ctx, hc, countURL()); err == nil {
				prog.status("%s/%s units active in the new leader's state", thousands(int64(n)), thousands(int64(c.cfg.Units)))
				if n >= c.cfg.Units {
					r.ActiveSeconds = since()
					r.Completed = true
					prog.phase("every unit active in the new leader's state after %.3f s", *r.ActiveSeconds)
				}
			}
		}
		if !r.Completed {
			// The polls are the new leader's work too (a count of a
			// million units, ten thousand machines listed): back to back
			// every 100 ms they took a fifth of its CPU while it took the
			// agents back. Paced as waitActive's, at most a second apart.
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(min(max(8*time.Since(polled), 100*time.Millisecond), time.Second)):
			}
		}
	}
	// A unit restarted by the new leader would be started within moments
	// of its full set reaching the agent; the counts are a second behind.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(time.Second):
	}
	after, err := c.started()
	if err != nil {
		return nil, err
	}
	r.Restarted = after - before
	if r.FullSets, err = scrapeCounter(ctx, hc, c.tls.scheme()+"://"+c.leaderAPI, "flotilla_agent_full_sets_total", "sent"); err != nil {
		prog.phase("the new leader's count of full sets: %v", err)
	}
	if err := c.profileStopOf(ctx, survivors, "failover"); err != nil {
		return nil, err
	}
	return r, nil
}

// agentsBack returns when the agents opened their streams to the new
// leader, in seconds from t0 (the kill), by the times the leader lists, and
// the last of them. A machine the leader lists without a time (a leader
// older than connectedAt) counts as back when the poll saw it, seen; none
// counts as back before leader, when the bench found the new leader
// serving (a poll's time too: an agent may reach the leader first, and the
// etcd registry's leader takes its machines in from etcd as it loads).
func agentsBack(ms []api.Machine, t0 time.Time, leader, seen float64) (*Percentiles, *float64) {
	back := make([]float64, 0, len(ms))
	for _, m := range ms {
		s := seen
		if !m.ConnectedAt.IsZero() {
			s = round3(max(m.ConnectedAt.Sub(t0).Seconds(), leader))
		}
		back = append(back, s)
	}
	sort.Float64s(back)
	p := summarize(back)
	return &p, &p.Max
}

func victimAPI(c *cluster, p *process) string {
	for i, e := range c.engines {
		if e == p {
			return c.engineAPI[i]
		}
	}
	return ""
}

// standbyTimeout bounds how long the bench waits for the standbys to
// prepare before it kills the leader.
const standbyTimeout = 2 * time.Minute

// waitStandbys waits until every engine but the leader, victim, says it
// holds ready the state it would lead with, and reports whether they all
// did within standbyTimeout.
func waitStandbys(ctx context.Context, c *cluster, victim *process, prog *progress) bool {
	deadline := time.Now().Add(standbyTimeout)
	for {
		waiting := 0
		for i, a := range c.engineAPI {
			if p := c.engines[i]; p == victim || p.killed {
				continue
			}
			cl, err := c.client(a, client.WithTimeout(5*time.Second))
			if err != nil {
				return false
			}
			// An engine of the etcd registry prepares nothing (it
			// follows no record), and says nothing of it.
			if st, err := cl.Status(ctx); err != nil || (st.Standby != nil && !st.Standby.Prepared) {
				waiting++
			}
		}
		if waiting == 0 {
			return true
		}
		if time.Now().After(deadline) {
			prog.phase("failover: %d standing-by engines had not prepared after %v; killing the leader anyway", waiting, standbyTimeout)
			return false
		}
		prog.status("waiting for %d standing-by engines to prepare", waiting)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
}
