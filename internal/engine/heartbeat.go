package engine

import (
	"time"

	"github.com/flotilla/flotilla/internal/unit"
)

// heartbeatsPerSecond is how many heartbeats a second the leader aims to
// send (and receive) at most once it has many agents: each is a gRPC
// message and a write on both sides, and at 10,000 agents a heartbeat a
// second each way took more of a 2-CPU machine than placing units did.
// Nomad bounds its servers' heartbeats the same way (max_heartbeats_per_second,
// 50 there: its heartbeats are Raft-backed RPCs; ours are stream messages).
const heartbeatsPerSecond = 2000

// heartbeatInterval is how often an idle stream carries a heartbeat, each
// way, with agents connected: the configured interval while that keeps
// under heartbeatsPerSecond, longer as agents join, and never more than a
// quarter of the agent TTL (a machine is lost after its units' LostAfter=,
// the TTL by default) nor of the shortest LostAfter= of a singleton unit
// (its agent kills it once that long passes without word from the leader:
// word must come well within it). shortest is 0 when there is no such unit.
func heartbeatInterval(base, ttl, shortest time.Duration, agents int) time.Duration {
	h := time.Duration(agents) * time.Second / heartbeatsPerSecond
	h = max(h, base)
	if ceiling := ttl / 4; ceiling > 0 {
		h = min(h, max(ceiling, base))
	}
	if shortest > 0 {
		h = min(h, shortest/4)
	}
	return max(h, time.Millisecond)
}

// heartbeat is the term's current heartbeat interval (heartbeatInterval);
// safe from any goroutine.
func (t *term) heartbeat() time.Duration {
	return heartbeatInterval(t.e.cfg.HeartbeatInterval, t.e.cfg.AgentTTL,
		time.Duration(t.shortestLostAfter.Load()), int(t.streams.Load()))
}

// muteAfterFor is how long the agent on c may be silent before the leader
// stops sending it anything: two of the heartbeat intervals it was asked
// for (the current one, or a longer one it was told and may still keep)
// and a margin.
func (t *term) muteAfterFor(c *agentConn) time.Duration {
	h := t.heartbeat()
	if c != nil {
		h = max(h, time.Duration(c.toldHeartbeat.Load()))
	}
	return 2*h + 250*time.Millisecond
}

// durations holds a duration for some units and knows the shortest. The
// distinct durations are few (each a LostAfter= someone wrote), so they
// are counted: setting one is O(1) and the shortest O(distinct), however
// many units set one (a million units with LostAfter=5m, say).
type durations struct {
	byName map[string]time.Duration
	counts map[time.Duration]int
}

func newDurations() *durations {
	return &durations{byName: map[string]time.Duration{}, counts: map[time.Duration]int{}}
}

// set gives name duration d (0: none) and reports whether the set changed.
func (s *durations) set(name string, d time.Duration) bool {
	old, had := s.byName[name]
	if had && old == d {
		return false
	}
	if !had && d == 0 {
		return false
	}
	if had {
		if s.counts[old]--; s.counts[old] == 0 {
			delete(s.counts, old)
		}
		delete(s.byName, name)
	}
	if d != 0 {
		s.byName[name] = d
		s.counts[d]++
	}
	return true
}

// shortest is the shortest duration held (0: none).
func (s *durations) shortest() time.Duration {
	var m time.Duration
	for d := range s.counts {
		if m == 0 || d < m {
			m = d
		}
	}
	return m
}

// noteLostAfter keeps, as rec replaces the unit's old record (nil: none),
// the shortest LostAfter= of the singleton units (heartbeatInterval), and
// the shortest LostAfter= any unit sets: a pass need not look at the units
// of a machine silent for less than that (see planInput). It runs on the
// loop.
func (t *term) noteLostAfter(name string, rec *unitRec) {
	var single, any time.Duration
	if rec != nil {
		if la := rec.file.Fleet.LostAfter; la > 0 && la != unit.Infinity {
			any = la
			if rec.file.Fleet.Singleton {
				single = la
			}
		}
	}
	if t.singletons.set(name, single) {
		t.shortestLostAfter.Store(int64(t.singletons.shortest()))
	}
	if t.lostAfters.set(name, any) {
		t.shortestLost = t.lostAfters.shortest()
	}
}

// quietFor is how long a machine may be silent before any unit on it can
// be lost: the shortest LostAfter= of any unit, or the agent TTL.
func (t *term) quietFor() time.Duration {
	if t.shortestLost > 0 && t.shortestLost < t.e.cfg.AgentTTL {
		return t.shortestLost
	}
	return t.e.cfg.AgentTTL
}
