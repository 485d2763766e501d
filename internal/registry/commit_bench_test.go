package registry

import (
	"context"
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flotilla/flotilla/internal/etcdtest"
)

// BenchmarkCommit commits one request of 10,000 puts, as a placement pass
// commits a slice of its units, to an embedded etcd: what the committer
// allocates for it (B/op) is most of what it costs the leader.
func BenchmarkCommit(b *testing.B) {
	srv := etcdtest.Start(b)
	cli := srv.Client(b)
	c := NewCommitter(cli, clientv3.Compare(clientv3.CreateRevision("fence"), "=", 0), CommitterConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	ops := make([]Op, 10_000)
	for i := range ops {
		ops[i] = PutUnit(Keys{}, Record{Name: fmt.Sprintf("bench@%07d.service", i), Content: "0123456789abcdef0123456789abcdef", DesiredState: "launched", Machine: "m00042"})
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Commit(ctx, ops); err != nil {
			b.Fatal(err)
		}
	}
}
