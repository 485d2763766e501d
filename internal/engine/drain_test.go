package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/engine"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// copiesOf counts, per unit, the agents that run it (any running state)
// and those that report it active.
func copiesOf(agents ...*testAgent) (running, active map[string]int) {
	running, active = map[string]int{}, map[string]int{}
	for _, a := range agents {
		for _, s := range a.driver.States() {
			if s.Running() {
				running[s.Name]++
			}
			if s.Active == "active" {
				active[s.Name]++
			}
		}
	}
	return running, active
}

// instances returns the changes that launch web@1..n.service.
func instances(t *testing.T, n int) []engine.Change {
	var cs []engine.Change
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("web@%d.service", i)
		cs = append(cs, engine.Change{Name: name, File: parse(t, name, simple), DesiredState: unit.Launched})
	}
	return cs
}

// startOnM1 applies changes while m2 drains, so that their units start on
// m1, and waits until all of them are active.
func startOnM1(t *testing.T, e *engine.Engine, changes []engine.Change) {
	t.Helper()
	ctx := context.Background()
	if err := e.DrainMachine(ctx, "m2", true, 0); err != nil {
		t.Fatal(err)
	}
	changes = append(changes, engine.Change{Name: "web@.service", File: parse(t, "web@.service", simple)})
	if err := e.Apply(ctx, changes); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "the units active on m1", func() error {
		placed, err := allActive(e, len(changes))
		if err == nil && len(placed["m1"]) != len(changes)-1 {
			err = fmt.Errorf("placed %v", placed)
		}
		return err
	})
	if err := e.DrainMachine(ctx, "m2", false, 0); err != nil {
		t.Fatal(err)
	}
}

// TestEngineDrain: a drained machine's services start on another machine
// before they stop on it (never zero active copies), one instance of a
// template at a time; its Singleton= unit stops first (never two copies);
// a unit that fits nowhere else stays, running, with its reason. The
// machine takes no new units until the drain is cancelled, and the
// staying unit then loses its reason.
func TestEngineDrain(t *testing.T) { inBubble(t, testEngineDrain) }

func testEngineDrain(t *testing.T) {
	cli := newEtcd(t)
	e := startEngine(t, cli, "grpc", "e1")
	a1 := startAgent(t, cli, "grpc", "m1", "stop=300ms", "start=200ms", "disk=ssd")
	a2 := startAgent(t, cli, "grpc", "m2", "stop=300ms", "start=200ms")
	waitMachines(t, e.Engine, 2)
	ctx := context.Background()
	startOnM1(t, e.Engine, append(append(launch(t, 2, "api"), instances(t, 3)...),
		engine.Change{Name: "solo.service", File: parse(t, "solo.service", simple+"[X-Fleet]\nSingleton=true\n"), DesiredState: unit.Launched},
		engine.Change{Name: "pinned.service", File: parse(t, "pinned.service", simple+"[X-Fleet]\nMachineMetadata=disk=ssd\n"), DesiredState: unit.Launched}))
	services := []string{"api00.service", "api01.service", "web@1.service", "web@2.service", "web@3.service"}
	if err := e.DrainMachine(ctx, "m1", true, 0); err != nil {
		t.Fatal(err)
	}
	waitfor.Watch(t, 20*time.Second, "m1 drained", func() error {
		running, active := copiesOf(a1, a2)
		for _, name := range services {
			if active[name] == 0 {
				t.Fatalf("%s had no active copy during the drain", name)
			}
		}
		if running["solo.service"] > 1 {
			t.Fatal("solo.service (Singleton=) ran on both machines during the drain")
		}
		if running["pinned.service"] != 1 || active["pinned.service"] != 1 {
			t.Fatal("pinned.service, which fits nowhere else, stopped")
		}
		webs := 0
		for i := 1; i <= 3; i++ {
			if running[fmt.Sprintf("web@%d.service", i)] > 1 {
				webs++
			}
		}
		if webs > 1 {
			t.Fatalf("%d instances of web@.service were mid-move at once, want at most 1", webs)
		}
		if placed, err := allActive(e.Engine, 8); err == nil && len(placed["m1"]) == 1 && running["solo.service"] == 1 && len(a1.driver.States()) == 1 {
			return nil
		}
		return fmt.Errorf("m1 still runs %v", a1.driver.States())
	})
	u, err := e.Unit("pinned.service")
	if err != nil {
		t.Fatal(err)
	}
	if want := "machine m1 is draining, and the unit fits nowhere else: "; u.Machine != "m1" || !u.Staying || !strings.HasPrefix(u.Reason, want) {
		t.Errorf("pinned.service: machine %q, staying %v, reason %q; want m1, true, %q...", u.Machine, u.Staying, u.Reason, want)
	}
	waitfor.Until(t, 5*time.Second, "m1's view to show the drain done", func() error {
		if m1 := machineView(t, e.Engine, "m1"); !m1.Draining || m1.Units != 1 || m1.Moving != 0 || len(m1.Staying) != 1 || m1.Staying[0].Name != "pinned.service" {
			return fmt.Errorf("m1 drained: %+v; want draining, 1 unit, none moving, pinned.service staying", m1)
		}
		return nil
	})
	if err := e.Apply(ctx, launch(t, 2, "more")); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "10 units active", func() error { _, err := allActive(e.Engine, 10); return err })
	if placed, _ := allActive(e.Engine, 10); len(placed["m1"]) != 1 {
		t.Fatalf("a draining machine was given units: %v", placed["m1"])
	}
	if err := e.DrainMachine(ctx, "m1", false, 0); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "pinned.service's reason gone with the drain", func() error {
		if u, _ := e.Unit("pinned.service"); u.Reason != "" || u.Staying || u.Machine != "m1" {
			return fmt.Errorf("machine %q, staying %v, reason %q", u.Machine, u.Staying, u.Reason)
		}
		return nil
	})
	if err := e.Apply(ctx, launch(t, 1, "after")); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "the new unit on m1, undrained", func() error {
		placed, err := allActive(e.Engine, 11)
		if err != nil {
			return err
		}
		if len(placed["m1"]) != 2 {
			return fmt.Errorf("m1 runs %v", placed["m1"])
		}
		return nil
	})
}

