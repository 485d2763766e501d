package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flotilla/flotilla/internal/agent"
	"github.com/flotilla/flotilla/internal/driver/sim"
	"github.com/flotilla/flotilla/internal/election"
	"github.com/flotilla/flotilla/internal/engine"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/version"
	"github.com/flotilla/flotilla/internal/waitfor"
)

func storedSchema(t *testing.T, cli *clientv3.Client) string {
	t.Helper()
	resp, err := cli.Get(context.Background(), registry.Keys{}.Schema())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// TestEngineSchema: a leader taking office over data of schema 1 (no
// schema key) migrates it to its own schema and loads it; an engine that
// finds a newer schema, before it campaigns or once it has won, does not
// lead and says why, naming both versions; it leads once the schema is
// one it can.
func TestEngineSchema(t *testing.T) { inBubble(t, testEngineSchema) }

func testEngineSchema(t *testing.T) {
	engine.SetSchemaRecheck(t, 200*time.Millisecond)
	cli := newEtcd(t)
	ctx := context.Background()
	keys := registry.Keys{}
	own := strconv.Itoa(version.SchemaVersion)
	newer := strconv.Itoa(version.SchemaVersion + 1)

	// Data of a release before schema versions: a unit record, no key.
	if _, err := cli.Put(ctx, keys.Unit("old.service"), `{"file":"[Service]\nExecStart=/bin/true\n","desiredState":"loaded"}`); err != nil {
		t.Fatal(err)
	}
	a := startEngine(t, cli, "grpc", "a")
	waitLeader(t, a)
	if got := storedSchema(t, cli); got != own {
		t.Errorf("schema key after the first leader took office: %q, want %q", got, own)
	}
	if _, err := a.Unit("old.service"); err != nil {
		t.Errorf("the migrated leader lost the unit of schema 1: %v", err)
	}

	// A standby that finds a newer schema once it has won.
	b := startEngine(t, cli, "grpc", "b")
	waitfor.Until(t, 10*time.Second, "b campaigns", func() error {
		resp, err := cli.Get(ctx, keys.Election(), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count < 2 {
			return fmt.Errorf("%d candidates (%v)", resp.Count, err)
		}
		return nil
	})
	if _, err := cli.Put(ctx, keys.Schema(), newer); err != nil { // as a newer leader would have
		t.Fatal(err)
	}
	a.stop()
	want := fmt.Sprintf("etcd holds schema %s; this binary (%s, schema %s) cannot lead it: upgrade this machine", newer, version.Get().Short(), own)
	refused := func(e *testEngine) func() error {
		return func() error {
			if err := e.Refused(); err == nil || err.Error() != want {
				return fmt.Errorf("Refused() = %v, want %q", err, want)
			}
			return nil
		}
	}
	waitfor.Until(t, 15*time.Second, "b refuses to lead", refused(b))
	// It does not lead, nor stand: no candidate is left in the election.
	waitfor.Until(t, 10*time.Second, "b leaves the election", func() error {
		resp, err := cli.Get(ctx, keys.Election(), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count != 0 {
			return fmt.Errorf("%d candidates (%v)", resp.Count, err)
		}
		return nil
	})
	if ok, _ := b.IsLeader(); ok {
		t.Fatal("b leads data of a newer schema")
	}
	if got := storedSchema(t, cli); got != newer {
		t.Errorf("the schema key after b refused: %q, want %q unchanged", got, newer)
	}

	// An engine started now does not campaign at all.
	c := startEngine(t, cli, "grpc", "c")
	waitfor.Until(t, 10*time.Second, "c refuses to lead", refused(c))
	if resp, err := cli.Get(ctx, keys.Election(), clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Errorf("%d candidates after c refused (%v), want none", resp.Count, err)
	}

	// The schema rolled back (a restored backup): they lead again.
	if _, err := cli.Put(ctx, keys.Schema(), own); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 15*time.Second, "b or c leads", func() error {
		if leaderOf(b, c) == nil {
			return errors.New("neither leads")
		}
		if b.Refused() != nil || c.Refused() != nil {
			return fmt.Errorf("refusals remain: %v, %v", b.Refused(), c.Refused())
		}
		return nil
	})
}

// TestEngineProtocolWindow: the leader refuses an agent whose protocol is
// outside its window, with both versions in the error the agent's Run
// returns; an agent one protocol ahead joins.
func TestEngineProtocolWindow(t *testing.T) { inBubble(t, testEngineProtocolWindow) }

func testEngineProtocolWindow(t *testing.T) {
	cli := newEtcd(t)
	e := startEngine(t, cli, "grpc", "e1")
	waitLeader(t, e)
	run := func(name string, protocol int) (*agent.Agent, context.CancelFunc, chan error) {
		a, err := agent.New(agent.Config{Machine: agent.Machine{ID: name, IP: "127.0.0.1", Version: "9.9.9+future", Protocol: protocol}, TTL: agentTTL,
			Logger: testLogger(t), DialOptions: dialOptions(t),
			Leaders: func(ctx context.Context) <-chan election.Info {
				return election.Observe(ctx, cli, registry.Keys{}.Election())
			}})
		if err != nil {
			t.Fatal(err)
		}
		d, err := sim.New(sim.Config{Machine: name, Notify: a.Notify})
		if err != nil {
			t.Fatal(err)
		}
		a.SetDriver(d)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		return a, cancel, done
	}
	far := version.MaxProtocolVersion + 6
	_, _, done := run("far", far)
	select {
	case err := <-done:
		done <- err // for the cleanup
		if !errors.Is(err, agent.ErrIncompatible) {
			t.Fatalf("Run of an agent at protocol %d: %v, want ErrIncompatible", far, err)
		}
		for _, s := range []string{
			fmt.Sprintf("machine far (9.9.9+future, protocol %d)", far),
			fmt.Sprintf("leader e1 (%s, protocol %d)", version.Get().Short(), version.ProtocolVersion),
			"accepts protocol " + version.ProtocolWindow().String(),
			"upgrade leader e1",
		} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("refusal %q does not say %q", err, s)
			}
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("an agent at protocol %d was not refused within 15s", far)
	}

	run("next", version.ProtocolVersion+1)
	waitfor.Until(t, 10*time.Second, "the agent one protocol ahead joins", func() error {
		ms, err := e.Machines()
		if err != nil || len(ms) != 1 || ms[0].ID != "next" || ms[0].Protocol != version.ProtocolVersion+1 || ms[0].Version != "9.9.9+future" {
			return fmt.Errorf("machines %+v (%v)", ms, err)
		}
		return nil
	})
}

// TestEngineProtocolWindowEtcd: in the etcd registry mode the leader takes
// a machine outside its protocol window for absent.
func TestEngineProtocolWindowEtcd(t *testing.T) { inBubble(t, testEngineProtocolWindowEtcd) }

func testEngineProtocolWindowEtcd(t *testing.T) {
	cli := newEtcd(t)
	e := startEngine(t, cli, "etcd", "e1")
	waitLeader(t, e)
	start := func(name string, protocol int) {
		a, err := agent.New(agent.Config{Machine: agent.Machine{ID: name, IP: "127.0.0.1", Protocol: protocol}, TTL: agentTTL,
			Registry: "etcd", Etcd: cli, Logger: testLogger(t), DialOptions: dialOptions(t)})
		if err != nil {
			t.Fatal(err)
		}
		d, err := sim.New(sim.Config{Machine: name, Notify: a.Notify})
		if err != nil {
			t.Fatal(err)
		}
		a.SetDriver(d)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	start("far", version.MaxProtocolVersion+6)
	waitfor.Until(t, 10*time.Second, "far's presence in etcd", func() error {
		resp, err := cli.Get(context.Background(), registry.Keys{}.Presence("far"), clientv3.WithCountOnly())
		if err != nil || resp.Count != 1 {
			return fmt.Errorf("%d keys (%v)", resp.Count, err)
		}
		return nil
	})
	// The leader reads presences in the order etcd wrote them: once it
	// lists the machine that came second, it has judged the first.
	start("near", version.ProtocolVersion)
	waitfor.Until(t, 10*time.Second, "near listed, far not", func() error {
		ms, err := e.Machines()
		if err != nil || len(ms) != 1 || ms[0].ID != "near" {
			return fmt.Errorf("machines %+v (%v)", ms, err)
		}
		return nil
	})
}
