package engine_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flotilla/flotilla/internal/etcdtest"
	"github.com/flotilla/flotilla/internal/registry"
)

// BenchmarkTermLoad times what a new leader does before it serves: it
// loads the cluster from etcd and builds its memory. The cluster is N
// instances of one template (FLOTILLA_BENCH_LOAD_UNITS, default 100,000),
// each launched and placed on one of N/100 machines, as the bench leaves
// it; each iteration starts an engine on it and waits until it leads.
//
//	go test -run '^$' -bench TermLoad -benchtime 3x -cpuprofile cpu.out ./internal/engine/
func BenchmarkTermLoad(b *testing.B) {
	n := 100000
	if s := os.Getenv("FLOTILLA_BENCH_LOAD_UNITS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatalf("FLOTILLA_BENCH_LOAD_UNITS=%q: %v", s, err)
		}
	}
	srv := etcdtest.Start(b)
	cli := srv.Client(b)
	writeInstances(b, cli, n)
	b.ResetTimer()
	for b.Loop() {
		e := startEngine(b, cli, "grpc", "e1")
		waitLeader(b, e)
		e.stop()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/unit")
}

// writeInstances stores n placed instances of one template, as records
// by content, in transactions of 128 keys, eight at a time.
func writeInstances(b *testing.B, cli *clientv3.Client, n int) {
	b.Helper()
	keys := registry.Keys{}
	text := rangeTemplate
	ctx := context.Background()
	if _, err := cli.Put(ctx, keys.File(registry.ContentOf(text)), text); err != nil {
		b.Fatal(err)
	}
	machines := max(n/100, 1)
	width := len(strconv.Itoa(n))
	work := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for from := range work {
				var ops []clientv3.Op
				for i := from; i < min(from+128, n); i++ {
					op := registry.PutUnit(keys, registry.Record{Name: fmt.Sprintf("bench@%0*d.service", width, i+1),
						Content: registry.ContentOf(text), DesiredState: "launched", Machine: fmt.Sprintf("sim-%05d", i%machines+1)})
					ops = append(ops, clientv3.OpPut(op.Key, op.Value))
				}
				if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for from := 0; from < n; from += 128 {
		work <- from
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}