func machineView(t *testing.T, e *engine.Engine, id string) apiv1.Machine {
	t.Helper()
	ms, err := e.Machines()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.ID == id {
			return m
		}
	}
	t.Fatalf("no machine %s in %v", id, ms)
	return apiv1.Machine{}
}

// TestEngineDrainParallel: drain's maxParallel lets that many instances of
// a template move at once.
func TestEngineDrainParallel(t *testing.T) { inBubble(t, testEngineDrainParallel) }

func testEngineDrainParallel(t *testing.T) {
	cli := newEtcd(t)
	e := startEngine(t, cli, "grpc", "e1")
	a1 := startAgent(t, cli, "grpc", "m1", "stop=300ms", "start=300ms")
	a2 := startAgent(t, cli, "grpc", "m2", "stop=300ms", "start=300ms")
	waitMachines(t, e.Engine, 2)
	ctx := context.Background()
	startOnM1(t, e.Engine, instances(t, 6))
	if err := e.DrainMachine(ctx, "m1", true, 3); err != nil {
		t.Fatal(err)
	}
	if m := machineView(t, e.Engine, "m1"); m.MaxParallel != 3 {
		t.Errorf("m1's maxParallel = %d, want 3", m.MaxParallel)
	}
	most := 0
	waitfor.Until(t, 20*time.Second, "m1 drained", func() error {
		running, _ := copiesOf(a1, a2)
		n := 0
		for name, c := range running {
			if c > 1 {
				n++
			}
			if c == 0 {
				t.Fatalf("%s stopped during the drain", name)
			}
		}
		most = max(most, n)
		if most > 3 {
			t.Fatalf("%d instances mid-move at once, want at most 3", n)
		}
		if len(a1.driver.States()) > 0 {
			return errors.New("m1 still runs units")
		}
		return nil
	})
	if most < 2 {
		t.Errorf("at most %d instances were mid-move at once; maxParallel 3 should have let 3", most)
	}
	if err := e.DrainMachine(ctx, "m1", true, -1); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("DrainMachine(maxParallel -1) = %v, want ErrInvalid", err)
	}
}

// TestEngineHandoverSurvivesLeaderChange: a service handed over by a drain
// whose new copy is slow to start keeps its old copy running through a
// change of leader, until the new copy is active: the handover is in etcd,
// not only in the old leader's memory.
func TestEngineHandoverSurvivesLeaderChange(t *testing.T) {
	for _, reg := range []string{"grpc", "etcd"} {
		t.Run(reg, bubbled(func(t *testing.T) { testEngineHandoverSurvivesLeaderChange(t, reg) }))
	}
}

