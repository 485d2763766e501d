package registry_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flotilla/flotilla/internal/etcdtest"
	"github.com/flotilla/flotilla/internal/registry"
)

// fenceKey makes a key whose creation revision the committer is fenced on.
func fenceKey(t *testing.T, cli *clientv3.Client, key string) clientv3.Cmp {
	t.Helper()
	resp, err := cli.Put(context.Background(), key, "x")
	if err != nil {
		t.Fatal(err)
	}
	return clientv3.Compare(clientv3.CreateRevision(key), "=", resp.Header.Revision)
}

func runCommitter(t *testing.T, c *registry.Committer) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestCommitterBatches: thousands of changes, from many concurrent callers,
// cost tens of etcd transactions, and every one lands.
func TestCommitterBatches(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	keys := registry.Keys{Prefix: "/t/"}
	c := registry.NewCommitter(cli, fenceKey(t, cli, "/t/election/x"), registry.CommitterConfig{MaxOps: 128})
	runCommitter(t, c)
	before, _ := cli.Get(context.Background(), "/", clientv3.WithCountOnly())

	const callers, perCaller = 30, 100 // 3,000 units
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ops []registry.Op
			for j := range perCaller {
				name := fmt.Sprintf("u%d-%d.service", i, j)
				ops = append(ops, registry.PutUnit(keys, registry.Record{Name: name, File: "[Service]\nExecStart=/bin/true\n", DesiredState: "launched"}))
			}
			errs <- c.Commit(context.Background(), ops)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Commit: %v", err)
		}
	}
	snap, err := registry.Load(context.Background(), cli, keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Units) != callers*perCaller {
		t.Fatalf("Load found %d units, want %d", len(snap.Units), callers*perCaller)
	}
	// Each transaction is one etcd revision.
	txns := snap.Revision - before.Header.Revision
	if txns > 3*callers*perCaller/128 {
		t.Errorf("%d units took %d transactions, want at most %d (128 ops each)", callers*perCaller, txns, 3*callers*perCaller/128)
	}
	t.Logf("%d units in %d transactions", callers*perCaller, txns)
}

// TestCommitterSplitsLargeRequest: one request larger than a transaction is
// written in several.
func TestCommitterSplitsLargeRequest(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	keys := registry.Keys{Prefix: "/t/"}
	c := registry.NewCommitter(cli, fenceKey(t, cli, "/t/election/x"), registry.CommitterConfig{MaxOps: 10})
	runCommitter(t, c)
	var ops []registry.Op
	for i := range 95 {
		ops = append(ops, registry.PutSchedule(keys, fmt.Sprintf("u%d.service", i), "m1"))
	}
	if err := c.Commit(context.Background(), ops); err != nil {
		t.Fatal(err)
	}
	snap, err := registry.Load(context.Background(), cli, keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Schedule) != 95 {
		t.Errorf("schedule has %d entries, want 95", len(snap.Schedule))
	}
}

// TestCommitterFenced: once the fence key is gone (another leader), writes
// fail with ErrFenced and nothing lands.
func TestCommitterFenced(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	keys := registry.Keys{Prefix: "/t/"}
	c := registry.NewCommitter(cli, fenceKey(t, cli, "/t/election/x"), registry.CommitterConfig{})
	runCommitter(t, c)
	if _, err := cli.Delete(context.Background(), "/t/election/x"); err != nil {
		t.Fatal(err)
	}
	err := c.Commit(context.Background(), []registry.Op{registry.PutSchedule(keys, "a.service", "m1")})
	if !errors.Is(err, registry.ErrFenced) {
		t.Fatalf("Commit after losing the fence = %v, want ErrFenced", err)
	}
	resp, _ := cli.Get(context.Background(), keys.Schedule("a.service"))
	if len(resp.Kvs) != 0 {
		t.Errorf("a fenced write landed: %v", resp.Kvs)
	}
}

// TestCommitterStopsFailedRequest: once a transaction of a request split
// over many has failed, its remaining transactions are not sent: a leader
// whose large write failed (fenced, or etcd too slow) stops loading etcd at
// once, which lets its lease renewals and the next campaign through.
func TestCommitterStopsFailedRequest(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	keys := registry.Keys{Prefix: "/t/"}
	var mu sync.Mutex
	sent := 0
	c := registry.NewCommitter(cli, fenceKey(t, cli, "/t/election/x"), registry.CommitterConfig{MaxOps: 10, InFlight: 2,
		Observe: func(time.Duration) { mu.Lock(); sent++; mu.Unlock() }})
	runCommitter(t, c)
	if _, err := cli.Delete(context.Background(), "/t/election/x"); err != nil {
		t.Fatal(err)
	}
	var ops []registry.Op
	for i := range 1000 { // 100 transactions
		ops = append(ops, registry.PutSchedule(keys, fmt.Sprintf("u%04d.service", i), "m1"))
	}
	if err := c.Commit(context.Background(), ops); !errors.Is(err, registry.ErrFenced) {
		t.Fatalf("Commit after losing the fence = %v, want ErrFenced", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if sent > 2 {
		t.Errorf("%d transactions sent after the first failed, want at most 2 (the ones already in flight)", sent)
	}
	resp, _ := cli.Get(context.Background(), keys.Schedule(""), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if resp.Count != 0 {
		t.Errorf("%d fenced writes landed", resp.Count)
	}
}

// TestLoadPages: Load reads more keys than one page.
func TestLoadPages(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	keys := registry.Keys{Prefix: "/t"}
	c := registry.NewCommitter(cli, fenceKey(t, cli, "/t/election/x"), registry.CommitterConfig{})
	runCommitter(t, c)
	var ops []registry.Op
	for i := range 12000 {
		name := fmt.Sprintf("u%05d.service", i)
		ops = append(ops, registry.PutUnit(keys, registry.Record{Name: name, File: "x", DesiredState: "inactive"}), registry.PutSchedule(keys, name, "m"))
	}
	if err := c.Commit(context.Background(), ops); err != nil {
		t.Fatal(err)
	}
	snap, err := registry.Load(context.Background(), cli, keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Units) != 12000 || len(snap.Schedule) != 12000 {
		t.Errorf("Load = %d units, %d schedule entries; want 12000 of each", len(snap.Units), len(snap.Schedule))
	}
	if snap.Units[0].Name != "u00000.service" || snap.Units[11999].Name != "u11999.service" {
		t.Errorf("units not in key order: first %s, last %s", snap.Units[0].Name, snap.Units[11999].Name)
	}
}

// TestCommitterSameKey: concurrent requests writing one key all succeed
// (etcd refuses a key twice in one transaction, so they never share one).
func TestCommitterSameKey(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	keys := registry.Keys{Prefix: "/t/"}
	c := registry.NewCommitter(cli, fenceKey(t, cli, "/t/election/x"), registry.CommitterConfig{})
	runCommitter(t, c)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- c.Commit(context.Background(), []registry.Op{registry.PutSchedule(keys, "a.service", fmt.Sprintf("m%d", i)), registry.PutSchedule(keys, fmt.Sprintf("b%d.service", i), "m")})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Commit: %v", err)
		}
	}
	if c.Revision() == 0 {
		t.Error("Revision() = 0 after commits")
	}
}
