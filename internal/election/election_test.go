package election_test

import (
	"context"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/election"
	"github.com/flotilla/flotilla/internal/etcdtest"
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
	select {
	case <-bDone:
		t.Fatal("b won while a leads")
	case <-time.After(300 * time.Millisecond):
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
