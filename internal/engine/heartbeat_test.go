package engine

import (
	"testing"
	"time"
)

func TestHeartbeatInterval(t *testing.T) {
	const s = time.Second
	for _, c := range []struct {
		name                string
		base, ttl, shortest time.Duration
		agents              int
		want                time.Duration
	}{
		{"few agents: the configured interval", s, 20 * s, 0, 100, s},
		{"no agents", s, 20 * s, 0, 0, s},
		{"2,000 agents: still one a second", s, 20 * s, 0, 2000, s},
		{"4,000 agents: every 2 s", s, 20 * s, 0, 4000, 2 * s},
		{"10,000 agents: a quarter of the TTL", s, 20 * s, 0, 10000, 5 * s},
		{"100,000 agents: still a quarter of the TTL", s, 20 * s, 0, 100000, 5 * s},
		{"a singleton's LostAfter=8s bounds it", s, 20 * s, 8 * s, 10000, 2 * s},
		{"a LostAfter= shorter than the base wins over it", s, 20 * s, 2 * s, 100, 500 * time.Millisecond},
		{"a TTL shorter than four intervals keeps the base", s, 2 * s, 0, 10000, s},
		{"a tiny test interval", 10 * time.Millisecond, 200 * time.Millisecond, 0, 3, 10 * time.Millisecond},
	} {
		if got := heartbeatInterval(c.base, c.ttl, c.shortest, c.agents); got != c.want {
			t.Errorf("%s: heartbeatInterval(%v, %v, %v, %d) = %v, want %v", c.name, c.base, c.ttl, c.shortest, c.agents, got, c.want)
		}
	}
}

func TestDurations(t *testing.T) {
	s := newDurations()
	check := func(want time.Duration) {
		t.Helper()
		if got := s.shortest(); got != want {
			t.Errorf("shortest = %v, want %v", got, want)
		}
	}
	check(0)
	if s.set("a", 0) {
		t.Error("clearing a name never set changed the set")
	}
	s.set("a", 30*time.Second)
	s.set("b", 10*time.Second)
	s.set("c", 10*time.Second)
	check(10 * time.Second)
	s.set("b", 0)
	check(10 * time.Second) // c still has it
	if s.set("c", 10*time.Second) {
		t.Error("setting a name to its duration changed the set")
	}
	s.set("c", time.Minute)
	check(30 * time.Second)
	s.set("a", 0)
	s.set("c", 0)
	check(0)
	if len(s.byName) != 0 || len(s.counts) != 0 {
		t.Errorf("an emptied set holds %v, %v", s.byName, s.counts)
	}
}
