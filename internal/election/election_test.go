package election_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flotilla/flotilla/internal/election"
	"github.com/flotilla/flotilla/internal/etcdtest"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// TestCampaignAndObserve: an observer sees each leader in turn, and a
// term's fence stops holding once it resigns.
func TestCampaignAndObserve(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const prefix = "/t/election/"
	seen := election.Observe(ctx, cli, prefix)
	next := func(want string) election.Info {
		t.Helper()
		for {
			select {
			case in := <-seen:
				if in.Machine == want {
					return in
				}
			case <-ctx.Done():
				t.Fatalf("observer did not see leader %q", want)
			}
		}
	}
	next("") // no leader yet

	a, err := election.Campaign(ctx, cli, prefix, time.Second, election.Info{Machine: "a", GRPCAddr: "127.0.0.1:1", APIAddr: "127.0.0.1:2"})
	if err != nil {
		t.Fatal(err)
	}
	if in := next("a"); in.Rev != a.Info.Rev || in.GRPCAddr != "127.0.0.1:1" || in.APIAddr != "127.0.0.1:2" {
		t.Errorf("observed %+v, want a's addresses at revision %d", in, a.Info.Rev)
	}
	bDone := make(chan *election.Term, 1)
	go func() {
		b, err := election.Campaign(ctx, cli, prefix, time.Second, election.Info{Machine: "b"})
		if err != nil {
			t.Error(err)
		}
		bDone <- b
	}()
	// Once b waits for the keys before its own to go, it has had its
	// chance to win.
	waitfor.Until(t, 10*time.Second, "b waiting for a's key to go", waitfor.Parked("concurrency.waitDeletes"))
	select {
	case <-bDone:
		t.Fatal("b won while a leads")
	default:
	}
	fence := a.Fence()
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	b := <-bDone
	if in := next("b"); in.Rev != b.Info.Rev || in.Rev <= a.Info.Rev {
		t.Errorf("observed %+v after a resigned, want b at a later revision than %d", in, a.Info.Rev)
	}
	resp, err := cli.Txn(ctx).If(fence).Commit()
	if err != nil || resp.Succeeded {
		t.Errorf("a's fence after it resigned: succeeded=%v, %v; want it to fail", resp != nil && resp.Succeeded, err)
	}
	b.Resign(ctx)
}

