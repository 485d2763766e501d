package monotime

import (
	"testing"
	"time"
)

func TestNowAdvances(t *testing.T) {
	a := Now()
	if a == 0 {
		t.Fatal("Now() = 0, want a reading of CLOCK_MONOTONIC")
	}
	time.Sleep(10 * time.Millisecond)
	b := Now()
	if d := b.Sub(a); d < 10*time.Millisecond || d > 5*time.Second {
		t.Errorf("Now() advanced %v over a 10ms sleep", d)
	}
	if !a.Before(b) || Since(a) < 10*time.Millisecond || Until(a) > 0 {
		t.Errorf("Before/Since/Until disagree: a=%d b=%d", a, b)
	}
	if got := a.Add(time.Second).Sub(a); got != time.Second {
		t.Errorf("Add(1s).Sub = %v, want 1s", got)
	}
}
