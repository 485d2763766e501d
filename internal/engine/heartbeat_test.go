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
