package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// EtcdRequests counts etcd requests by kind, from etcd's own metrics: the
// messages its gRPC server received per method
// (grpc_server_msg_received_total). A unary call is one message; on the
// Watch and LeaseKeepAlive streams each watch creation or cancellation and
// each keep-alive is one.
type EtcdRequests struct {
	Range  int64 `json:"range"`  // Range (and RangeStream)
	Put    int64 `json:"put"`    // Put
	Txn    int64 `json:"txn"`    // Txn
	Delete int64 `json:"delete"` // DeleteRange
	Lease  int64 `json:"lease"`  // LeaseGrant, LeaseKeepAlive, LeaseRevoke, ...
	Watch  int64 `json:"watch"`  // Watch stream requests
	Other  int64 `json:"other"`  // everything else (Status, MemberList, Compact, ...)
}

// Total is the sum of every kind.
func (e EtcdRequests) Total() int64 {
	return e.Range + e.Put + e.Txn + e.Delete + e.Lease + e.Watch + e.Other
}

// Sub returns the requests counted in e and not in before.
func (e EtcdRequests) Sub(before EtcdRequests) EtcdRequests {
	return EtcdRequests{
		Range: e.Range - before.Range, Put: e.Put - before.Put, Txn: e.Txn - before.Txn,
		Delete: e.Delete - before.Delete, Lease: e.Lease - before.Lease, Watch: e.Watch - before.Watch,
		Other: e.Other - before.Other,
	}
}

// add counts n requests of gRPC method method.
func (e *EtcdRequests) add(method string, n int64) {
	switch {
	case method == "Range" || method == "RangeStream":
		e.Range += n
	case method == "Put":
		e.Put += n
	case method == "Txn":
		e.Txn += n
	case method == "DeleteRange":
		e.Delete += n
	case strings.HasPrefix(method, "Lease"):
		e.Lease += n
	case method == "Watch":
		e.Watch += n
	default:
		e.Other += n
	}
}

// requestsMetric is the counter etcd's gRPC server keeps per method.
const requestsMetric = "grpc_server_msg_received_total"

// ParseEtcdRequests reads etcd's /metrics (Prometheus text format) and
// counts the requests of etcd's own services (etcdserverpb.*, the election
// and lock services), leaving out gRPC health checks.
func ParseEtcdRequests(r io.Reader) (EtcdRequests, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return EtcdRequests{}, fmt.Errorf("parse etcd metrics: %w", err)
	}
	fam, ok := fams[requestsMetric]
	if !ok {
		return EtcdRequests{}, fmt.Errorf("etcd metrics have no %s: is this etcd's /metrics?", requestsMetric)
	}
	var e EtcdRequests
	for _, m := range fam.GetMetric() {
		var service, method string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "grpc_service":
				service = l.GetValue()
			case "grpc_method":
				method = l.GetValue()
			}
		}
		if strings.HasPrefix(service, "grpc.") { // grpc.health.v1.Health
			continue
		}
		e.add(method, int64(m.GetCounter().GetValue()))
	}
	return e, nil
}

// scrapeEtcd reads the request counts of the etcd serving clients at url
// (scheme://host:port).
func scrapeEtcd(ctx context.Context, hc *http.Client, url string) (EtcdRequests, error) {
	resp, err := getMetrics(ctx, hc, url)
	if err != nil {
		return EtcdRequests{}, fmt.Errorf("etcd %w", err)
	}
	defer resp.Body.Close()
	return ParseEtcdRequests(resp.Body)
}

// getMetrics GETs the /metrics of the server at url (scheme://host:port);
// the caller closes the answer's body.
func getMetrics(ctx context.Context, hc *http.Client, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("metrics: GET %s: %s", req.URL, resp.Status)
	}
	return resp, nil
}

// scrapeCounter reads the counter metric of the daemon whose API is at url
// (scheme://host:port), by the value of its label; with no label, the
// counter's sum is under "".
func scrapeCounter(ctx context.Context, hc *http.Client, url, metric, label string) (map[string]int64, error) {
	fams, err := scrapeFamilies(ctx, hc, url)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, m := range fams[metric].GetMetric() {
		if label == "" {
			out[""] += int64(m.GetCounter().GetValue())
		}
		for _, l := range m.GetLabel() {
			if label != "" && l.GetName() == label && l.GetValue() != "" {
				out[l.GetValue()] += int64(m.GetCounter().GetValue())
			}
		}
	}
	return out, nil
}

// scrapeFamilies reads the metric families the daemon whose API is at url
// (scheme://host:port) serves.
func scrapeFamilies(ctx context.Context, hc *http.Client, url string) (map[string]*dto.MetricFamily, error) {
	resp, err := getMetrics(ctx, hc, url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse %s's metrics: %w", url, err)
	}
	return fams, nil
}

// leaderChangesMetric counts the terms a daemon saw begin.
const leaderChangesMetric = "flotilla_leader_changes_total"

// activatedMetric is the histogram a leader observes a unit into when it
// first sees it active on the machine it placed it on (phase="active"):
// its count is how many of the units it placed became active, kept as
// they do, where a count of the active units in its state
// (/v1/state?state=active) needs the state built again.
const activatedMetric = "flotilla_scheduling_latency_seconds"

// scrapeActivated returns the count of activatedMetric{phase="active"} of
// the daemon whose API is at url (scheme://host:port).
func scrapeActivated(ctx context.Context, hc *http.Client, url string) (int64, error) {
	fams, err := scrapeFamilies(ctx, hc, url)
	if err != nil {
		return 0, err
	}
	for _, m := range fams[activatedMetric].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "phase" && l.GetValue() == "active" {
				return int64(m.GetHistogram().GetSampleCount()), nil
			}
		}
	}
	return 0, fmt.Errorf("%s's metrics have no %s{phase=\"active\"}", url, activatedMetric)
}
