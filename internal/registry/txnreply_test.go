package registry

import (
	"context"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/mem"
	gproto "google.golang.org/protobuf/proto"

	"github.com/flotilla/flotilla/internal/etcdtest"
)

// TestTxnOutcomeDecode: the outcome read from a TxnResponse's bytes is its
// succeeded field and header revision, whatever else the answer carries,
// in one buffer or several; a truncated answer is an error, not a guess.
func TestTxnOutcomeDecode(t *testing.T) {
	responses := []*pb.ResponseOp{
		{Response: &pb.ResponseOp_ResponsePut{ResponsePut: &pb.PutResponse{Header: &pb.ResponseHeader{Revision: 7}}}},
		{Response: &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: &pb.DeleteRangeResponse{Deleted: 1}}},
		{Response: &pb.ResponseOp_ResponseRange{ResponseRange: &pb.RangeResponse{Kvs: []*mvccpb.KeyValue{{Key: []byte("k"), Value: []byte("v")}}, Count: 1}}},
	}
	for _, want := range []*pb.TxnResponse{
		{Header: &pb.ResponseHeader{ClusterId: 1, MemberId: 2, Revision: 1234567, RaftTerm: 9}, Succeeded: true, Responses: responses},
		{Header: &pb.ResponseHeader{ClusterId: 1, MemberId: 2, Revision: 42, RaftTerm: 9}, Succeeded: false},
		{Header: &pb.ResponseHeader{Revision: 1 << 40}, Succeeded: true},
		{Succeeded: true, Responses: responses},
		{},
	} {
		b, err := gproto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		codec := newTxnOutcomeCodec()
		for _, data := range []mem.BufferSlice{
			{mem.SliceBuffer(b)},
			{mem.SliceBuffer(b[:len(b)/2]), mem.SliceBuffer(b[len(b)/2:])},
		} {
			var got txnOutcome
			if err := codec.Unmarshal(data, &got); err != nil {
				t.Fatalf("decode %v: %v", want, err)
			}
			if got.succeeded != want.Succeeded || got.revision != want.GetHeader().GetRevision() {
				t.Errorf("decode %v = %+v, want succeeded %v revision %d", want, got, want.Succeeded, want.GetHeader().GetRevision())
			}
		}
		// Anything but a txnOutcome is the proto codec's.
		var whole pb.TxnResponse
		if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &whole); err != nil || !gproto.Equal(&whole, want) {
			t.Errorf("a TxnResponse decoded as %v (%v), want %v", &whole, err, want)
		}
		if len(b) > 1 {
			var got txnOutcome
			if err := got.decode(b[:len(b)-1]); err == nil {
				t.Errorf("a truncated answer (%d of %d bytes) decoded as %+v, want an error", len(b)-1, len(b), got)
			}
		}
	}
}

// TestTxnSenderOnEtcd: through a real etcd's gRPC connection, a fenced
// transaction's outcome is read right both ways.
func TestTxnSenderOnEtcd(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	s := kvClientOf(cli)
	if s.conn == nil {
		t.Fatal("a client with a gRPC connection got no connection to send on")
	}
	ctx := context.Background()
	put, err := cli.Put(ctx, "/fence", "x")
	if err != nil {
		t.Fatal(err)
	}
	cmp := func(rev int64) []*pb.Compare {
		return []*pb.Compare{{Key: []byte("/fence"), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: rev}}}
	}
	ops := []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("/a"), Value: []byte("1")}}}}
	got, err := s.txn(ctx, &pb.TxnRequest{Compare: cmp(put.Header.Revision), Success: ops})
	if err != nil || !got.succeeded || got.revision != put.Header.Revision+1 {
		t.Fatalf("a transaction whose fence holds: %+v, %v; want succeeded at revision %d", got, err, put.Header.Revision+1)
	}
	got, err = s.txn(ctx, &pb.TxnRequest{Compare: cmp(put.Header.Revision + 100), Success: ops})
	if err != nil || got.succeeded || got.revision != put.Header.Revision+1 {
		t.Fatalf("a transaction whose fence fails: %+v, %v; want not succeeded, at revision %d", got, err, put.Header.Revision+1)
	}
}
