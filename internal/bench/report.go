package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the outcome of one run. Its JSON form is the contract of
// `flotilla bench --json`: one object per run, on its own line. Durations
// are seconds unless the key says otherwise.
type Report struct {
	Registry       string `json:"registry"`
	Engines        int    `json:"engines"`
	Agents         int    `json:"agents"`
	AgentProcesses int    `json:"agent_processes"`
	// AgentsPerProcess is the most agents in one helper process, and
	// AgentGOMAXPROCS each helper's GOMAXPROCS: the agents' shape.
	// ShapeChosen names those the bench chose for the host
	// ("agents_per_process", "agent_gomaxprocs") rather than took from
	// their flags.
	AgentsPerProcess int      `json:"agents_per_process"`
	AgentGOMAXPROCS  int      `json:"agent_gomaxprocs"`
	ShapeChosen      []string `json:"shape_chosen"`
	Units            int      `json:"units"`
	LatencyMS        float64  `json:"latency_ms"` // one-way delay added by the proxies
	TLS              bool     `json:"tls"`        // mutual TLS on every connection (--tls)
	ACL              bool     `json:"acl"`        // engines with --acl, the bench using a token (with --tls)
	// EngineEnv are the engines' own environment variables (--engine-env).
	EngineEnv []string `json:"engine_env,omitempty"`

	AllActive bool `json:"all_active"`
	// Active is how many units the leader saw active by the end of the run.
	Active int `json:"active"`
	// SecondsToAllActive is from the start request until the leader saw the
	// last unit active; null when not every unit got there.
	SecondsToAllActive *float64 `json:"seconds_to_all_active"`
	// UnitsPerSecond is Active divided by SecondsToAllActive (or by the
	// time the run waited, when not every unit got there).
	UnitsPerSecond float64 `json:"units_per_second"`
	// SubmitSeconds is how long the API took to answer the start request
	// (every unit written to etcd).
	SubmitSeconds float64 `json:"submit_seconds"`
	// StartLatency summarizes, over the units that became active, the time
	// from the start request until the leader saw each active.
	StartLatency Percentiles `json:"start_latency_seconds"`
	Histogram    []Bucket    `json:"histogram"`

	// EtcdRequests counts the requests etcd served from the start request
	// until every unit was active (or the run gave up).
	EtcdRequests EtcdRequests `json:"etcd_requests"`
	// CPU seconds (user+system) spent over the same window, per role:
	// the engine daemons together, the agent processes together, the etcd
	// process, and this process (the latency proxies and the polling).
	EngineCPUSeconds float64 `json:"engine_cpu_seconds"`
	AgentCPUSeconds  float64 `json:"agent_cpu_seconds"`
	EtcdCPUSeconds   float64 `json:"etcd_cpu_seconds"`
	BenchCPUSeconds  float64 `json:"bench_cpu_seconds"`
	// OtherCPUSeconds is what the rest of the host used over the window:
	// a busy host makes the figures slower than they would be.
	OtherCPUSeconds float64 `json:"other_cpu_seconds"`
	// HostCPUs is the number of CPUs of the host.
	HostCPUs int `json:"host_cpus"`
	// LeaderChanges counts the new terms the leader's daemon saw from the
	// start request until every unit was active (or the run gave up): 0
	// unless the leader lost its term mid-run, and then the figures
	// include a new term's load (the engines' logs are printed).
	LeaderChanges int64 `json:"leader_changes"`
	// Peak resident memory over each process's life (VmHWM): the largest
	// engine, the agent processes summed, the etcd process.
	EnginePeakRSSBytes int64 `json:"engine_peak_rss_bytes"`
	AgentPeakRSSBytes  int64 `json:"agent_peak_rss_bytes"`
	EtcdPeakRSSBytes   int64 `json:"etcd_peak_rss_bytes"`
	// EtcdDBBytes is the size of etcd's database at the end of a run in
	// which every unit became active (after --failover and --stop, which
	// write the same keys), after compacting to the current revision and
	// defragmenting: what the cluster costs in etcd to keep (0 when the
	// run failed).
	EtcdDBBytes int64 `json:"etcd_db_bytes,omitempty"`

	// State is the /v1/state pollers' report, when --state-pollers > 0.
	State *StateReport `json:"state,omitempty"`
	// Error says why the run ended early: the start request failed.
	Error string `json:"error,omitempty"`
	// Stop is what --stop measured (stopping every unit once active).
	Stop *StopReport `json:"stop,omitempty"`
	// Failover is what --failover measured (the leader killed once every
	// unit was active).
	Failover *FailoverReport `json:"failover,omitempty"`
	// VsGRPC compares this run with the grpc run of the same invocation
	// (--registry both): each figure is this run's divided by grpc's.
	VsGRPC *Ratios `json:"vs_grpc,omitempty"`
}

