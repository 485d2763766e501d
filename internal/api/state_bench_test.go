package api

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/state"
)

// discardWriter is a ResponseWriter that keeps headers and drops the body.
type discardWriter struct {
	h    http.Header
	code int
	n    int
}

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) WriteHeader(code int)        { d.code = code }
func (d *discardWriter) Write(p []byte) (int, error) { d.n += len(p); return len(p), nil }

// BenchmarkStateAnswer is what the leader spends on one GET /v1/state of
// 20,000 units on 100 machines (3.5 MB) before the copy to the client:
// encoded for the answer (a new snapshot each time, as the first answer of
// a generation) against the bytes encoded once a snapshot (every later
// answer of the generation), plain and gzipped.
func BenchmarkStateAnswer(b *testing.B) {
	var machines []apiv1.Machine
	for i := range 100 {
		machines = append(machines, apiv1.Machine{ID: fmt.Sprintf("m%d", i), IP: "10.0.0.1", Metadata: map[string]string{"role": "web"},
			Units: 200, Capacity: apiv1.Resources{CPUPercent: 400, MemoryBytes: 8 << 30}})
	}
	var units []state.Unit
	for i := range 20_000 {
		units = append(units, state.NewUnit(apiv1.StateUnit{Name: fmt.Sprintf("bench@%05d.service", i), Hash: "0123456789abcdef0123456789abcdef01234567",
			DesiredState: "launched", Machine: fmt.Sprintf("m%d", i%100), Load: "loaded", Active: "active", Sub: "running"}))
	}
	gen := uint64(0)
	snapshot := func() *state.Snapshot {
		gen++
		return &state.Snapshot{Term: 1, Generation: gen, Revision: 99, Leader: "m0", Machines: machines, Units: units}
	}
	for _, gz := range []bool{false, true} {
		r := httptest.NewRequest("GET", "/v1/state", nil)
		if gz {
			r.Header.Set("Accept-Encoding", "gzip")
		}
		for _, cached := range []bool{false, true} {
			b.Run(fmt.Sprintf("gzip=%v/cached=%v", gz, cached), func(b *testing.B) {
				snap := snapshot()
				w := &discardWriter{h: http.Header{}}
				for b.Loop() {
					if !cached {
						snap = snapshot()
					}
					w.n = 0
					serveSnapshot(w, r, snap, state.Filter{})
				}
				b.SetBytes(int64(w.n))
			})
		}
	}
}
