package bench

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/flotilla/flotilla/api"
)

func TestPercentile(t *testing.T) {
	ten := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	tests := []struct {
		sorted []float64
		p      float64
		want   float64
	}{
		{nil, 50, 0},
		{[]float64{7}, 50, 7},
		{[]float64{7}, 99, 7},
		{ten, 50, 5},
		{ten, 90, 9},
		{ten, 99, 10},
		{ten, 100, 10},
		{ten, 10, 1},
		{ten, 0.1, 1},
		{[]float64{1, 2}, 50, 1},
		{[]float64{1, 2}, 51, 2},
	}
	for _, tt := range tests {
		if got := percentile(tt.sorted, tt.p); got != tt.want {
			t.Errorf("percentile(%v, %v) = %v, want %v", tt.sorted, tt.p, got, tt.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	var v []float64
	for i := 1; i <= 1000; i++ {
		v = append(v, float64(i))
	}
	got := summarize(v)
	want := Percentiles{P50: 500, P90: 900, P99: 990, Max: 1000}
	if got != want {
		t.Errorf("summarize(1..1000) = %+v, want %+v", got, want)
	}
	if got := summarize(nil); got != (Percentiles{}) {
		t.Errorf("summarize(nil) = %+v, want zero", got)
	}
}

func TestHistogram(t *testing.T) {
	tests := []struct {
		name   string
		sorted []float64
		n      int
		want   []Bucket
	}{
		{"none", nil, 10, nil},
		{"all equal", []float64{2, 2, 2}, 10, []Bucket{{From: 2, To: 2, Count: 3}}},
		{"spread", []float64{0, 1, 1.5, 2, 3.9, 4}, 4, []Bucket{
			{From: 0, To: 1, Count: 1},
			{From: 1, To: 2, Count: 2},
			{From: 2, To: 3, Count: 1},
			{From: 3, To: 4, Count: 2}, // the maximum falls in the last bucket
		}},
		{"skewed", []float64{1, 1, 1, 1, 1, 1, 1, 1, 1, 11}, 2, []Bucket{
			{From: 1, To: 6, Count: 9},
			{From: 6, To: 11, Count: 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := histogram(tt.sorted, tt.n)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("histogram(%v, %d) = %+v, want %+v", tt.sorted, tt.n, got, tt.want)
			}
		})
	}
}

func TestHistogramCountsEveryValue(t *testing.T) {
	var v []float64
	for i := range 3001 {
		v = append(v, 1.004+float64(i*i)/1e5)
	}
	bs := histogram(v, histogramBuckets)
	if len(bs) != histogramBuckets {
		t.Fatalf("got %d buckets, want %d", len(bs), histogramBuckets)
	}
	total := 0
	for i, b := range bs {
		total += b.Count
		if i > 0 && b.From != bs[i-1].To {
			t.Errorf("bucket %d starts at %v, the previous ends at %v", i, b.From, bs[i-1].To)
		}
	}
	if total != len(v) {
		t.Errorf("buckets hold %d values, want %d", total, len(v))
	}
	if bs[0].From != v[0] || bs[len(bs)-1].To != v[len(v)-1] {
		t.Errorf("buckets span %v-%v, want %v-%v", bs[0].From, bs[len(bs)-1].To, v[0], v[len(v)-1])
	}
}

func TestBar(t *testing.T) {
	tests := []struct {
		count, largest int
		want           string
	}{
		{0, 100, ""},
		{100, 100, strings.Repeat("█", 21)},
		{1, 100000, "▏"}, // never invisible
		{50, 100, "██████████▌"},
		{1, 21, "█"},
		{1, 168, "▏"},
		{3, 168, "▍"},
	}
	for _, tt := range tests {
		if got := bar(tt.count, tt.largest); got != tt.want {
			t.Errorf("bar(%d, %d) = %q, want %q", tt.count, tt.largest, got, tt.want)
		}
	}
}

// The seed's fleet-grpc histogram, rendered from its counts (its bounds
// differ in the last digit: the seed's minimum and maximum are not known
// exactly).
func TestWriteHistogramSeed(t *testing.T) {
	counts := []int{2522, 407, 1, 2, 9, 12, 13, 9, 10, 15}
	var bs []Bucket
	for i, c := range counts {
		bs = append(bs, Bucket{From: 1.004 + float64(i)*8.9026, To: 1.004 + float64(i+1)*8.9026, Count: c})
	}
	var b bytes.Buffer
	writeHistogram(&b, bs)
	want := `1.004-9.907  84.1%    █████████████████████  2522
9.907-18.81  13.6%    ███▍                   407
18.81-27.71  0.0333%  ▏                      1
27.71-36.61  0.0667%  ▏                      2
36.61-45.52  0.3%     ▏                      9
45.52-54.42  0.4%     ▏                      12
54.42-63.32  0.433%   ▏                      13
63.32-72.22  0.3%     ▏                      9
72.22-81.13  0.333%   ▏                      10
81.13-90.03  0.5%     ▏                      15
`
	if got := b.String(); got != want {
		t.Errorf("writeHistogram:\n%s\nwant:\n%s", got, want)
	}
}

func TestSetLatencies(t *testing.T) {
	r := &Report{Units: 4}
	r.setLatencies([]time.Duration{2 * time.Second, time.Second, 3 * time.Second, -time.Millisecond}, 5*time.Second)
	if !r.AllActive || r.Active != 4 {
		t.Errorf("AllActive, Active = %v, %d; want true, 4", r.AllActive, r.Active)
	}
	if r.SecondsToAllActive == nil || *r.SecondsToAllActive != 3 {
		t.Errorf("SecondsToAllActive = %v, want 3", r.SecondsToAllActive)
	}
	if r.UnitsPerSecond != 1.333 {
		t.Errorf("UnitsPerSecond = %v, want 1.333", r.UnitsPerSecond)
	}
	if want := (Percentiles{P50: 1, P90: 3, P99: 3, Max: 3}); r.StartLatency != want {
		t.Errorf("StartLatency = %+v, want %+v (a negative latency counts as 0)", r.StartLatency, want)
	}

	r = &Report{Units: 10}
	r.setLatencies([]time.Duration{time.Second, time.Second}, 4*time.Second)
	if r.AllActive || r.Active != 2 || r.SecondsToAllActive != nil || r.UnitsPerSecond != 0.5 {
		t.Errorf("2 of 10 active: AllActive %v, Active %d, SecondsToAllActive %v, UnitsPerSecond %v; want false, 2, nil, 0.5",
			r.AllActive, r.Active, r.SecondsToAllActive, r.UnitsPerSecond)
	}

	r = &Report{Units: 10}
	r.setLatencies(nil, 4*time.Second)
	if r.Histogram == nil || len(r.Histogram) != 0 {
		t.Errorf("no unit active: Histogram = %#v, want empty, not null", r.Histogram)
	}
}

func sampleReport() *Report {
	secs := 1.5
	return &Report{
		Registry: "grpc", Engines: 1, Agents: 100, AgentProcesses: 1, Units: 3000, LatencyMS: 25,
		AgentsPerProcess: 100, AgentGOMAXPROCS: 1, ShapeChosen: []string{"agents_per_process"},
		AllActive: true, Active: 3000, SecondsToAllActive: &secs, UnitsPerSecond: 2000, SubmitSeconds: 0.4,
		StartLatency:     Percentiles{P50: 1, P90: 1.2, P99: 1.4, Max: 1.5},
		Histogram:        []Bucket{{From: 0.5, To: 1, Count: 1000}, {From: 1, To: 1.5, Count: 2000}},
		EtcdRequests:     EtcdRequests{Range: 1, Put: 2, Txn: 48, Delete: 3, Lease: 4, Watch: 5, Other: 6},
		EngineCPUSeconds: 0.5, AgentCPUSeconds: 0.25, EtcdCPUSeconds: 0.125, BenchCPUSeconds: 0.1, OtherCPUSeconds: 0.3, HostCPUs: 2,
		EnginePeakRSSBytes: 60 << 20, AgentPeakRSSBytes: 50 << 20, EtcdPeakRSSBytes: 40 << 20,
		State: &StateReport{Pollers: 2, Requests: 10, Errors: 1, P50MS: 1.5, P99MS: 3, MaxMS: 4, Bytes: 2048, Error: "GET x: 503",
			During: &StateLatency{Requests: 6, P50MS: 1, P99MS: 3, MaxMS: 4},
			After:  &StateLatency{Requests: 4, P50MS: 2, P99MS: 2.5, MaxMS: 2.5}},
	}
}

func TestReportJSONKeys(t *testing.T) {
	b, err := json.Marshal(sampleReport())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"registry", "agents", "units", "all_active", "seconds_to_all_active",
		"start_latency_seconds", "histogram", "etcd_requests", "engine_cpu_seconds", "agent_cpu_seconds",
		"engine_peak_rss_bytes", "state", "agent_processes", "agents_per_process", "agent_gomaxprocs", "shape_chosen"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON report has no %q: %s", k, b)
		}
	}
	for obj, keys := range map[string][]string{
		"start_latency_seconds": {"p50", "p90", "p99", "max"},
		"etcd_requests":         {"range", "put", "txn", "delete", "lease", "watch"},
		"state":                 {"pollers", "p50_ms", "p99_ms", "bytes"},
	} {
		o, _ := m[obj].(map[string]any)
		for _, k := range keys {
			if _, ok := o[k]; !ok {
				t.Errorf("JSON report's %s has no %q: %s", obj, k, b)
			}
		}
	}
	h, _ := m["histogram"].([]any)
	if len(h) != 2 {
		t.Fatalf("histogram = %v, want 2 buckets", m["histogram"])
	}
	for _, k := range []string{"from", "to", "count"} {
		if _, ok := h[0].(map[string]any)[k]; !ok {
			t.Errorf("histogram bucket has no %q: %v", k, h[0])
		}
	}

	r := sampleReport()
	r.AllActive, r.SecondsToAllActive, r.State = false, nil, nil
	b, _ = json.Marshal(r)
	if !bytes.Contains(b, []byte(`"seconds_to_all_active":null`)) || bytes.Contains(b, []byte(`"state"`)) {
		t.Errorf("report of a run that timed out, without pollers: %s; want seconds_to_all_active null and no state", b)
	}
}

func TestWriteText(t *testing.T) {
	var b bytes.Buffer
	sampleReport().WriteText(&b)
	got := b.String()
	for _, want := range []string{
		"grpc registry: 3,000 units on 100 agents (1 process), 1 engine, 25 ms one-way latency added (round trip 50 ms)",
		"agents' shape: 1 process of up to 100 agents, GOMAXPROCS 1 each (chosen for 2 CPUs: --agents-per-process)",
		"all 3,000 units active 1.500 s after the start request: 2,000 units/s",
		"0.5-1  33.3%",
		"1-1.5  66.7%  █████████████████████  2000",
		"p50 1.000 s   p90 1.200 s   p99 1.400 s   max 1.500 s",
		"etcd requests  range 1  put 2  txn 48  delete 3  lease 4  watch 5  other 6  (0.02 per unit)",
		"CPU seconds    engine 0.50  agents 0.25  etcd 0.12  bench 0.10  (other processes 0.30, of 2 CPUs)",
		"peak memory    engine 60.0 MiB  agents 50.0 MiB  etcd 40.0 MiB",
		"/v1/state      2 pollers: 10 answers, p50 1.5 ms  p99 3.0 ms  max 4.0 ms, 2.0 KiB each; 1 errors, the first: GET x: 503",
		"               during the run:  6 answers, p50 1.0 ms  p99 3.0 ms  max 4.0 ms",
		"               once all active: 4 answers, p50 2.0 ms  p99 2.5 ms  max 2.5 ms",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("text report lacks %q:\n%s", want, got)
		}
	}

	r := sampleReport()
	r.AllActive, r.Active, r.SecondsToAllActive, r.UnitsPerSecond = false, 1234, nil, 100
	b.Reset()
	r.WriteText(&b)
	if want := "NOT ALL ACTIVE: 1,234 of 3,000 units active when the run gave up (100 units/s)"; !strings.Contains(b.String(), want) {
		t.Errorf("text report of a run that timed out lacks %q:\n%s", want, b.String())
	}

	r.Error, r.SubmitSeconds = "start request: etcd unavailable", 15
	b.Reset()
	r.WriteText(&b)
	if want := "the run ended early, after 15.000 s: start request: etcd unavailable"; !strings.Contains(b.String(), want) {
		t.Errorf("text report of a failed start request lacks %q:\n%s", want, b.String())
	}
}

