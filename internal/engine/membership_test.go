package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flotilla/flotilla/internal/agent"
	"github.com/flotilla/flotilla/internal/driver/sim"
	"github.com/flotilla/flotilla/internal/election"
	"github.com/flotilla/flotilla/internal/engine"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// memberAgent is an agent whose Run error the test reads.
type memberAgent struct {
	*agent.Agent
	driver *sim.Driver
	cancel context.CancelFunc
	err    chan error // Run's result
}

func runMember(t *testing.T, cli *clientv3.Client, reg, name, ip, instance string) *memberAgent {
	t.Helper()
	a, err := agent.New(agent.Config{Machine: agent.Machine{ID: name, IP: ip, APIAddr: ip + ":7480", Instance: instance}, TTL: agentTTL,
		Registry: reg, Etcd: cli, Logger: testLogger(t), DialOptions: dialOptions(t),
		Leaders: func(ctx context.Context) <-chan election.Info {
			return election.Observe(ctx, cli, registry.Keys{}.Election())
		}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := sim.New(sim.Config{Machine: name, Notify: a.Notify, StopDelay: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	a.SetDriver(d)
	ctx, cancel := context.WithCancel(context.Background())
	m := &memberAgent{Agent: a, driver: d, cancel: cancel, err: make(chan error, 1)}
	go func() { m.err <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-m.err:
		case <-time.After(10 * time.Second):
			t.Errorf("agent %s did not stop", name)
		}
	})
	return m
}

const (
	instA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	instB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// TestEngineNameInUse: a daemon whose machine name is live in the cluster
// with another instance (another data dir: another machine) is refused,
// naming the machine that holds it; the same instance (the same daemon
// restarted) takes its machine over.
func TestEngineNameInUse(t *testing.T) {
	for _, reg := range []string{"grpc", "etcd"} {
		t.Run(reg, bubbled(func(t *testing.T) {
			cli := newEtcd(t)
			e := startEngine(t, cli, reg, "e1")
			first := runMember(t, cli, reg, "m1", "10.0.0.1", instA)
			waitMachines(t, e.Engine, 1)

			other := runMember(t, cli, reg, "m1", "10.0.0.2", instB)
			select {
			case err := <-other.err:
				if !errors.Is(err, agent.ErrNameInUse) || !strings.Contains(err.Error(), "10.0.0.1") || !strings.Contains(err.Error(), "10.0.0.1:7480") {
					t.Fatalf("second m1's Run = %v, want ErrNameInUse naming 10.0.0.1 and its API", err)
				}
				other.err <- err // for the cleanup
			case <-time.After(10 * time.Second):
				t.Fatal("a second daemon named m1 (another instance) was not refused")
			}
			if ms, _ := e.Machines(); len(ms) != 1 || ms[0].IP != "10.0.0.1" {
				t.Fatalf("machines = %+v, want m1 at 10.0.0.1 only", ms)
			}

			// The same instance (a restart on the same data dir) is let in
			// while the first still runs, and keeps the machine once the
			// first is gone.
			again := runMember(t, cli, reg, "m1", "10.0.0.3", instA)
			first.cancel()
			waitfor.Until(t, 10*time.Second, "m1 held by the restarted daemon", func() error {
				if ms, _ := e.Machines(); len(ms) != 1 || ms[0].IP != "10.0.0.3" {
					return fmt.Errorf("machines %+v", ms)
				}
				return nil
			})
			select {
			case err := <-again.err:
				t.Fatalf("the restarted m1 (same instance) ended: %v", err)
			default:
			}
		}))
	}
}

// TestEngineLeave: an agent that leaves (daemon --stop-units-on-exit) stops
// its units, its machine and states are dropped, and its units, singletons
// and LostAfter=infinity included, run elsewhere at once: not after a TTL.
func TestEngineLeave(t *testing.T) {
	for _, reg := range []string{"grpc", "etcd"} {
		t.Run(reg, bubbled(func(t *testing.T) {
			cli := newEtcd(t)
			e := startEngine(t, cli, reg, "e1")
			m1 := runMember(t, cli, reg, "m1", "10.0.0.1", instA)
			waitMachines(t, e.Engine, 1)
			ctx := context.Background()
			files := map[string]string{
				"web.service":   simple,
				"db.service":    simple + "[X-Fleet]\nSingleton=true\n",
				"batch.service": simple + "[X-Fleet]\nLostAfter=infinity\n",
			}
			var cs []engine.Change
			for name, text := range files {
				cs = append(cs, engine.Change{Name: name, File: parse(t, name, text), DesiredState: unit.Launched})
			}
			if err := e.Apply(ctx, cs); err != nil {
				t.Fatal(err)
			}
			waitfor.Until(t, 10*time.Second, "units active on m1", func() error {
				per, err := allActive(e.Engine, 3)
				if err == nil && len(per["m1"]) != 3 {
					err = fmt.Errorf("per machine %v", per)
				}
				return err
			})
			m2 := runMember(t, cli, reg, "m2", "10.0.0.2", instB)
			waitMachines(t, e.Engine, 2)

			lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if err := m1.Leave(lctx); err != nil {
				t.Fatalf("Leave: %v", err)
			}
			if st := m1.driver.States(); len(st) != 0 {
				t.Errorf("m1's driver still has %v after Leave", st)
			}
			select {
			case err := <-m1.err:
				if err != nil {
					t.Errorf("m1's Run after Leave = %v, want nil", err)
				}
				m1.err <- err
			case <-time.After(10 * time.Second):
				t.Error("m1's Run did not return after Leave")
			}
			// Leave returned once the records in etcd no longer name m1;
			// the leader's memory follows when its commit returns, a
			// moment after the agent may have read them.
			waitfor.Until(t, 5*time.Second, "no unit on m1 after Leave", func() error {
				us, err := e.Units(nil)
				if err != nil {
					return err
				}
				for _, u := range us {
					if u.Machine == "m1" || (u.State != nil && u.State.Machine == "m1") {
						return fmt.Errorf("unit %s is on %q with state from %+v", u.Name, u.Machine, u.State)
					}
				}
				return nil
			})
			waitfor.Until(t, 10*time.Second, "units active on m2, m1 gone", func() error {
				per, err := allActive(e.Engine, 3)
				if err == nil && len(per["m2"]) != 3 {
					err = fmt.Errorf("per machine %v", per)
				}
				if ms, _ := e.Machines(); err == nil && len(ms) != 1 {
					err = fmt.Errorf("machines %+v, want m2 alone", ms)
				}
				return err
			})
			if n := len(m2.driver.States()); n != 3 {
				t.Errorf("m2's driver has %d units, want 3", n)
			}
		}))
	}
}
