package bench

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/flotilla/flotilla/internal/metrics"
)

// An excerpt of an embedded etcd's /metrics.
const etcdMetrics = `# HELP etcd_server_has_leader Whether or not a leader exists. 1 is existence, 0 is not.
# TYPE etcd_server_has_leader gauge
etcd_server_has_leader 1
# HELP grpc_server_msg_received_total Total number of RPC stream messages received on the server.
# TYPE grpc_server_msg_received_total counter
grpc_server_msg_received_total{grpc_method="Check",grpc_service="grpc.health.v1.Health",grpc_type="unary"} 1000
grpc_server_msg_received_total{grpc_method="Compact",grpc_service="etcdserverpb.KV",grpc_type="unary"} 2
grpc_server_msg_received_total{grpc_method="DeleteRange",grpc_service="etcdserverpb.KV",grpc_type="unary"} 3
grpc_server_msg_received_total{grpc_method="LeaseGrant",grpc_service="etcdserverpb.Lease",grpc_type="unary"} 4
grpc_server_msg_received_total{grpc_method="LeaseKeepAlive",grpc_service="etcdserverpb.Lease",grpc_type="bidi_stream"} 50
grpc_server_msg_received_total{grpc_method="LeaseRevoke",grpc_service="etcdserverpb.Lease",grpc_type="unary"} 1
grpc_server_msg_received_total{grpc_method="MemberList",grpc_service="etcdserverpb.Cluster",grpc_type="unary"} 7
grpc_server_msg_received_total{grpc_method="Put",grpc_service="etcdserverpb.KV",grpc_type="unary"} 8
grpc_server_msg_received_total{grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"} 9
grpc_server_msg_received_total{grpc_method="RangeStream",grpc_service="etcdserverpb.KV",grpc_type="server_stream"} 1
grpc_server_msg_received_total{grpc_method="Status",grpc_service="etcdserverpb.Maintenance",grpc_type="unary"} 1
grpc_server_msg_received_total{grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary"} 1.2e+06
grpc_server_msg_received_total{grpc_method="Watch",grpc_service="etcdserverpb.Watch",grpc_type="bidi_stream"} 11
# HELP grpc_server_started_total Total number of RPCs started on the server.
# TYPE grpc_server_started_total counter
grpc_server_started_total{grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary"} 999
`

func TestParseEtcdRequests(t *testing.T) {
	got, err := ParseEtcdRequests(strings.NewReader(etcdMetrics))
	if err != nil {
		t.Fatal(err)
	}
	want := EtcdRequests{Range: 10, Put: 8, Txn: 1_200_000, Delete: 3, Lease: 55, Watch: 11, Other: 10}
	if got != want {
		t.Errorf("ParseEtcdRequests = %+v, want %+v", got, want)
	}
	if got.Total() != 1_200_097 {
		t.Errorf("Total() = %d, want 1200097", got.Total())
	}
}

func TestParseEtcdRequestsErrors(t *testing.T) {
	for name, in := range map[string]string{
		"not etcd":  "# TYPE go_goroutines gauge\ngo_goroutines 12\n",
		"malformed": "grpc_server_msg_received_total{grpc_method=\"Put\" 1\n",
	} {
		if _, err := ParseEtcdRequests(strings.NewReader(in)); err == nil {
			t.Errorf("%s: ParseEtcdRequests succeeded, want an error", name)
		}
	}
}

func TestEtcdRequestsSub(t *testing.T) {
	a := EtcdRequests{Range: 10, Put: 9, Txn: 8, Delete: 7, Lease: 6, Watch: 5, Other: 4}
	b := EtcdRequests{Range: 1, Put: 2, Txn: 3, Delete: 4, Lease: 5, Watch: 5, Other: 0}
	want := EtcdRequests{Range: 9, Put: 7, Txn: 5, Delete: 3, Lease: 1, Watch: 0, Other: 4}
	if got := a.Sub(b); got != want {
		t.Errorf("Sub = %+v, want %+v", got, want)
	}
}

// TestScrapeCounter: a counter is read by its label's values; a series
// without the label is left out, and a server that does not answer 200 is
// an error naming it.
func TestScrapeCounter(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, "# TYPE flotilla_agent_full_sets_total counter\n"+
			"flotilla_agent_full_sets_total{sent=\"unchanged\"} 9998\n"+
			"flotilla_agent_full_sets_total{sent=\"whole\"} 2\n"+
			"flotilla_agent_full_sets_total{sent=\"\"} 0\n"+
			"# TYPE flotilla_leader_changes_total counter\n"+
			"flotilla_leader_changes_total 3\n")
	}))
	defer srv.Close()
	got, err := scrapeCounter(t.Context(), srv.Client(), srv.URL, "flotilla_agent_full_sets_total", "sent")
	if err != nil || len(got) != 2 || got["unchanged"] != 9998 || got["whole"] != 2 {
		t.Fatalf("scrapeCounter = %v, %v; want unchanged 9998, whole 2", got, err)
	}
	if got, err := scrapeCounter(t.Context(), srv.Client(), srv.URL, leaderChangesMetric, ""); err != nil || len(got) != 1 || got[""] != 3 {
		t.Errorf("scrapeCounter of a counter without labels = %v, %v; want 3 under \"\"", got, err)
	}
	if got, err := scrapeCounter(t.Context(), srv.Client(), srv.URL, "flotilla_agent_full_sets_total", ""); err != nil || got[""] != 10000 {
		t.Errorf("scrapeCounter with no label = %v, %v; want the sum, 10000", got, err)
	}
	if _, err := scrapeCounter(t.Context(), srv.Client(), srv.URL+"/nothing", "x", "y"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a 404: err %v, want one naming it", err)
	}
}

// TestScrapeActivated reads the leader's own metrics, as a daemon serves
// them: the count of units it saw become active where it placed them, not
// those it placed; metrics without the histogram are an error.
func TestScrapeActivated(t *testing.T) {
	set := metrics.New()
	for range 3 {
		set.SchedulingLatency.WithLabelValues("active").Observe(0.5)
	}
	for range 5 {
		set.SchedulingLatency.WithLabelValues("placed").Observe(0.1)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", set.Handler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	if got, err := scrapeActivated(t.Context(), srv.Client(), srv.URL); err != nil || got != 3 {
		t.Errorf("scrapeActivated = %d, %v; want 3", got, err)
	}

	bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "# TYPE flotilla_leader_changes_total counter\nflotilla_leader_changes_total 3\n")
	}))
	defer bare.Close()
	if _, err := scrapeActivated(t.Context(), bare.Client(), bare.URL); err == nil || !strings.Contains(err.Error(), activatedMetric) {
		t.Errorf("metrics without the histogram: err %v, want one naming it", err)
	}
}
