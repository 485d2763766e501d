package registry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/etcdtest"
	"github.com/flotilla/flotilla/internal/registry"
)

// TestConfirmNeedsQuorum: Confirm succeeds only through etcd's consensus.
// An etcd member cut off from its quorum (here: the other two members of
// three are gone) answers an empty transaction on its own, from its local
// copy, so a leader cut off with its member could acknowledge a request
// that changes nothing while another leader had already changed the unit
// (issue 24). Confirm must fail there, and say ErrFenced once the fence is
// gone.
func TestConfirmNeedsQuorum(t *testing.T) {
	members := etcdtest.StartCluster(t, 3)
	cli := members[0].Client(t)
	c := registry.NewCommitter(cli, fenceKey(t, cli, "/t/election/x"), registry.CommitterConfig{})
	if err := c.Confirm(context.Background()); err != nil {
		t.Fatalf("Confirm with the whole cluster up = %v, want nil", err)
	}
	other := members[1].Client(t)
	if _, err := other.Delete(context.Background(), "/t/election/x"); err != nil {
		t.Fatal(err)
	}
	if err := c.Confirm(context.Background()); !errors.Is(err, registry.ErrFenced) {
		t.Fatalf("Confirm after another member deleted the fence key = %v, want ErrFenced", err)
	}
	c = registry.NewCommitter(cli, fenceKey(t, cli, "/t/election/y"), registry.CommitterConfig{})
	members[1].Stop()
	members[2].Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Confirm(ctx); err == nil {
		t.Fatal("Confirm through a member cut off from its quorum = nil, want an error: it answered alone")
	}
}
