// Package metrics defines Flotilla's Prometheus metrics (docs/metrics.md).
// Each daemon has its own Set on its own registry, served at /metrics.
package metrics

import (
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/flotilla/flotilla/internal/version"
)

// Set is one daemon's metrics.
type Set struct {
	reg *prometheus.Registry

	// Units counts units by desired state, current active state and health
	// ("" when no machine reports it), as of the leader's last snapshot.
	Units *prometheus.GaugeVec
	// Unplaced counts wanted units that no machine can take.
	Unplaced prometheus.Gauge
	// MachinesUp counts machines whose agents the leader hears from.
	MachinesUp prometheus.Gauge
	// AgentStreams counts open agent gRPC streams on this engine.
	AgentStreams prometheus.Gauge
	// FullSets counts the full desired sets the leader gave agents as
	// their streams opened: sent whole (sent=whole), or, to an agent that
	// holds the set already, said to be unchanged (sent=unchanged).
	FullSets *prometheus.CounterVec
	// SchedulingLatency observes, per phase, a unit's time from the request
	// that made it wanted to its placement ("placed"), and from placement to
	// its machine reporting it active ("active").
	SchedulingLatency *prometheus.HistogramVec
	// ReconcileDuration observes the engine's reconcile passes.
	ReconcileDuration prometheus.Histogram
	// EtcdRequestDuration observes the engine's etcd requests by kind.
	EtcdRequestDuration *prometheus.HistogramVec
	// LeaderChanges counts changes of the engine leader this daemon saw.
	LeaderChanges prometheus.Counter
	// IsLeader is 1 while this daemon's engine leads (a degraded term too).
	IsLeader prometheus.Gauge
	// EtcdUnreachableSince is the Unix time at which the leader found etcd
	// unreachable and degraded its term (reads from memory, writes refused);
	// 0 while etcd answers or this daemon does not lead.
	EtcdUnreachableSince prometheus.Gauge
	// DoubtUntil is the Unix time until which the leader doubts that the
	// machines it cannot hear are gone, holding their units where they are
	// (many fell silent at once: engine/doubt.go); 0 while it does not.
	DoubtUntil prometheus.Gauge
	// CertExpiry is the Unix time at which a certificate of the daemon
	// stops being valid, by cert: "machine" (its --tls-cert, as last
	// loaded: SIGHUP reloads it) and "ca" (the first of its --tls-ca to
	// expire). No series without TLS.
	CertExpiry *prometheus.GaugeVec
	// StateRequestDuration and StateResponseBytes observe GET /v1/state.
	StateRequestDuration prometheus.Histogram
	StateResponseBytes   prometheus.Histogram
	// EtcdRequests counts the daemon's etcd client calls by gRPC method and
	// status code; see EtcdDialOptions.
	EtcdRequests *prometheus.CounterVec
	// DeploymentSteps counts what the leader's deployments did, by action:
	// replace (an instance given its new file), canary (made), destroy (a
	// canary), and by outcome (succeeded, failed, aborted) as they end.
	DeploymentSteps *prometheus.CounterVec
	// BuildInfo is always 1; its labels say which build runs (version,
	// revision, build_date, goversion), as prometheus_build_info does.
	BuildInfo prometheus.Gauge

	// touch creates one series in each vector, for Families.
	touch []func()
}

