package engine

import (
	"io"
	"log/slog"
	"testing"
	"time"
)

// TestStandbySpare: a standby prepares a record of 10,000 units or more
// only if the host had half a CPU idle while the record stayed the same;
// a smaller record, or one where the host cannot be read, at once.
func TestStandbySpare(t *testing.T) {
	s := &standby{e: &Engine{log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	reading := func(idle float64, at float64) hostIdle {
		return hostIdle{idle: time.Duration(idle * float64(time.Second)), at: t0.Add(time.Duration(at * float64(time.Second))), ok: true}
	}
	tests := []struct {
		name     string
		units    int
		from, to hostIdle
		want     bool
	}{
		{"small, busy host", 9999, reading(100, 0), reading(100, 2), true},
		{"large, busy host (a tenth of a CPU idle)", 10000, reading(100, 0), reading(100.2, 2), false},
		{"large, half a CPU idle", 10000, reading(100, 0), reading(101, 2), true},
		{"large, two CPUs idle", 10000, reading(100, 0), reading(104, 2), true},
		{"large, host unreadable", 10000, hostIdle{}, hostIdle{}, true},
		{"large, no time between readings", 10000, reading(100, 2), reading(100, 2), true},
	}
	for _, tt := range tests {
		if got := s.spare(tt.units, tt.from, tt.to); got != tt.want {
			t.Errorf("%s: spare = %v, want %v", tt.name, got, tt.want)
		}
	}
	if r := readHostIdle(); !r.ok || r.idle <= 0 {
		t.Errorf("readHostIdle() = %+v, want the host's idle time", r)
	}
}