func testEngineHandoverSurvivesLeaderChange(t *testing.T, reg string) {
	cli := newEtcd(t)
	e1 := startEngine(t, cli, reg, "e1")
	waitLeader(t, e1)
	e2 := startEngine(t, cli, reg, "e2")
	a1 := startAgent(t, cli, reg, "m1", "disk=ssd")
	a2 := startAgent(t, cli, reg, "m2", "start=4s")
	waitMachines(t, e1.Engine, 2)
	ctx := context.Background()
	if err := e1.Apply(ctx, []engine.Change{{Name: "api.service", File: parse(t, "api.service", simple+"[X-Fleet]\nMachineMetadata=disk=ssd\n"), DesiredState: unit.Launched}}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "api.service active on m1", func() error {
		if _, active := copiesOf(a1); active["api.service"] != 1 {
			return errors.New("not active")
		}
		return nil
	})
	// api.service now fits on m2, and m1 drains: it is handed over.
	ssd := "ssd"
	if err := e1.PatchMachine(ctx, "m2", map[string]*string{"disk": &ssd}); err != nil {
		t.Fatal(err)
	}
	if err := e1.DrainMachine(ctx, "m1", true, 0); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 5*time.Second, "the handover to start", func() error {
		if running, _ := copiesOf(a2); running["api.service"] != 1 {
			return errors.New("not starting on m2")
		}
		return nil
	})
	if u, _ := e1.Unit("api.service"); u.Machine != "m2" || u.MovingFrom != "m1" {
		t.Errorf("api.service mid-handover: machine %q, moving from %q; want m2, m1", u.Machine, u.MovingFrom)
	}
	e1.stop() // resigns: e2 leads at once, while m2 still starts api
	waitfor.Watch(t, 15*time.Second, "api.service's handover to end under the new leader", func() error {
		_, active := copiesOf(a1, a2)
		_, on2 := copiesOf(a2)
		if active["api.service"] == 0 {
			t.Fatal("api.service had no active copy while the leader changed mid-handover")
		}
		if on2["api.service"] == 1 && active["api.service"] == 1 {
			return nil
		}
		return fmt.Errorf("%d active copies, %d on m2", active["api.service"], on2["api.service"])
	})
	waitfor.Until(t, 5*time.Second, "the old copy stopped", func() error {
		if running, _ := copiesOf(a1); running["api.service"] != 0 {
			return errors.New("still running on m1")
		}
		return nil
	})
	_ = e2
}

// TestEngineDrainWaitsForHealth: a drained service's old copy stops only
// once its new copy is healthy: one whose check never passes keeps its
// old copy running, while a unit without checks moves.
func TestEngineDrainWaitsForHealth(t *testing.T) { inBubble(t, testEngineDrainWaitsForHealth) }

func testEngineDrainWaitsForHealth(t *testing.T) {
	cli := newEtcd(t)
	e := startEngine(t, cli, "grpc", "e1")
	a1 := startAgent(t, cli, "grpc", "m1")
	a2 := startAgent(t, cli, "grpc", "m2")
	waitMachines(t, e.Engine, 2)
	sick := simple + "[X-Check]\nTCP=127.0.0.1:1\nInterval=100ms\nTimeout=50ms\n"
	startOnM1(t, e.Engine, []engine.Change{
		{Name: "sick.service", File: parse(t, "sick.service", sick), DesiredState: unit.Launched},
		{Name: "fine.service", File: parse(t, "fine.service", simple), DesiredState: unit.Launched},
	})
	if err := e.DrainMachine(context.Background(), "m1", true, 0); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 20*time.Second, "fine.service moved to m2 and sick.service started there", func() error {
		running, active := copiesOf(a1)
		_, active2 := copiesOf(a2)
		if running["fine.service"] != 0 || active2["fine.service"] != 1 || active2["sick.service"] != 1 || active["sick.service"] != 1 {
			return fmt.Errorf("m1 runs %v, m2 runs %v", active, active2)
		}
		return nil
	})
	e.waitPasses(t)
	u, err := e.Unit("sick.service")
	if err != nil {
		t.Fatal(err)
	}
	if _, active := copiesOf(a1); active["sick.service"] != 1 || u.State == nil || u.State.Health == "healthy" {
		t.Fatalf("sick.service: m1 runs %v, its new copy %+v: the old copy must run until the new one is healthy", active, u.State)
	}
}