// TestValidEndsWithTheLease: a term is valid while its lease is renewed and
// stops being valid, by itself, within the TTL of the last renewal once
// renewals fail (here the lease is revoked behind its back).
func TestValidEndsWithTheLease(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := election.Campaign(ctx, cli, "/t/valid/", time.Second, election.Info{Machine: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if !a.Valid(time.Now()) {
		t.Fatalf("Valid right after Campaign = false (valid until %v)", a.ValidUntil())
	}
	// Renewals keep it valid past the first TTL.
	first := a.ValidUntil()
	waitfor.True(t, 10*time.Second, "the term's first TTL over", func() bool { return time.Now().After(first) })
	if !a.Valid(time.Now()) {
		t.Fatalf("Valid past the first TTL (until %v) = false (valid until %v)", first, a.ValidUntil())
	}
	resp, err := cli.Get(ctx, a.Info.Key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get own key: %v", err)
	}
	// etcd may grant more than was asked (its minimum TTL).
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	ttl, err := cli.TimeToLive(ctx, lease)
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Duration(ttl.GrantedTTL) * time.Second
	revoked := time.Now()
	if _, err := cli.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if until := a.ValidUntil(); until.Sub(revoked) > granted {
		t.Errorf("ValidUntil is %v after the lease was revoked, more than its granted TTL %v", until.Sub(revoked), granted)
	}
	waitfor.True(t, time.Until(revoked.Add(granted)), "the term no longer valid a whole TTL after the lease was revoked", func() bool {
		return !a.Valid(time.Now())
	})
}

// TestObserveKeepsLeaderWhileEtcdUnreachable: an observer cut off from
// etcd keeps the last leader it saw (followers forward reads to it) instead
// of reporting none, even once the leader's lease has expired in etcd; when
// etcd answers again it reports what etcd holds.
func TestObserveKeepsLeaderWhileEtcdUnreachable(t *testing.T) {
	srv := etcdtest.Start(t)
	px := srv.Proxy(t)
	cli := px.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const prefix = "/t/election/"
	a, err := election.Campaign(ctx, cli, prefix, time.Second, election.Info{Machine: "a"})
	if err != nil {
		t.Fatal(err)
	}
	seen := election.Observe(ctx, cli, prefix)
	if in := <-seen; in.Machine != "a" {
		t.Fatalf("observed %+v, want a", in)
	}
	px.Cut()
	// Once a's lease has expired in etcd, the observer has had its chance
	// to report none.
	direct := srv.Client(t)
	waitfor.Until(t, 10*time.Second, "a's key gone from etcd", func() error {
		resp, err := direct.Get(ctx, a.Info.Key)
		if err == nil && len(resp.Kvs) != 0 {
			err = errors.New("a's key is there")
		}
		return err
	})
	select {
	case in := <-seen:
		t.Fatalf("observer cut off from etcd reported %+v", in)
	default:
	}
	px.Restore()
	select {
	case in := <-seen:
		if in.Machine != "" {
			t.Errorf("after the outage observed %+v, want no leader (a's lease expired)", in)
		}
	case <-ctx.Done():
		t.Fatal("observer did not report the expired leader once etcd answered")
	}
	rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
	a.Resign(rctx)
	rcancel()
}

// TestCampaignOutlivesExpiredLease: a candidate whose lease expires while
// it waits (its etcd member was cut off from the others, or the process
// froze) campaigns again at once with a new lease, instead of "winning"
// with the expired one when the leader goes, failing its first renewal
// and retrying a second later, while no one leads (issue 24).
func TestCampaignOutlivesExpiredLease(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const prefix = "/t/election/"
	a, err := election.Campaign(ctx, cli, prefix, time.Second, election.Info{Machine: "a"})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		term *election.Term
		err  error
	}
	bDone := make(chan result, 1)
	go func() {
		b, err := election.Campaign(ctx, cli, prefix, time.Second, election.Info{Machine: "b"})
		bDone <- result{b, err}
	}()
	// bLease is the lease of b's candidacy, once there is one.
	bLease := func() (clientv3.LeaseID, error) {
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			return 0, err
		}
		for _, kv := range resp.Kvs {
			if kv.CreateRevision != a.Info.Rev {
				return clientv3.LeaseID(kv.Lease), nil
			}
		}
		return 0, errors.New("no candidacy of b")
	}
	var expired clientv3.LeaseID
	waitfor.Until(t, 10*time.Second, "b's candidacy", func() (err error) {
		expired, err = bLease()
		return err
	})
	if _, err := cli.Revoke(ctx, expired); err != nil { // as etcd expires it
		t.Fatal(err)
	}
	// b's session hears its lease is gone, and b campaigns again.
	waitfor.Until(t, 10*time.Second, "b's candidacy with a new lease", func() error {
		l, err := bLease()
		if err == nil && l == expired {
			return fmt.Errorf("still lease %x", l)
		}
		return err
	})
	resigned := time.Now()
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-bDone:
		if r.err != nil {
			t.Fatalf("b's campaign after its lease expired and a resigned = %v, want a term", r.err)
		}
		if took := time.Since(resigned); took > time.Second {
			t.Errorf("b led %v after a resigned, want within 1s", took)
		}
		if !r.term.Valid(time.Now()) {
			t.Error("b's term is not valid")
		}
		r.term.Resign(ctx)
	case <-time.After(5 * time.Second):
		t.Fatal("b did not lead within 5s of a resigning")
	}
}