// Percentiles of start latency, in seconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// Bucket is one bar of the histogram: Count values in [From, To) (the last
// bucket includes To).
type Bucket struct {
	From  float64 `json:"from"`
	To    float64 `json:"to"`
	Count int     `json:"count"`
}

// StateReport is what the /v1/state pollers measured: each poller fetches
// the whole state again as soon as it has read the previous answer, from
// the start request until StateAfter after every unit was active.
type StateReport struct {
	Pollers  int `json:"pollers"`
	Requests int `json:"requests"` // answered (200, or 304 when conditional)
	// Conditional pollers send If-None-Match with the ETag they last got;
	// NotModified counts the 304 answers (no body) among Requests.
	Conditional bool    `json:"conditional,omitempty"`
	NotModified int     `json:"not_modified,omitempty"`
	Errors      int     `json:"errors"`
	P50MS       float64 `json:"p50_ms"`
	P99MS       float64 `json:"p99_ms"`
	MaxMS       float64 `json:"max_ms"`
	Bytes       int64   `json:"bytes"` // size of the last answer
	// During is the latency of the fetches begun before every unit was
	// active: the state while the leader schedules and starts the units.
	// Absent when no fetch began before.
	During *StateLatency `json:"during,omitempty"`
	// After is the latency of the fetches begun once every unit was
	// active: the whole cluster's state, at rest. Absent when the run
	// did not get there.
	After *StateLatency `json:"after,omitempty"`
	// Error is the first error met, if any (a 404 means the engine does
	// not serve the endpoint).
	Error string `json:"error,omitempty"`
}

// StateLatency is the latency of some state fetches, in milliseconds.
type StateLatency struct {
	Requests int     `json:"requests"`
	P50MS    float64 `json:"p50_ms"`
	P99MS    float64 `json:"p99_ms"`
	MaxMS    float64 `json:"max_ms"`
}

// Ratios compare a run with the grpc run: this run's figure divided by grpc's.
type Ratios struct {
	SecondsToAllActive float64 `json:"seconds_to_all_active"`
	P50                float64 `json:"p50"`
	P99                float64 `json:"p99"`
	EtcdRequests       float64 `json:"etcd_requests"`
	EngineCPUSeconds   float64 `json:"engine_cpu_seconds"`
	AgentCPUSeconds    float64 `json:"agent_cpu_seconds"`
}

// histogramBuckets is the number of buckets, as in the seed's histograms.
const histogramBuckets = 10

// percentile returns the p-th percentile (0 < p ≤ 100) of sorted values by
// the nearest-rank method: the smallest value with at least p% of the
// values at or below it. It returns 0 for no values.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// summarize returns the percentiles of sorted values.
func summarize(sorted []float64) Percentiles {
	if len(sorted) == 0 {
		return Percentiles{}
	}
	return Percentiles{
		P50: percentile(sorted, 50),
		P90: percentile(sorted, 90),
		P99: percentile(sorted, 99),
		Max: sorted[len(sorted)-1],
	}
}

