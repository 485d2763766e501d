package gctune

import (
	"context"
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	for _, tt := range []struct {
		scanned uint64
		want    int
	}{
		{0, 100},
		{40 << 20, 100},  // a small cluster's daemon: Go's default
		{256 << 20, 100}, // headroom 256 MiB either way
		{320 << 20, 80},  // 256 MiB of 320
		{400 << 20, 64},
		{512 << 20, 50},
		{780 << 20, 50}, // a leader of a million units: half, not 33%
		{4 << 30, 50},
	} {
		if got := Percent(tt.scanned); got != tt.want {
			t.Errorf("Percent(%d MiB) = %d, want %d", tt.scanned>>20, got, tt.want)
		}
	}
}

func TestNext(t *testing.T) {
	for _, tt := range []struct{ cur, want, got int }{
		{100, 100, 100},
		{100, 97, 100}, // a small change waits
		{100, 95, 95},
		{64, 60, 64},
		{64, 59, 59},
		{52, 50, 50}, // a bound is reached at once
		{96, 100, 100},
		{50, 53, 50},
	} {
		if got := next(tt.cur, tt.want); got != tt.got {
			t.Errorf("next(%d, %d) = %d, want %d", tt.cur, tt.want, got, tt.got)
		}
	}
}

// TestTune: the percent follows what is scanned, set only when it changes.
func TestTune(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	heap := []uint64{40 << 20, 40 << 20, 400 << 20, 410 << 20, 800 << 20, 800 << 20, 100 << 20}
	var sets []int
	done := make(chan struct{})
	go func() {
		defer close(done)
		tune(ctx, time.Millisecond, func() uint64 {
			mu.Lock()
			defer mu.Unlock()
			if len(heap) == 1 {
				cancel()
				return heap[0]
			}
			h := heap[0]
			heap = heap[1:]
			return h
		}, func(p int) {
			mu.Lock()
			sets = append(sets, p)
			mu.Unlock()
		})
	}()
	<-done
	want := []int{64, 50, 100}
	if len(sets) != len(want) || sets[0] != want[0] || sets[1] != want[1] || sets[2] != want[2] {
		t.Errorf("percents set %v, want %v", sets, want)
	}
}

// TestRunFixed: a fixed percent is set at once; GOGC in the environment wins
// over it.
func TestRunFixed(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	gogc := func() uint64 {
		s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	Run(context.Background(), 70, slog.New(slog.DiscardHandler))
	if got := gogc(); got != 70 {
		t.Errorf("GOGC after Run(70) = %d, want 70", got)
	}
	debug.SetGCPercent(100)
	t.Setenv("GOGC", "100")
	Run(context.Background(), 70, slog.New(slog.DiscardHandler))
	if got := gogc(); got != 100 {
		t.Errorf("GOGC after Run(70) with GOGC set = %d, want 100 (the environment's)", got)
	}
}
