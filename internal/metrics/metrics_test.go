package metrics

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/flotilla/flotilla/internal/etcdtest"
	"github.com/flotilla/flotilla/internal/version"
)

func TestFamilies(t *testing.T) {
	fams, err := Families()
	if err != nil {
		t.Fatal(err)
	}
	for name, typ := range map[string]string{
		"flotilla_build_info":                    "gauge",
		"flotilla_units":                         "gauge",
		"flotilla_scheduling_latency_seconds":    "histogram",
		"flotilla_etcd_request_duration_seconds": "histogram",
		"flotilla_etcd_requests_total":           "counter",
		"flotilla_leader_changes_total":          "counter",
		"go_goroutines":                          "gauge",
	} {
		if fams[name] != typ {
			t.Errorf("Families()[%q] = %q, want %q", name, fams[name], typ)
		}
	}
}

func TestBuildInfo(t *testing.T) {
	s := New()
	bi := version.Get()
	want := `# HELP flotilla_build_info Always 1; the labels say which build of Flotilla this daemon runs.
# TYPE flotilla_build_info gauge
flotilla_build_info{build_date="` + bi.BuildDate + `",goversion="` + bi.GoVersion + `",revision="` + bi.Commit + `",version="` + bi.Version + `"} 1
`
	if err := testutil.GatherAndCompare(s.reg, strings.NewReader(want), "flotilla_build_info"); err != nil {
		t.Error(err)
	}
}

// TestEtcdRequests: calls through a real etcd client are counted by method
// and code, failures included.
func TestEtcdRequests(t *testing.T) {
	srv := etcdtest.Start(t)
	s := New()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, DialTimeout: 5 * time.Second,
		Logger: zap.NewNop(), DialOptions: s.EtcdDialOptions()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Get(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	// A lease that does not exist: etcd answers NotFound.
	if _, err := cli.Revoke(ctx, 12345); err == nil {
		t.Fatal("revoking a lease that does not exist succeeded")
	}
	for _, tc := range []struct {
		method, code string
	}{{"Put", "OK"}, {"Range", "OK"}, {"LeaseRevoke", "NotFound"}} {
		if got := testutil.ToFloat64(s.EtcdRequests.WithLabelValues(tc.method, tc.code)); got != 1 {
			t.Errorf("flotilla_etcd_requests_total{method=%q,code=%q} = %v, want 1", tc.method, tc.code, got)
		}
	}
}
