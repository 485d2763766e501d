package registry_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flotilla/flotilla/internal/etcdtest"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/version"
)

func readSchema(t *testing.T, cli *clientv3.Client, keys registry.Keys) int {
	t.Helper()
	v, err := registry.ReadSchema(context.Background(), cli, keys, 1)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestMigrate: data without a schema key is schema 1; Migrate brings it
// up step by step through the fenced committer, each step's writes then
// its version; a missing step, a fenced writer and a garbled key are
// errors that say so.
func TestMigrate(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	ctx := context.Background()
	keys := registry.Keys{Prefix: "/t/"}
	fence := "/t/election/x"
	c := registry.NewCommitter(cli, fenceKey(t, cli, fence), registry.CommitterConfig{})
	runCommitter(t, c)

	if v := readSchema(t, cli, keys); v != 1 {
		t.Fatalf("schema of data without a schema key = %d, want 1", v)
	}
	var ran []int
	logf := func(m registry.Migration) { ran = append(ran, m.From) }
	if err := registry.Migrate(ctx, cli, keys, registry.Migrations, 1, 2, c.Commit, logf); err != nil {
		t.Fatal(err)
	}
	if v := readSchema(t, cli, keys); v != 2 || len(ran) != 1 {
		t.Fatalf("after migrating 1 to 2: schema %d, steps run %v; want 2 after one step", v, ran)
	}

	// A step that changes data: every unit record gains a machine.
	if _, err := cli.Put(ctx, keys.Unit("a.service"), `{"file":"[Service]\nExecStart=/bin/true\n","desiredState":"launched"}`); err != nil {
		t.Fatal(err)
	}
	steps := append(slices.Clone(registry.Migrations), registry.Migration{From: 2, What: "place every unit on m1",
		Ops: func(ctx context.Context, cli *clientv3.Client, keys registry.Keys) ([]registry.Op, error) {
			snap, err := registry.Load(ctx, cli, keys)
			if err != nil {
				return nil, err
			}
			var ops []registry.Op
			for _, r := range snap.Units {
				r.Machine = "m1"
				ops = append(ops, registry.PutUnit(keys, r))
			}
			return ops, nil
		}})
	if err := registry.Migrate(ctx, cli, keys, steps, 2, 3, c.Commit, logf); err != nil {
		t.Fatal(err)
	}
	snap, err := registry.Load(ctx, cli, keys)
	if err != nil {
		t.Fatal(err)
	}
	if v := readSchema(t, cli, keys); v != 3 || len(snap.Units) != 1 || snap.Units[0].Machine != "m1" {
		t.Fatalf("after migrating 2 to 3: schema %d, units %+v; want 3 and a.service on m1", v, snap.Units)
	}

	err = registry.Migrate(ctx, cli, keys, steps, 3, 5, c.Commit, nil)
	if err == nil || !strings.Contains(err.Error(), "no migration from schema 3 to 4") {
		t.Errorf("Migrate 3 to 5 without the steps: %v, want an error naming the missing step", err)
	}

	// A deposed leader migrates nothing.
	if _, err := cli.Delete(ctx, fence); err != nil {
		t.Fatal(err)
	}
	steps = append(steps, registry.Migration{From: 3, What: "nothing", Ops: func(context.Context, *clientv3.Client, registry.Keys) ([]registry.Op, error) { return nil, nil }})
	if err := registry.Migrate(ctx, cli, keys, steps, 3, 4, c.Commit, nil); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("Migrate by a fenced committer: %v, want ErrFenced", err)
	}
	if v := readSchema(t, cli, keys); v != 3 {
		t.Errorf("schema after a fenced migration = %d, want 3 still", v)
	}

	if _, err := cli.Put(ctx, keys.Schema(), "two"); err != nil {
		t.Fatal(err)
	}
	if _, err := registry.ReadSchema(ctx, cli, keys, 1); err == nil || !strings.Contains(err.Error(), `/t/config/schema holds "two"`) {
		t.Errorf("ReadSchema of a garbled key: %v, want an error naming the key and its value", err)
	}
}

// TestMigrationsReachSchema: every schema from the oldest to this
// binary's has its step, so a leader can bring any older data up.
func TestMigrationsReachSchema(t *testing.T) {
	for v := version.OldestSchema; v < version.SchemaVersion; v++ {
		if !slices.ContainsFunc(registry.Migrations, func(m registry.Migration) bool { return m.From == v }) {
			t.Errorf("no migration from schema %d to %d (this binary's schema is %d)", v, v+1, version.SchemaVersion)
		}
	}
}
