// Package profiling keeps CPU and heap profiles of a daemon over a window
// that another process (flotilla bench) chooses with signals:
//
//  1. SIGUSR1 starts a CPU profile into DIR/cpu.pprof;
//  2. SIGUSR2 stops it, writes the goroutines (DIR/goroutine.pprof: how
//     many, where; their stacks are memory the heap profile does not
//     show), the runtime's memory classes (DIR/memory.txt: heap, stacks,
//     the collector's headroom, what is returned to the OS; what the
//     process's RSS is made of; and, over the window, how long runnable
//     goroutines waited for a CPU and how long the collector stopped the
//     world, as quantiles), runs a garbage collection and writes the
//     heap profile (in use and allocated since the process started) into
//     DIR/heap.pprof, last.
//
// Each file is written under a temporary name and renamed once complete,
// so a file that exists is whole. Read them with `go tool pprof`.
package profiling

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"syscall"
)

// File names in the directory.
const (
	CPUFile       = "cpu.pprof"
	HeapFile      = "heap.pprof"
	GoroutineFile = "goroutine.pprof"
	MemoryFile    = "memory.txt"
)

// OnSignals makes the process keep profiles in dir (created if missing) on
// SIGUSR1 and SIGUSR2, until ctx is done. Without it those signals end the
// process, so a caller signals only a process started with profiling.
func OnSignals(ctx context.Context, dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("profile directory: %w", err)
	}
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		defer signal.Stop(sig)
		var (
			cpu   *os.File
			waits = newWindowed(schedLatencies, gcPauses)
		)
		for {
			select {
			case <-ctx.Done():
				if cpu != nil {
					pprof.StopCPUProfile()
					finish(cpu, filepath.Join(dir, CPUFile), log)
				}
				return
			case s := <-sig:
				switch {
				case s == syscall.SIGUSR1 && cpu == nil:
					f, err := os.CreateTemp(dir, CPUFile+".*")
					if err == nil {
						if err = pprof.StartCPUProfile(f); err != nil {
							f.Close()
							os.Remove(f.Name())
						}
					}
					if err != nil {
						log.Error("could not start the CPU profile", "err", err)
						continue
					}
					cpu = f
					waits.start()
					log.Info("CPU profile started", "dir", dir)
				case s == syscall.SIGUSR2:
					if cpu != nil {
						pprof.StopCPUProfile()
						finish(cpu, filepath.Join(dir, CPUFile), log)
						cpu = nil
					}
					if err := writeProfile(filepath.Join(dir, GoroutineFile), "goroutine"); err != nil {
						log.Error("could not write the goroutine profile", "err", err)
					}
					if err := writeMemory(filepath.Join(dir, MemoryFile), waits); err != nil {
						log.Error("could not write the memory classes", "err", err)
					}
					runtime.GC() // the in-use figures are as of the last collection
					if err := writeProfile(filepath.Join(dir, HeapFile), "heap"); err != nil {
						log.Error("could not write the heap profile", "err", err)
					}
				}
			}
		}
	}()
	return nil
}

// finish closes a profile's temporary file and renames it to path.
func finish(f *os.File, path string, log *slog.Logger) {
	err := f.Close()
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		log.Error("could not write the CPU profile", "err", err)
		os.Remove(f.Name())
	}
}

// writeProfile writes the named runtime profile to path, whole or not at all.
func writeProfile(path, name string) error {
	return writeWhole(path, func(w io.Writer) error { return pprof.Lookup(name).WriteTo(w, 0) })
}

// writeMemory writes the runtime's memory classes and collector settings
// to path, one "name value" a line (bytes, or a count), then the quantiles
// of waits' histograms over the window ("name p99 seconds"), whole or not
// at all.
func writeMemory(path string, waits *windowed) error {
	var samples []metrics.Sample
	for _, d := range metrics.All() {
		if d.Kind == metrics.KindUint64 && !d.Cumulative &&
			(strings.HasPrefix(d.Name, "/memory/classes/") || strings.HasPrefix(d.Name, "/gc/") || d.Name == "/sched/goroutines:goroutines") {
			samples = append(samples, metrics.Sample{Name: d.Name})
		}
	}
	metrics.Read(samples)
	return writeWhole(path, func(w io.Writer) error {
		for _, s := range samples {
			if _, err := fmt.Fprintf(w, "%s %d\n", s.Name, s.Value.Uint64()); err != nil {
				return err
			}
		}
		return waits.write(w)
	})
}

// The runtime's histograms of waits (runtime/metrics): how long goroutines
// waited runnable before they ran, and how long the collector stopped
// the world. A goroutine's wait is what a leader's lease renewal, or an
// answer to an agent, took on top of its work: on a host whose CPUs are
// busy, seconds.
const (
	schedLatencies = "/sched/latencies:seconds"
	gcPauses       = "/sched/pauses/total/gc:seconds"
)

// windowed reads histograms of the runtime's at a window's start, and
// their quantiles over the window (counts since the start) at its end.
type windowed struct {
	samples []metrics.Sample
	from    [][]uint64 // counts at the start
}

func newWindowed(names ...string) *windowed {
	w := &windowed{}
	for _, n := range names {
		w.samples = append(w.samples, metrics.Sample{Name: n})
	}
	return w
}

// start begins a window.
func (w *windowed) start() {
	metrics.Read(w.samples)
	w.from = make([][]uint64, len(w.samples))
	for i, s := range w.samples {
		if s.Value.Kind() == metrics.KindFloat64Histogram {
			w.from[i] = append([]uint64(nil), s.Value.Float64Histogram().Counts...)
		}
	}
}

// write writes each histogram's p50, p90, p99, p99.9 and largest over the
// window (since the process started, when no window was begun), a line
// each: "name p99 seconds" (a bucket's upper bound).
func (w *windowed) write(out io.Writer) error {
	metrics.Read(w.samples)
	for i, s := range w.samples {
		if s.Value.Kind() != metrics.KindFloat64Histogram {
			continue
		}
		h := s.Value.Float64Histogram()
		var from []uint64
		if i < len(w.from) {
			from = w.from[i]
		}
		counts := windowCounts(h.Counts, from)
		for _, q := range []struct {
			name string
			q    float64
		}{{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}, {"p99.9", 0.999}, {"max", 1}} {
			if _, err := fmt.Fprintf(out, "%s %s %g\n", s.Name, q.name, quantile(h.Buckets, counts, q.q)); err != nil {
				return err
			}
		}
	}
	return nil
}

// windowCounts is a histogram's counts now less those at its window's
// start (from; none: since the process began).
func windowCounts(now, from []uint64) []uint64 {
	counts := append([]uint64(nil), now...)
	if len(from) == len(counts) {
		for j := range counts {
			counts[j] -= from[j]
		}
	}
	return counts
}

// quantile is the upper bound of the bucket holding the q quantile of
// counts (buckets[i], buckets[i+1] bound counts[i]; an infinite bound is
// given as the finite one beside it); 0 when counts are all 0.
func quantile(buckets []float64, counts []uint64, q float64) float64 {
	var total uint64
	for _, c := range counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i, c := range counts {
		seen += c
		if c > 0 && seen >= want {
			if hi := buckets[i+1]; !math.IsInf(hi, 1) {
				return hi
			}
			return buckets[i]
		}
	}
	return buckets[len(buckets)-1]
}

// writeWhole writes path with write, whole or not at all: under a
// temporary name, renamed once complete.
func writeWhole(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	err = write(f)
	err = errors.Join(err, f.Close())
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