// histogram spreads sorted values over n buckets of equal width from the
// smallest value to the largest, as the seed's histograms do. When all
// values are equal there is one bucket. It returns nil for no values.
func histogram(sorted []float64, n int) []Bucket {
	if len(sorted) == 0 || n < 1 {
		return nil
	}
	lo, hi := sorted[0], sorted[len(sorted)-1]
	if hi == lo {
		return []Bucket{{From: lo, To: hi, Count: len(sorted)}}
	}
	width := (hi - lo) / float64(n)
	bs := make([]Bucket, n)
	for i := range bs {
		bs[i].From = lo + float64(i)*width
		bs[i].To = lo + float64(i+1)*width
	}
	bs[n-1].To = hi // no rounding drift on the last bound
	for _, v := range sorted {
		i := min(int((v-lo)/width), n-1)
		bs[i].Count++
	}
	return bs
}

// barWidth is the width, in cells, of the longest histogram bar (the seed's).
const barWidth = 21

// eighths are the partial block characters, by eighths of a cell.
var eighths = []string{"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"}

// bar draws count against the largest count in cells of eighths; a
// non-zero count gets at least an eighth.
func bar(count, largest int) string {
	if count <= 0 || largest <= 0 {
		return ""
	}
	e := int(math.Round(float64(count) / float64(largest) * barWidth * 8))
	e = max(e, 1)
	return strings.Repeat("█", e/8) + eighths[e%8]
}