// New returns a Set registered on a new registry, with Go runtime and
// process metrics.
func New() *Set {
	reg := prometheus.NewRegistry()
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	s := &Set{reg: reg}
	s.Units = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "flotilla_units", Help: "Units by desired state, current active state and health (healthy, unhealthy, unknown; \"\" while not active), as of the leader's last published state."}, []string{"desired", "active", "health"})
	s.Unplaced = prometheus.NewGauge(prometheus.GaugeOpts{Name: "flotilla_units_unplaced", Help: "Wanted units no machine can take (each has a reason in /v1/state)."})
	s.MachinesUp = prometheus.NewGauge(prometheus.GaugeOpts{Name: "flotilla_machines_up", Help: "Machines whose agents the leader hears from."})
	s.AgentStreams = prometheus.NewGauge(prometheus.GaugeOpts{Name: "flotilla_agent_streams", Help: "Open agent gRPC streams on this engine."})
	s.FullSets = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flotilla_agent_full_sets_total",
		Help: "Full desired sets the leader gave agents as their streams opened: sent whole (sent=whole), or said to be the set the agent holds (sent=unchanged)."}, []string{"sent"})
	s.SchedulingLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "flotilla_scheduling_latency_seconds",
		Help:    "Time from the request that made a unit wanted to its placement (phase=placed), and from placement to active (phase=active).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14)}, []string{"phase"})
	s.ReconcileDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flotilla_reconcile_duration_seconds",
		Help: "Duration of the engine's reconcile passes.", Buckets: prometheus.ExponentialBuckets(0.0001, 3, 12)})
	s.EtcdRequestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "flotilla_etcd_request_duration_seconds",
		Help: "Duration of the engine's etcd requests, by kind.", Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12)}, []string{"kind"})
	s.LeaderChanges = prometheus.NewCounter(prometheus.CounterOpts{Name: "flotilla_leader_changes_total", Help: "Changes of the engine leader this daemon saw."})
	s.IsLeader = prometheus.NewGauge(prometheus.GaugeOpts{Name: "flotilla_is_leader", Help: "1 while this daemon's engine leads."})
	s.EtcdUnreachableSince = prometheus.NewGauge(prometheus.GaugeOpts{Name: "flotilla_etcd_unreachable_since_seconds",
		Help: "Unix time since which the leader has found etcd unreachable (it answers reads from memory and refuses writes); 0 while etcd answers."})
	s.DoubtUntil = prometheus.NewGauge(prometheus.GaugeOpts{Name: "flotilla_doubt_until_seconds",
		Help: "Unix time until which the leader doubts that the machines it cannot hear are gone (many fell silent at once) and places none of their units elsewhere; 0 while it does not."})
	s.StateRequestDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flotilla_state_request_duration_seconds",
		Help: "Time to answer GET /v1/state.", Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12)})
	s.StateResponseBytes = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flotilla_state_response_bytes",
		Help: "Size of GET /v1/state answers.", Buckets: prometheus.ExponentialBuckets(1024, 4, 10)})
	s.CertExpiry = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "flotilla_cert_expiry_seconds",
		Help: "Unix time at which the daemon's certificate (cert=machine, as last loaded) or its cluster CA (cert=ca) expires."}, []string{"cert"})
	s.EtcdRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flotilla_etcd_requests_total",
		Help: "The daemon's etcd client calls, by gRPC method and status code (OK, Unavailable, DeadlineExceeded, ...)."}, []string{"method", "code"})
	s.DeploymentSteps = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flotilla_deployment_steps_total",
		Help: "What the leader's deployments did: instances replaced (action=replace), canaries made (canary) and destroyed (destroy), and deployments ended (succeeded, failed, aborted)."}, []string{"action"})
	s.touch = []func(){
		func() { s.DeploymentSteps.WithLabelValues("") },
		func() { s.FullSets.WithLabelValues("") },
		func() { s.Units.WithLabelValues("", "", "") },
		func() { s.SchedulingLatency.WithLabelValues("") },
		func() { s.EtcdRequestDuration.WithLabelValues("") },
		func() { s.EtcdRequests.WithLabelValues("", "") },
		func() { s.CertExpiry.WithLabelValues("") },
	}
	bi := version.Get()
	s.BuildInfo = prometheus.NewGauge(prometheus.GaugeOpts{Name: "flotilla_build_info",
		Help:        "Always 1; the labels say which build of Flotilla this daemon runs.",
		ConstLabels: prometheus.Labels{"version": bi.Version, "revision": bi.Commit, "build_date": bi.BuildDate, "goversion": bi.GoVersion}})
	s.BuildInfo.Set(1)
	for _, c := range []prometheus.Collector{s.BuildInfo, s.Units, s.Unplaced, s.MachinesUp, s.AgentStreams, s.FullSets, s.SchedulingLatency, s.ReconcileDuration,
		s.EtcdRequestDuration, s.LeaderChanges, s.IsLeader, s.EtcdUnreachableSince, s.DoubtUntil, s.StateRequestDuration, s.StateResponseBytes, s.EtcdRequests, s.CertExpiry, s.DeploymentSteps,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		f(c)
	}
	return s
}

// Families returns the name and type (counter, gauge, histogram, summary,
// untyped) of every metric family a daemon serves at /metrics, including
// the vectors that have no series until something happens. Dashboards and
// alert rules may use only these (and Prometheus' own, such as up).
func Families() (map[string]string, error) {
	s := New()
	for _, f := range s.touch {
		f()
	}
	mfs, err := s.reg.Gather()
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = strings.ToLower(mf.GetType().String())
	}
	return out, nil
}

// Handler serves the metrics in Prometheus' text format.
func (s *Set) Handler() http.Handler {
	return promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{})
}

// ObserveEtcd records one etcd request of a kind (txn, range, ...).
func (s *Set) ObserveEtcd(kind string, d time.Duration) {
	s.EtcdRequestDuration.WithLabelValues(kind).Observe(d.Seconds())
}
