package metrics

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// EtcdDialOptions count every call of an etcd client dialed with them in
// EtcdRequests (flotilla_etcd_requests_total), by method (Range, Txn,
// LeaseGrant, Watch, ...) and status code. Streams (Watch, LeaseKeepAlive)
// count once, when they open.
func (s *Set) EtcdDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			s.countEtcd(method, err)
			return err
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			s.countEtcd(method, err)
			return cs, err
		}),
	}
}

func (s *Set) countEtcd(method string, err error) {
	// "/etcdserverpb.KV/Range" -> "Range"
	if i := strings.LastIndexByte(method, '/'); i >= 0 {
		method = method[i+1:]
	}
	s.EtcdRequests.WithLabelValues(method, status.Code(err).String()).Inc()
}
