package registry_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flotilla/flotilla/internal/etcdtest"
	"github.com/flotilla/flotilla/internal/registry"
)

// normal puts a snapshot's slices in a fixed order, to compare snapshots.
func normal(s *registry.Snapshot) *registry.Snapshot {
	c := *s
	c.Units = slices.Clone(s.Units)
	slices.SortFunc(c.Units, func(a, b registry.Record) int { return strings.Compare(a.Name, b.Name) })
	c.Ranges = slices.Clone(s.Ranges)
	slices.SortFunc(c.Ranges, func(a, b registry.RangeRecord) int { return strings.Compare(a.Key, b.Key) })
	c.Skipped = slices.Sorted(slices.Values(s.Skipped))
	c.Changes = 0 // a follower's count; Load has none
	return &c
}

// TestFollower: a follower's snapshot is what Load reads, after every kind
// of change (records, files, ranges, moves, machines, the policy, the
// former layout's schedule keys, a record that does not decode, deletes),
// and after etcd compacted past its watch.
func TestFollower(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	keys := registry.Keys{Prefix: "/f/"}
	ctx := context.Background()
	put := func(ops ...registry.Op) {
		t.Helper()
		for _, op := range ops {
			var err error
			if op.Delete {
				_, err = cli.Delete(ctx, op.Key)
			} else {
				_, err = cli.Put(ctx, op.Key, op.Value)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	tmpl := "[Service]\nExecStart=/bin/true\n"
	content := registry.ContentOf(tmpl)
	put(registry.PutFile(keys, tmpl),
		registry.PutUnit(keys, registry.Record{Name: "a.service", File: tmpl, DesiredState: "launched", Machine: "m1"}),
		registry.PutUnit(keys, registry.Record{Name: "web@1.service", Content: content, DesiredState: "launched", Machine: "m2"}),
		registry.PutSchedule(keys, "old.service", "m3"),
		registry.PutUnit(keys, registry.Record{Name: "old.service", File: tmpl, DesiredState: "loaded"}))

	f := registry.NewFollower(cli, keys)
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { f.Run(fctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	same := func(when string) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		got, err := f.Snapshot(sctx)
		if err != nil {
			t.Fatalf("%s: Snapshot: %v", when, err)
		}
		want, err := registry.Load(ctx, cli, keys)
		if err != nil {
			t.Fatal(err)
		}
		if got.Revision < want.Revision {
			t.Errorf("%s: snapshot at revision %d, before Load's %d", when, got.Revision, want.Revision)
		}
		got.Revision = want.Revision
		if g, w := normal(got), normal(want); !reflect.DeepEqual(g, w) {
			t.Errorf("%s: the follower's snapshot differs from Load's:\n got %+v\nwant %+v", when, g, w)
		}
	}
	same("loaded")

	put(registry.PutUnit(keys, registry.Record{Name: "web@2.service", Content: content, DesiredState: "loaded"}),
		registry.PutUnit(keys, registry.Record{Name: "old.service", File: tmpl, DesiredState: "launched", Machine: "m3"}),
		registry.DeleteSchedule(keys, "old.service"),
		registry.PutRange(keys, registry.RangeRecord{Template: "web@.service", From: 1, To: 10, Content: content, DesiredState: "loaded"}),
		registry.PutMove(keys, "a.service", "m1"),
		registry.PutMachine(keys, "m1", registry.MachineRecord{Drain: true}),
		registry.Op{Key: keys.SchedulerConfig(), Value: `{"strategy":"binpack"}`},
		registry.Op{Key: keys.Unit("bad.service"), Value: "{not json"},
		registry.Op{Key: keys.Election() + "x", Value: "ignored"})
	same("changed")

	put(registry.DeleteUnit(keys, "a.service"), registry.DeleteMove(keys, "a.service"),
		registry.DeleteRange(keys.Range(registry.RangeRecord{Template: "web@.service", From: 1, To: 10})),
		registry.PutUnit(keys, registry.Record{Name: "bad.service", File: tmpl, DesiredState: "loaded"}),
		registry.Op{Key: keys.SchedulerConfig(), Delete: true})
	same("deleted")

	// etcd compacts its history: a follower whose watch is caught up
	// follows on.
	put(registry.PutUnit(keys, registry.Record{Name: "c.service", File: tmpl, DesiredState: "launched"}))
	resp, err := cli.Get(ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	put(registry.PutUnit(keys, registry.Record{Name: "d.service", File: tmpl, DesiredState: "launched"}))
	same("compacted")

	// etcd's revision moved on by a write outside the record: the
	// follower learns it has missed nothing from a progress notification.
	if _, err := cli.Put(ctx, "/elsewhere", "x"); err != nil {
		t.Fatal(err)
	}
	same("written elsewhere")
}

// TestFollowerLetsGo: once it stops following, a follower holds nothing
// (an engine that leads writes the record itself): a snapshot asked of it
// then waits as for a first load.
func TestFollowerLetsGo(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	keys := registry.Keys{Prefix: "/g/"}
	if _, err := cli.Put(context.Background(), keys.Unit("a.service"), `{"desiredState":"launched","file":"[Service]\nExecStart=/bin/true\n"}`); err != nil {
		t.Fatal(err)
	}
	f := registry.NewFollower(cli, keys)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.Run(ctx); close(done) }()
	if s, err := f.Snapshot(ctx); err != nil || len(s.Units) != 1 {
		t.Fatalf("while following: %v, %v", s, err)
	}
	cancel()
	<-done
	sctx, scancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer scancel()
	if s, err := f.Snapshot(sctx); err == nil {
		t.Errorf("a follower that stopped still gave a snapshot of %d units", len(s.Units))
	}
}
