// Package gctune bounds how far a daemon's heap grows past what is live
// before Go's collector runs.
//
// Go's collector lets the heap grow by GOGC percent (100 by default) of
// what it must scan, the live heap and the goroutines' stacks, before it
// collects: a process peaks at about twice that. A leader of a million
// units holds about 700 MB live and 280 MB of stacks (10,000 agent streams),
// so it peaked at 2.0–2.2 GiB, and the extra gigabyte was headroom for
// garbage, not state. A small cluster's daemon, whose heap is tens of
// megabytes, has no such problem, and there a lower GOGC only costs CPU: at
// GOGC=50 the engine starting 20,000 units used 20% more CPU (0.27–0.29
// against 0.23–0.24 CPU-s). At a million, the bound below took the peak
// from 1,863–2,269 MiB to 1,561–1,753 for 2–3 of the engine's 27 CPU-s
// (docs/benchmarks.md, session 9).
//
// So the headroom is bounded, not proportional: Go's default while the
// scanned heap is under Headroom, then the percent that keeps the headroom
// at Headroom, but never under MinPercent (below that, collections come so
// often that a large heap's marking dominates the CPU). GOGC in the
// environment is the operator's choice and is left alone; so is a fixed
// percent given to Run. (github.com/KimMachineGun/automemlimit and Go's
// GOMEMLIMIT bound the total instead, which needs the machine's memory
// known and, set below what is live, makes the collector run back to back;
// a bound on the headroom cannot.)
package gctune

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

const (
	// Headroom is the most the heap grows past what the collector scans
	// (while that is above MinPercent of it).
	Headroom = 256 << 20
	// MinPercent is the lowest percent the tuner sets.
	MinPercent = 50
	// DefaultPercent is Go's default GOGC.
	DefaultPercent = 100
	// step is the least change the tuner makes: the percent follows the
	// heap in steps, not at every sample.
	step = 5
)

// Percent returns the collector's percent for a heap whose collections
// scan scanned bytes (live heap, stacks and globals).
func Percent(scanned uint64) int {
	if scanned == 0 {
		return DefaultPercent
	}
	p := int(uint64(Headroom) * 100 / scanned)
	return min(max(p, MinPercent), DefaultPercent)
}

// Interval is how often Run samples the heap.
const Interval = time.Second

// Run keeps the collector's percent at Percent of what the last collection
// scanned until ctx is done, or at fixed if it is positive. With GOGC set in
// the environment it does nothing. It returns at once; the work is done in
// a goroutine.
func Run(ctx context.Context, fixed int, log *slog.Logger) {
	if _, set := os.LookupEnv("GOGC"); set {
		log.Info("the collector's percent is GOGC's", "GOGC", os.Getenv("GOGC"))
		return
	}
	if fixed > 0 {
		debug.SetGCPercent(fixed)
		return
	}
	go tune(ctx, Interval, scanned, func(p int) {
		debug.SetGCPercent(p)
		log.Debug("the collector's percent changed", "percent", p)
	})
}

// tune sets the percent for what read says the collector scans, every
// interval until ctx is done, from Go's default.
func tune(ctx context.Context, interval time.Duration, read func() uint64, set func(int)) {
	cur := DefaultPercent
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if p := next(cur, Percent(read())); p != cur {
			set(p)
			cur = p
		}
	}
}

// scanned returns what the last collection scanned: the live heap, the
// stacks and the globals (what GOGC is a percent of).
func scanned() uint64 {
	samples := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"}}
	metrics.Read(samples)
	var n uint64
	for _, s := range samples {
		if s.Value.Kind() == metrics.KindUint64 {
			n += s.Value.Uint64()
		}
	}
	return n
}

// next is the percent to set when cur is set and want is wanted: want once
// it is step away from cur, or at either bound.
func next(cur, want int) int {
	if want == cur {
		return cur
	}
	if d := want - cur; d >= step || d <= -step || want == MinPercent || want == DefaultPercent {
		return want
	}
	return cur
}
