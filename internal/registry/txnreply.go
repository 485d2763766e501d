package registry

import (
	"context"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// txnOutcome is what the committer reads of etcd's answer to a transaction:
// whether its compare held, and the revision it wrote at. etcd's
// TxnResponse also carries a ResponseOp for every op (for a put, a
// ResponsePut in a oneof wrapper: three objects an op); decoded, those were
// about 200 bytes an op that nothing read, a tenth of what a leader
// starting a million units allocated for etcd, so they are skipped
// unread.
type txnOutcome struct {
	succeeded bool
	revision  int64
}

// txnOutcomeCodec is the proto codec, except that it decodes a txnOutcome
// from a TxnResponse's bytes, reading only its header's revision and its
// succeeded field.
type txnOutcomeCodec struct{ proto encoding.CodecV2 }

func newTxnOutcomeCodec() txnOutcomeCodec {
	return txnOutcomeCodec{proto: encoding.GetCodecV2(proto.Name)}
}

func (c txnOutcomeCodec) Name() string { return proto.Name }

func (c txnOutcomeCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c txnOutcomeCodec) Unmarshal(data mem.BufferSlice, v any) error {
	out, ok := v.(*txnOutcome)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	var b []byte
	if len(data) == 1 {
		b = data[0].ReadOnlyData()
	} else {
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		defer buf.Free()
		b = buf.ReadOnlyData()
	}
	return out.decode(b)
}

// TxnResponse's fields read (etcd's rpc.proto): header = 1 (its revision =
// 3), succeeded = 2.
const (
	txnResponseHeader    = 1
	txnResponseSucceeded = 2
	headerRevision       = 3
)

// decode reads a TxnResponse's header revision and succeeded field from b,
// skipping every other field.
func (o *txnOutcome) decode(b []byte) error {
	*o = txnOutcome{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("etcd's transaction answer: %w", protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num == txnResponseSucceeded && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return fmt.Errorf("etcd's transaction answer: succeeded: %w", protowire.ParseError(n))
			}
			o.succeeded, b = v != 0, b[n:]
		case num == txnResponseHeader && typ == protowire.BytesType:
			h, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return fmt.Errorf("etcd's transaction answer: header: %w", protowire.ParseError(n))
			}
			rev, err := headerRevisionOf(h)
			if err != nil {
				return err
			}
			o.revision, b = rev, b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return fmt.Errorf("etcd's transaction answer: field %d: %w", num, protowire.ParseError(n))
			}
			b = b[n:]
		}
	}
	return nil
}

// headerRevisionOf reads the revision of an encoded ResponseHeader.
func headerRevisionOf(b []byte) (int64, error) {
	var rev int64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, fmt.Errorf("etcd's transaction answer: header: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if num == headerRevision && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, fmt.Errorf("etcd's transaction answer: header revision: %w", protowire.ParseError(n))
			}
			rev, b = int64(v), b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0, fmt.Errorf("etcd's transaction answer: header field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return rev, nil
}

// txnSender sends a transaction and reads its outcome: on a gRPC
// connection with txnOutcomeCodec, or through a KV client that has none
// (internal/memetcd), with the whole answer decoded.
type txnSender struct {
	conn  grpc.ClientConnInterface
	kv    pb.KVClient
	codec txnOutcomeCodec
}

func (s txnSender) ok() bool { return s.conn != nil || s.kv != nil }

func (s txnSender) txn(ctx context.Context, req *pb.TxnRequest, opts ...grpc.CallOption) (txnOutcome, error) {
	switch {
	case s.conn != nil:
		var out txnOutcome
		err := s.conn.Invoke(ctx, pb.KV_Txn_FullMethodName, req, &out, append(opts, grpc.ForceCodecV2(s.codec))...)
		return out, err
	case s.kv != nil:
		resp, err := s.kv.Txn(ctx, req, opts...)
		if err != nil {
			return txnOutcome{}, err
		}
		return txnOutcome{succeeded: resp.Succeeded, revision: resp.GetHeader().GetRevision()}, nil
	}
	return txnOutcome{}, errors.New("registry: etcd write: the etcd client has no connection to write on")
}
