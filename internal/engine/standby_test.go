package engine_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/waitfor"
)

// TestStandbyPrepares: an engine standing by prepares the state it would
// lead with, and, elected while the record is what it prepared it from,
// leads with it: the same units on the same machines, none restarted.
// Elected just after the record changed, it leads what was committed last,
// not what it prepared.
func TestStandbyPrepares(t *testing.T) { inBubble(t, testStandbyPrepares) }

func testStandbyPrepares(t *testing.T) {
	cli := newEtcd(t)
	e1 := startEngine(t, cli, "grpc", "e1")
	waitLeader(t, e1)
	a1 := startAgent(t, cli, "grpc", "m1")
	a2 := startAgent(t, cli, "grpc", "m2")
	waitMachines(t, e1.Engine, 2)
	ctx := context.Background()
	if err := e1.Apply(ctx, launch(t, 20, "u")); err != nil {
		t.Fatal(err)
	}
	var before map[string][]string
	waitfor.Until(t, 10*time.Second, "20 units active", func() (err error) {
		before, err = allActive(e1.Engine, 20)
		return err
	})
	started := a1.driver.Started() + a2.driver.Started()
	if _, _, ok := e1.Standby(); ok {
		t.Fatal("the leader says it stands by")
	}

	e2 := startEngine(t, cli, "grpc", "e2")
	waitStandby(t, e2, 20)
	e1.stop() // resigns: e2 is elected at once
	waitLeader(t, e2)
	if got := e2.LoadedFrom(); got != "prepared" {
		t.Errorf("e2 loaded its term from %q, want the state it prepared", got)
	}
	waitMachines(t, e2.Engine, 2)
	waitfor.Until(t, 10*time.Second, "the same 20 units active under e2", func() error {
		after, err := allActive(e2.Engine, 20)
		if err == nil && !maps.EqualFunc(after, before, func(a, b []string) bool {
			return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
		}) {
			return fmt.Errorf("units per machine %v, were %v", after, before)
		}
		return err
	})
	if n := a1.driver.Started() + a2.driver.Started(); n != started {
		t.Errorf("%d units started across the failover, want none", n-started)
	}

	// The record changes after e3 prepared, and e2 resigns before e3
	// prepares again: e3 must not lead the state it prepared.
	e3 := startEngine(t, cli, "grpc", "e3")
	waitStandby(t, e3, 20)
	if err := e2.Apply(ctx, launch(t, 1, "late")); err != nil {
		t.Fatal(err)
	}
	e2.stop()
	waitLeader(t, e3)
	if got := e3.LoadedFrom(); got != "followed" {
		t.Errorf("e3 loaded its term from %q, want the record it followed", got)
	}
	waitfor.Until(t, 10*time.Second, "21 units active under e3", func() error {
		_, err := allActive(e3.Engine, 21)
		return err
	})
}

// waitStandby waits until e, standing by, has prepared a state of n units.
func waitStandby(t *testing.T, e *testEngine, n int) {
	t.Helper()
	waitfor.Until(t, 10*time.Second, e.name+" to prepare", func() error {
		if prepared, units, ok := e.Standby(); !ok || !prepared || units != n {
			return fmt.Errorf("standing by %v, prepared %v, %d units", ok, prepared, units)
		}
		return nil
	})
}