// writeHistogram prints the buckets as the seed did: range, percent, bar, count.
func writeHistogram(w io.Writer, bs []Bucket) {
	total, largest := 0, 0
	for _, b := range bs {
		total += b.Count
		largest = max(largest, b.Count)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for _, b := range bs {
		pct := 0.0
		if total > 0 {
			pct = float64(b.Count) * 100 / float64(total)
		}
		fmt.Fprintf(tw, "%.4g-%.4g\t%.3g%%\t%s\t%d\n", b.From, b.To, pct, bar(b.Count, largest), b.Count)
	}
	tw.Flush()
}

// WriteText prints the report for a reader.
func (r *Report) WriteText(w io.Writer) {
	lat := "no added latency"
	if r.LatencyMS > 0 {
		lat = fmt.Sprintf("%s one-way latency added (round trip %s)", fmtMS(r.LatencyMS), fmtMS(2*r.LatencyMS))
	}
	fmt.Fprintf(w, "%s registry: %s units on %s agents (%d %s), %d %s, %s\n", r.Registry,
		thousands(int64(r.Units)), thousands(int64(r.Agents)), r.AgentProcesses, plural(r.AgentProcesses, "process", "processes"),
		r.Engines, plural(r.Engines, "engine", "engines"), lat+map[bool]string{true: ", mutual TLS and API tokens", false: ""}[r.TLS])
	if r.AgentsPerProcess > 0 {
		fmt.Fprintf(w, "agents' shape: %s\n", describeShape(r.AgentProcesses, r.AgentsPerProcess, r.AgentGOMAXPROCS, r.ShapeChosen, r.HostCPUs))
	}
	if r.AllActive {
		fmt.Fprintf(w, "all %s units active %.3f s after the start request: %s units/s (the start request took %.3f s)\n",
			thousands(int64(r.Units)), *r.SecondsToAllActive, thousands(int64(math.Round(r.UnitsPerSecond))), r.SubmitSeconds)
	} else {
		fmt.Fprintf(w, "NOT ALL ACTIVE: %s of %s units active when the run gave up (%s units/s)\n",
			thousands(int64(r.Active)), thousands(int64(r.Units)), thousands(int64(math.Round(r.UnitsPerSecond))))
	}
	if r.Error != "" {
		fmt.Fprintf(w, "the run ended early, after %.3f s: %s\n", r.SubmitSeconds, r.Error)
	}
	if len(r.Histogram) > 0 {
		fmt.Fprintf(w, "\nstart latency (s), from the start request until the leader saw the unit active:\n")
		writeHistogram(w, r.Histogram)
		p := r.StartLatency
		fmt.Fprintf(w, "p50 %.3f s   p90 %.3f s   p99 %.3f s   max %.3f s\n", p.P50, p.P90, p.P99, p.Max)
	}
	e := r.EtcdRequests
	fmt.Fprintf(w, "\netcd requests  range %d  put %d  txn %d  delete %d  lease %d  watch %d  other %d  (%.2f per unit)\n",
		e.Range, e.Put, e.Txn, e.Delete, e.Lease, e.Watch, e.Other, float64(e.Total())/float64(max(r.Units, 1)))
	fmt.Fprintf(w, "CPU seconds    engine %.2f  agents %.2f  etcd %.2f  bench %.2f  (other processes %.2f, of %d CPUs)\n",
		r.EngineCPUSeconds, r.AgentCPUSeconds, r.EtcdCPUSeconds, r.BenchCPUSeconds, r.OtherCPUSeconds, r.HostCPUs)
	if r.LeaderChanges > 0 {
		fmt.Fprintf(w, "LEADER CHANGED %d %s during the run: the figures include a new term's load\n", r.LeaderChanges, plural(int(r.LeaderChanges), "time", "times"))
	}
	fmt.Fprintf(w, "peak memory    engine %s  agents %s  etcd %s\n",
		fmtBytes(r.EnginePeakRSSBytes), fmtBytes(r.AgentPeakRSSBytes), fmtBytes(r.EtcdPeakRSSBytes))
	if r.EtcdDBBytes > 0 {
		fmt.Fprintf(w, "etcd database  %s once compacted and defragmented (%.0f bytes a unit)\n",
			fmtBytes(r.EtcdDBBytes), float64(r.EtcdDBBytes)/float64(max(r.Units, 1)))
	}
	if s := r.State; s != nil {
		fmt.Fprintf(w, "/v1/state      %d %s: %d answers, p50 %.1f ms  p99 %.1f ms  max %.1f ms, %s each",
			s.Pollers, plural(s.Pollers, "poller", "pollers"), s.Requests, s.P50MS, s.P99MS, s.MaxMS, fmtBytes(s.Bytes))
		if s.Conditional {
			fmt.Fprintf(w, " (%d not modified)", s.NotModified)
		}
		if s.Errors > 0 {
			fmt.Fprintf(w, "; %d errors, the first: %s", s.Errors, s.Error)
		}
		fmt.Fprintln(w)
		if d := s.During; d != nil {
			fmt.Fprintf(w, "               during the run:  %d answers, p50 %.1f ms  p99 %.1f ms  max %.1f ms\n",
				d.Requests, d.P50MS, d.P99MS, d.MaxMS)
		}
		if a := s.After; a != nil {
			fmt.Fprintf(w, "               once all active: %d answers, p50 %.1f ms  p99 %.1f ms  max %.1f ms\n",
				a.Requests, a.P50MS, a.P99MS, a.MaxMS)
		}
	}
	if f := r.Failover; f != nil {
		secs := func(p *float64) string {
			if p == nil {
				return "not reached"
			}
			return fmt.Sprintf("%.3f s", *p)
		}
		ready := fmt.Sprintf("the standbys prepared after %.1f s", f.StandbySeconds)
		if !f.StandbyReady {
			ready = fmt.Sprintf("the standbys had not prepared after %.1f s", f.StandbySeconds)
		}
		if f.LeaderMovedBeforeKill {
			ready += "; THE LEADER HAD CHANGED BEFORE THE KILL: a term ended on its own"
		}
		fmt.Fprintf(w, "failover       %s killed (%s): a new leader serving after %s, every agent reconnected after %s, every unit active in its state after %s; %d units started meanwhile",
			f.Killed, ready, secs(f.LeaderSeconds), secs(f.AgentsSeconds), secs(f.ActiveSeconds), f.Restarted)
		if f.Error != "" {
			fmt.Fprintf(w, " (%s)", f.Error)
		}
		fmt.Fprintln(w)
	}
	if s := r.Stop; s != nil {
		switch {
		case s.Error != "":
			fmt.Fprintf(w, "stop           the stop request failed after %.3f s: %s\n", s.RequestSeconds, s.Error)
		case s.AllStopped:
			fmt.Fprintf(w, "stop           request answered in %.3f s; no unit active %.3f s after it (engine %.2f, agents %.2f CPU-s)\n",
				s.RequestSeconds, *s.SecondsToAllStopped, s.EngineCPUSeconds, s.AgentCPUSeconds)
		default:
			fmt.Fprintf(w, "stop           request answered in %.3f s; NOT ALL STOPPED: %s still active when the run gave up\n",
				s.RequestSeconds, thousands(int64(s.StillActive)))
		}
	}
	if v := r.VsGRPC; v != nil {
		fmt.Fprintf(w, "vs grpc        time to all active ×%.2f  p50 ×%.2f  p99 ×%.2f  etcd requests ×%.2f  engine CPU ×%.2f  agent CPU ×%.2f\n",
			v.SecondsToAllActive, v.P50, v.P99, v.EtcdRequests, v.EngineCPUSeconds, v.AgentCPUSeconds)
	}
}

// compare returns r's figures divided by base's (0 where base's is 0).
func compare(r, base *Report) *Ratios {
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return round3(a / b)
	}
	secs := func(x *Report) float64 {
		if x.SecondsToAllActive != nil {
			return *x.SecondsToAllActive
		}
		return 0
	}
	return &Ratios{
		SecondsToAllActive: div(secs(r), secs(base)),
		P50:                div(r.StartLatency.P50, base.StartLatency.P50),
		P99:                div(r.StartLatency.P99, base.StartLatency.P99),
		EtcdRequests:       div(float64(r.EtcdRequests.Total()), float64(base.EtcdRequests.Total())),
		EngineCPUSeconds:   div(r.EngineCPUSeconds, base.EngineCPUSeconds),
		AgentCPUSeconds:    div(r.AgentCPUSeconds, base.AgentCPUSeconds),
	}
}

