package engine

import (
	"testing"
	"time"
)

// TestPassPacing: a pass an input asks for waits twice the last pass's
// cost from its end, at most maxPassGap; none for cheap passes or one
// asked for at once.
func TestPassPacing(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var p passPacing
	if d := p.wait(t0); d != 0 {
		t.Errorf("before any pass: wait %v", d)
	}
	p.passed(t0, t0.Add(time.Millisecond)) // cheap: not paced
	if d := p.wait(t0.Add(time.Millisecond)); d != 0 {
		t.Errorf("after a 1 ms pass: wait %v", d)
	}
	p.passed(t0, t0.Add(30*time.Millisecond))
	for _, c := range []struct {
		at   time.Duration // from t0
		want time.Duration
	}{
		{30 * time.Millisecond, 60 * time.Millisecond},
		{50 * time.Millisecond, 40 * time.Millisecond},
		{90 * time.Millisecond, 0},
		{200 * time.Millisecond, -110 * time.Millisecond}, // long past: the loop passes at once
	} {
		if d := p.wait(t0.Add(c.at)); d != c.want {
			t.Errorf("%v after a 30 ms pass began: wait %v, want %v", c.at, d, c.want)
		}
	}
	p.passed(t0, t0.Add(5*time.Second)) // a long pass: the wait is bounded
	if d := p.wait(t0.Add(5 * time.Second)); d != maxPassGap {
		t.Errorf("after a 5 s pass: wait %v, want %v", d, maxPassGap)
	}
	p.now = true
	if d := p.wait(t0.Add(5 * time.Second)); d != 0 {
		t.Errorf("asked for at once: wait %v", d)
	}
}
