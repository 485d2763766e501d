package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flotilla/flotilla/internal/engine"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// versionLine is one version as the tests compare it.
func versionLines(vs engine.UnitVersions) string {
	var b strings.Builder
	for _, v := range vs.Versions {
		cur := ""
		if v.Current {
			cur = " current"
		}
		tag := ""
		if v.Tag != "" {
			tag = " tag=" + v.Tag
		}
		fmt.Fprintf(&b, "v%d %s by=%s%s%s file=%q\n", v.Version.Version, v.Change, v.By, tag, cur, strings.TrimSpace(v.File))
	}
	return b.String()
}

func sleepFile(t *testing.T, name string, n int) *unit.File {
	return parse(t, name, fmt.Sprintf("[Service]\nExecStart=/bin/sleep %d\n", n))
}

// TestEngineVersions: each change of a unit's file makes a version, kept
// (the last Keep and the tagged ones) across a leader change, with files
// shared by content; a revert makes a version of an old file; a stale
// check index is refused and changes nothing; a destroyed unit's log goes.
func TestEngineVersions(t *testing.T) { inBubble(t, testEngineVersions) }

func testEngineVersions(t *testing.T) {
	cli := newEtcd(t)
	e1 := startEngine(t, cli, "grpc", "e1")
	waitLeader(t, e1)
	ctx := context.Background()
	by := engine.ApplyOptions{By: "alice"}

	// Versions 1 to 4 of a plain unit and of a template.
	for j, name := range []string{"db.service", "web@.service"} {
		for i := 1; i <= 4; i++ {
			c := engine.Change{Name: name, File: sleepFile(t, name, 10*j+i), Replace: true}
			if err := e1.ApplyWith(ctx, []engine.Change{c}, by); err != nil {
				t.Fatalf("%s v%d: %v", name, i, err)
			}
		}
	}
	// The same file again makes no version.
	if err := e1.ApplyWith(ctx, []engine.Change{{Name: "db.service", File: sleepFile(t, "db.service", 4), Replace: true}}, by); err != nil {
		t.Fatal(err)
	}
	vs, err := e1.Versions("db.service")
	if err != nil {
		t.Fatal(err)
	}
	want := `v1 created by=alice file="[Service]\nExecStart=/bin/sleep 1"
v2 replaced by=alice file="[Service]\nExecStart=/bin/sleep 2"
v3 replaced by=alice file="[Service]\nExecStart=/bin/sleep 3"
v4 replaced by=alice current file="[Service]\nExecStart=/bin/sleep 4"
`
	if got := versionLines(vs); got != want {
		t.Fatalf("versions of db.service:\n%s\nwant:\n%s", got, want)
	}
	index := vs.Index

	// An instance shows its template's versions, marking the one it was made from.
	if err := e1.Apply(ctx, []engine.Change{{Name: "web@1.service", DesiredState: unit.Loaded}}); err != nil {
		t.Fatal(err)
	}
	ivs, err := e1.Versions("web@1.service")
	if err != nil {
		t.Fatal(err)
	}
	if ivs.Log != "web@.service" || !ivs.Versions[3].Current || ivs.Versions[2].Current {
		t.Fatalf("versions of web@1.service: log %s\n%s", ivs.Log, versionLines(ivs))
	}

	// Tag version 1, keep 2: the tagged, and the last two, are kept.
	if err := e1.Tag(ctx, "db.service", 1, "good"); err != nil {
		t.Fatal(err)
	}
	if err := e1.Tag(ctx, "db.service", 2, "good"); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("a tag twice: %v, want a conflict", err)
	}
	if err := e1.Tag(ctx, "db.service", 9, "x"); !errors.Is(err, engine.ErrNotFound) || !strings.Contains(err.Error(), "keeps 1, 2, 3, 4") {
		t.Fatalf("tag of a missing version: %v", err)
	}
	if err := e1.SetKeepVersions(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := e1.SetKeepVersions(ctx, 1000); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("keep 1000: %v", err)
	}
	if err := e1.ApplyWith(ctx, []engine.Change{{Name: "db.service", File: sleepFile(t, "db.service", 5), Replace: true}}, by); err != nil {
		t.Fatal(err)
	}

	// A stale check index is refused, naming what changed.
	stale := engine.ApplyOptions{CheckIndex: &index}
	err = e1.ApplyWith(ctx, []engine.Change{{Name: "db.service", File: sleepFile(t, "db.service", 6), Replace: true}}, stale)
	if !errors.Is(err, engine.ErrConflict) || !strings.Contains(err.Error(), "db.service is at version 5") {
		t.Fatalf("stale check index: %v", err)
	}

	// Revert to the tagged version 1 with a new leader.
	e1.stop()
	e2 := startEngine(t, cli, "grpc", "e2")
	waitLeader(t, e2)
	if keep, err := e2.KeepVersions(); err != nil || keep != 2 {
		t.Fatalf("keep after a leader change: %d %v", keep, err)
	}
	if n, err := e2.Revert(ctx, "db.service", 1, engine.ApplyOptions{By: "bob"}, nil); err != nil || n != 1 {
		t.Fatalf("revert: %d %v", n, err)
	}
	vs, err = e2.Versions("db.service")
	if err != nil {
		t.Fatal(err)
	}
	want = `v1 created by=alice tag=good file="[Service]\nExecStart=/bin/sleep 1"
v5 replaced by=alice file="[Service]\nExecStart=/bin/sleep 5"
v6 reverted to 1 by=bob current file="[Service]\nExecStart=/bin/sleep 1"
`
	if got := versionLines(vs); got != want {
		t.Fatalf("versions of db.service after the revert:\n%s\nwant:\n%s", got, want)
	}
	if u, err := e2.Unit("db.service"); err != nil || !strings.Contains(u.File, "sleep 1") {
		t.Fatalf("db.service after the revert: %v %v", u.File, err)
	}

	// The files of the versions dropped are gone from etcd (after the
	// round is answered); those kept are there.
	waitfor.Until(t, 10*time.Second, "db.service's files 1 and 5 alone stored", func() error {
		files, err := cli.Get(ctx, registry.Keys{}.Files(), clientv3.WithPrefix())
		if err != nil {
			return err
		}
		texts := map[string]bool{}
		for _, kv := range files.Kvs {
			texts[strings.TrimSpace(string(kv.Value))] = true
		}
		for i := 1; i <= 5; i++ {
			kept := i == 1 || i == 5
			if text := fmt.Sprintf("[Service]\nExecStart=/bin/sleep %d", i); texts[text] != kept {
				return fmt.Errorf("file %d stored: %v, want %v", i, texts[text], kept)
			}
		}
		return nil
	})

	// Destroyed, its versions go; submitted again, it starts at version 1
	// with an index above every earlier one.
	if err := e2.Apply(ctx, []engine.Change{{Name: "db.service", Destroy: true}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e2.Versions("db.service"); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("versions of a destroyed unit: %v", err)
	}
	if err := e2.Apply(ctx, []engine.Change{{Name: "db.service", File: sleepFile(t, "db.service", 7)}}); err != nil {
		t.Fatal(err)
	}
	vs, err = e2.Versions("db.service")
	if err != nil || len(vs.Versions) != 1 || vs.Versions[0].Version.Version != 1 || vs.Index <= index+3 {
		t.Fatalf("versions after destroy and submit: %+v %v (index before %d)", vs, err, index)
	}
}