// setLatencies fills the latency figures of r from the start latencies of
// the units that became active; waited is how long the run waited.
func (r *Report) setLatencies(lat []time.Duration, waited time.Duration) {
	secs := make([]float64, len(lat))
	for i, d := range lat {
		secs[i] = max(d.Seconds(), 0)
	}
	slices.Sort(secs)
	r.Active = len(secs)
	r.AllActive = r.Active == r.Units
	r.StartLatency = summarize(secs)
	r.StartLatency = Percentiles{P50: round6(r.StartLatency.P50), P90: round6(r.StartLatency.P90),
		P99: round6(r.StartLatency.P99), Max: round6(r.StartLatency.Max)}
	r.Histogram = histogram(secs, histogramBuckets)
	for i := range r.Histogram {
		r.Histogram[i].From, r.Histogram[i].To = round6(r.Histogram[i].From), round6(r.Histogram[i].To)
	}
	if r.Histogram == nil {
		r.Histogram = []Bucket{}
	}
	elapsed := waited.Seconds()
	if r.AllActive && len(secs) > 0 {
		last := round6(secs[len(secs)-1])
		r.SecondsToAllActive = &last
		elapsed = last
	}
	if elapsed > 0 {
		r.UnitsPerSecond = round3(float64(r.Active) / elapsed)
	}
}

func round3(x float64) float64 { return math.Round(x*1e3) / 1e3 }
func round6(x float64) float64 { return math.Round(x*1e6) / 1e6 }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// thousands formats n with thousands separators: 20000 → 20,000.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func fmtMS(ms float64) string {
	return fmt.Sprintf("%g ms", ms)
}

// fmtBytes formats a byte count in binary units: 1536 → 1.5 KiB.
func fmtBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), -1
	for f >= unit && i < 3 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMGT"[i])
}
