package election

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flotilla/flotilla/internal/etcdtest"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// TestTermOutlivesItsSessionKeepAlive: when the session's own keep-alive
// gives up (as it does when its answers reach a CPU-starved process late)
// while etcd still holds the lease, the term goes on: it renews the lease
// itself, stays valid and keeps its key. Once the lease is revoked, Done
// closes.
func TestTermOutlivesItsSessionKeepAlive(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := Campaign(ctx, cli, "/t/orphan/", time.Second, Info{Machine: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Resign(context.Background())
	a.session.Orphan() // its keep-alive ends; the lease is left to expire
	select {
	case <-a.session.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the session's keep-alive did not end")
	}
	resp, err := cli.Get(ctx, a.Info.Key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get own key: %v", err)
	}
	ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Duration(ttl.GrantedTTL) * time.Second
	// The window is the lease's lifetime thrice: the term lasts only if
	// it renews the lease itself.
	waitfor.Never(t, 3*granted, "the term ended with its session's keep-alive, while etcd held its lease", func() bool {
		select {
		case <-a.Done():
			return true
		default:
			return false
		}
	})
	if !a.Valid(time.Now()) {
		t.Errorf("Valid = false %v after the session's keep-alive ended; the term renews the lease itself", 3*granted)
	}
	if resp, err := cli.Get(ctx, a.Info.Key); err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != a.Info.Rev {
		t.Fatalf("the term's key is gone %v after its session's keep-alive ended (%v)", 3*granted, err)
	}
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Done():
	case <-time.After(2 * granted):
		t.Fatalf("Done not closed %v after the lease was revoked", 2*granted)
	}
}

// TestTermRenewsThroughSlowAnswers: renewals whose answers take longer
// than a third of the TTL to come back (a far etcd, or a leader whose
// goroutines wait for a CPU) keep the term valid: each is waited for, and
// the next ones go out meanwhile.
func TestTermRenewsThroughSlowAnswers(t *testing.T) {
	srv := etcdtest.Start(t)
	proxy := srv.Proxy(t)
	cli := proxy.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const ttl = 3 * time.Second
	a, err := Campaign(ctx, cli, "/t/slow/", ttl, Info{Machine: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Resign(context.Background())
	// 700 ms each way: an answer comes 1.4 s after its request, more than
	// the third of the TTL (1 s) the renewals are sent apart.
	proxy.Delay(700 * time.Millisecond)
	time.Sleep(ttl) // the renewals sent before the delay are answered
	deadline := time.Now().Add(2 * ttl)
	invalid := 0
	for time.Now().Before(deadline) {
		select {
		case <-a.Done():
			t.Fatalf("the term ended: %v", a.Err())
		case <-time.After(100 * time.Millisecond):
		}
		if !a.Valid(time.Now()) {
			invalid++
		}
	}
	if invalid > 0 {
		t.Errorf("Valid was false %d times in %v of answers 1.4 s late, with a TTL of %v", invalid, 2*ttl, ttl)
	}
}
