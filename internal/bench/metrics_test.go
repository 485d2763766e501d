package bench

import (
	"strings"
	"testing"
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