func TestCompare(t *testing.T) {
	base := sampleReport()
	r := sampleReport()
	secs := 6.0
	r.SecondsToAllActive = &secs
	r.StartLatency.P50 = 4
	r.EngineCPUSeconds = 0
	got := compare(r, base)
	want := &Ratios{SecondsToAllActive: 4, P50: 4, P99: 1, EtcdRequests: 1, EngineCPUSeconds: 0, AgentCPUSeconds: 1}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("compare = %+v, want %+v", got, want)
	}
	base.AgentCPUSeconds = 0
	if got := compare(r, base); got.AgentCPUSeconds != 0 {
		t.Errorf("compare with a zero base = %v, want 0", got.AgentCPUSeconds)
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 20000: "20,000", 1234567: "1,234,567", -1000: "-1,000"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestFmtBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 60 << 20: "60.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := fmtBytes(n); got != want {
			t.Errorf("fmtBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestAgentsBack: the agents' times back are the leader's connectedAt
// from the kill, none before the new leader was found serving, and the
// poll's time for a machine listed without one.
func TestAgentsBack(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := []api.Machine{
		{ID: "a", ConnectedAt: t0.Add(6 * time.Second)},
		{ID: "b", ConnectedAt: t0.Add(3 * time.Second)}, // before the bench saw the leader
		{ID: "c"}, // an older leader's listing
		{ID: "d", ConnectedAt: t0.Add(8500 * time.Millisecond)},
	}
	p, last := agentsBack(ms, t0, 5, 9.25)
	if want := (Percentiles{P50: 6, P90: 9.25, P99: 9.25, Max: 9.25}); *p != want || *last != 9.25 {
		t.Errorf("agentsBack = %+v, last %v; want %+v, last 9.25", *p, *last, want)
	}
	ms[2].ConnectedAt = t0.Add(7 * time.Second)
	if p, last = agentsBack(ms, t0, 5, 9.25); p.P50 != 6 || *last != 8.5 {
		t.Errorf("agentsBack = %+v, last %v; want p50 6, last 8.5", *p, *last)
	}
}
