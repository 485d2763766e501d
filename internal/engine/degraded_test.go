package engine_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flotilla/flotilla/internal/election"
	"github.com/flotilla/flotilla/internal/engine"
	"github.com/flotilla/flotilla/internal/etcdtest"
	"github.com/flotilla/flotilla/internal/memetcd"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// unitsSince returns, per unit, when the agents' drivers last changed its
// state: a restart would change it.
func unitsSince(agents ...*testAgent) map[string]time.Time {
	out := map[string]time.Time{}
	for _, a := range agents {
		for _, s := range a.driver.States() {
			out[a.name+"/"+s.Name] = s.Since
		}
	}
	return out
}

// placement returns each unit's machine as the engine holds it.
func placement(t *testing.T, e *engine.Engine) map[string]string {
	t.Helper()
	us, err := e.Units(nil)
	if err != nil {
		t.Fatalf("Units: %v", err)
	}
	out := map[string]string{}
	for _, u := range us {
		out[u.Name] = u.Machine
	}
	return out
}

// cuttableEtcd returns two clients of an etcd kept in memory: one the test
// cuts off from etcd and joins again (Cut), as a frozen etcd or a dropped
// network would cut it, while etcd goes on (its leases expire), and one
// that always reaches etcd.
func cuttableEtcd(t *testing.T) (*memetcd.Client, *clientv3.Client) {
	t.Helper()
	s, direct := memetcd.Start(t)
	cut := s.Client(context.Background(), "cut")
	t.Cleanup(func() { cut.Close() })
	return cut, direct.Client
}

func waitDegraded(t *testing.T, e *testEngine) time.Time {
	t.Helper()
	var since time.Time
	waitfor.Until(t, 10*time.Second, e.name+" degraded", func() error {
		var ok bool
		if since, ok = e.EtcdUnreachableSince(); !ok {
			return errors.New("not degraded")
		}
		return nil
	})
	return since
}

// TestEngineEtcdUnreachable: a leader cut off from etcd for several
// election TTLs keeps answering reads from memory, saying since when etcd
// is unreachable, refuses writes naming etcd and changes nothing; when etcd
// is back a new term leads with the same units and schedule, and no unit
// restarted.
func TestEngineEtcdUnreachable(t *testing.T) { inBubble(t, testEngineEtcdUnreachable) }

func testEngineEtcdUnreachable(t *testing.T) {
	reg := "grpc"
	px, direct := cuttableEtcd(t)
	cli := px.Client // the engine and the agents, cut off from etcd below
	e1 := startEngine(t, cli, reg, "e1")
	waitLeader(t, e1)
	agents := []*testAgent{startAgent(t, cli, reg, "m1"), startAgent(t, cli, reg, "m2")}
	waitMachines(t, e1.Engine, 2)
	ctx := context.Background()
	if err := e1.Apply(ctx, launch(t, 6, "web")); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "6 units active", func() error { _, err := allActive(e1.Engine, 6); return err })
	before := placement(t, e1.Engine)
	since0 := unitsSince(agents...)
	_, rev0 := e1.IsLeader()
	snap0, err := registry.Load(ctx, direct, registry.Keys{})
	if err != nil {
		t.Fatal(err)
	}

	// Reads are answered throughout: before, during and after the outage.
	stopReads := make(chan struct{})
	readErrs := make(chan error, 1)
	go func() {
		defer close(readErrs)
		for {
			select {
			case <-stopReads:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if us, err := e1.Units(nil); err != nil || len(us) != 6 {
				readErrs <- fmt.Errorf("Units() = %d units, %v", len(us), err)
				return
			}
		}
	}()
	cutAt := time.Now()
	px.Cut(true)
	since := waitDegraded(t, e1)
	t.Logf("degraded %v after etcd was cut off", since.Sub(cutAt).Round(time.Millisecond))
	if since.Before(cutAt) || since.After(time.Now()) {
		t.Errorf("etcd unreachable since %v, want between the cut (%v) and now", since, cutAt)
	}
	// Stay cut until etcd has expired the leases of the cut-off engine
	// and agents (etcd grants at least 2s).
	waitfor.Until(t, 15*time.Second, "etcd to expire the cut-off leases", func() error {
		snap, err := registry.Load(ctx, direct, registry.Keys{})
		if err != nil {
			return err
		}
		cs, _, err := election.Candidates(ctx, direct, registry.Keys{}.Election())
		if err != nil {
			return err
		}
		if len(snap.Machines) != 0 || len(cs) != 0 {
			return fmt.Errorf("machines %v and candidates %v still in etcd", snap.Machines, cs)
		}
		return nil
	})

	if ok, rev := e1.IsLeader(); !ok || rev != rev0 {
		t.Errorf("IsLeader() = %v, %d during the outage, want true, %d (the degraded term)", ok, rev, rev0)
	}
	if got := placement(t, e1.Engine); !maps.Equal(got, before) {
		t.Errorf("Units during the outage place %v, want %v", got, before)
	}
	if _, err := allActive(e1.Engine, 6); err != nil {
		t.Errorf("Units during the outage: %v", err)
	}
	if sts, err := e1.UnitStates("", nil); err != nil || len(sts) != 6 {
		t.Errorf("UnitStates during the outage = %d states, %v; want 6", len(sts), err)
	}
	if ms, err := e1.Machines(); err != nil || len(ms) != 2 {
		t.Errorf("Machines during the outage = %v, %v; want m1 and m2", ms, err)
	}
	if _, err := e1.Scheduler(); err != nil {
		t.Errorf("Scheduler during the outage: %v", err)
	}
	// A read may get the state as it was before and start a fresh one.
	waitfor.Until(t, 5*time.Second, "State during the outage", func() error {
		if st := e1.State(); st == nil || st.EtcdUnreachableSince != since.UTC().Format(time.RFC3339) || len(st.Units) != 6 {
			return fmt.Errorf("state = %+v, want 6 units and etcdUnreachableSince %s", st, since.UTC().Format(time.RFC3339))
		}
		return nil
	})
	if _, _, err := e1.Subscribe(""); err != nil {
		t.Errorf("Events during the outage: %v", err)
	}

	// Writes, no-op writes included, are refused naming etcd.
	web := "web"
	for what, err := range map[string]error{
		"a new unit":    e1.Apply(ctx, launch(t, 1, "new")),
		"a no-op start": e1.Apply(ctx, []engine.Change{{Name: "web00.service", DesiredState: unit.Launched}}),
		"a stop":        e1.Apply(ctx, []engine.Change{{Name: "web01.service", DesiredState: unit.Inactive}}),
		"metadata":      e1.PatchMachine(ctx, "m1", map[string]*string{"role": &web}),
	} {
		eu, ok := errors.AsType[*engine.EtcdUnreachableError](err)
		if !ok || !errors.Is(err, engine.ErrUnavailable) || !strings.Contains(err.Error(), "etcd unreachable since") || eu.MayHaveLanded {
			t.Errorf("%s during the outage: %v, want an EtcdUnreachableError saying nothing was changed", what, err)
		}
	}
	snap, err := registry.Load(ctx, direct, registry.Keys{})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Units) != len(snap0.Units) || !maps.Equal(snap.Schedule, snap0.Schedule) || len(snap.Machines) != 0 {
		t.Errorf("etcd changed during the outage: %d units, schedule %v, machines %v; want %d units, schedule %v",
			len(snap.Units), snap.Schedule, snap.Machines, len(snap0.Units), snap0.Schedule)
	}

	// etcd is back: a new term loads from etcd and leads with the same units.
	px.Cut(false)
	restoredAt := time.Now()
	waitfor.Until(t, 20*time.Second, "a new term leads", func() error {
		if ok, rev := e1.IsLeader(); !ok || rev == rev0 {
			return fmt.Errorf("IsLeader() = %v, %d", ok, rev)
		}
		return nil
	})
	t.Logf("a new term led %v after etcd was back", time.Since(restoredAt).Round(time.Millisecond))
	waitfor.Until(t, 20*time.Second, "a new term with every unit active", func() error {
		ok, rev := e1.IsLeader()
		if !ok || rev == rev0 {
			return fmt.Errorf("IsLeader() = %v, %d", ok, rev)
		}
		if _, degraded := e1.EtcdUnreachableSince(); degraded {
			return errors.New("still degraded")
		}
		_, err := allActive(e1.Engine, 6)
		return err
	})
	close(stopReads)
	if err := <-readErrs; err != nil {
		t.Errorf("a read failed around the outage: %v", err)
	}
	if got := placement(t, e1.Engine); !maps.Equal(got, before) {
		t.Errorf("after the outage units are placed %v, want %v", got, before)
	}
	if got := unitsSince(agents...); !maps.Equal(got, since0) {
		t.Errorf("units changed state across the outage:\n got %v\nwant %v", got, since0)
	}
	if err := e1.Apply(ctx, launch(t, 1, "after")); err != nil {
		t.Errorf("a write after the outage: %v", err)
	}
}

// TestEngineDegradedDeposed: a leader cut off from etcd while another
// engine (which reaches etcd) takes over keeps answering reads as degraded,
// refuses even writes that change nothing, and drops its memory once it
// reaches etcd again and sees the other leader.
func TestEngineDegradedDeposed(t *testing.T) { inBubble(t, testEngineDegradedDeposed) }

func testEngineDegradedDeposed(t *testing.T) {
	reg := "grpc"
	px, direct := cuttableEtcd(t)
	e1 := startEngine(t, px.Client, reg, "e1")
	waitLeader(t, e1)
	e2 := startEngine(t, direct, reg, "e2")
	a := startAgent(t, direct, reg, "m1")
	waitMachines(t, e1.Engine, 1)
	ctx := context.Background()
	if err := e1.Apply(ctx, launch(t, 2, "web")); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "2 units active", func() error { _, err := allActive(e1.Engine, 2); return err })
	since0 := unitsSince(a)

	px.Cut(true)
	waitDegraded(t, e1)
	waitLeader(t, e2)
	waitfor.Until(t, 10*time.Second, "m1 reports to e2", func() error { _, err := allActive(e2.Engine, 2); return err })
	if _, err := e1.Units(nil); err != nil {
		t.Errorf("Units on the degraded, deposed leader: %v", err)
	}
	err := e1.Apply(ctx, []engine.Change{{Name: "web00.service", DesiredState: unit.Launched}})
	if _, ok := errors.AsType[*engine.EtcdUnreachableError](err); !ok {
		t.Errorf("a no-op write on the deposed leader = %v, want an EtcdUnreachableError", err)
	}

	px.Cut(false)
	waitfor.Until(t, 10*time.Second, "e1 drops its degraded term", func() error {
		if ok, _ := e1.IsLeader(); ok {
			return errors.New("e1 still leads")
		}
		return nil
	})
	if ok, _ := e2.IsLeader(); !ok {
		t.Error("e2 does not lead")
	}
	if got := unitsSince(a); !maps.Equal(got, since0) {
		t.Errorf("units changed state: got %v, want %v", got, since0)
	}
}

// TestEngineNoopWriteConfirmed: a leader whose election key is gone (it is
// deposed but its lease still renews, so it has not noticed) does not
// acknowledge a write that changes nothing: it confirms through etcd first.
func TestEngineNoopWriteConfirmed(t *testing.T) { inBubble(t, testEngineNoopWriteConfirmed) }

func testEngineNoopWriteConfirmed(t *testing.T) {
	reg := "grpc"
	cli := newEtcd(t)
	e1 := startEngine(t, cli, reg, "e1")
	waitLeader(t, e1)
	ctx := context.Background()
	f := parse(t, "db.service", simple)
	if err := e1.Apply(ctx, []engine.Change{{Name: "db.service", File: f}}); err != nil {
		t.Fatal(err)
	}
	if err := e1.Apply(ctx, []engine.Change{{Name: "db.service", File: f}}); err != nil {
		t.Fatalf("a no-op write on the leader: %v", err)
	}
	in, _, ok, err := election.Current(ctx, cli, registry.Keys{}.Election())
	if err != nil || !ok {
		t.Fatalf("election.Current = %v, %v", ok, err)
	}
	if _, err := cli.Delete(ctx, in.Key); err != nil {
		t.Fatal(err)
	}
	if err := e1.Apply(ctx, []engine.Change{{Name: "db.service", File: f}}); !errors.Is(err, engine.ErrNotLeader) {
		t.Errorf("a no-op write on a deposed leader = %v, want ErrNotLeader", err)
	}
}

// TestEngineNoopCutOffMember: a leader whose etcd member is cut off from
// its quorum (the two other members of three are gone) does not
// acknowledge a request that changes nothing, even while its lease is
// still known valid: the member would confirm an empty transaction from
// its own copy, while the others may already have elected another leader
// that changed the unit (issue 24). It answers that etcd is unreachable.
func TestEngineNoopCutOffMember(t *testing.T) {
	members := etcdtest.StartCluster(t, 3)
	cli := members[0].Client(t)
	e1 := startEngine(t, cli, "grpc", "e1")
	waitLeader(t, e1)
	ctx := context.Background()
	f := parse(t, "db.service", simple)
	if err := e1.Apply(ctx, []engine.Change{{Name: "db.service", File: f}}); err != nil {
		t.Fatal(err)
	}
	members[1].Stop()
	members[2].Stop()
	actx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	err := e1.Apply(actx, []engine.Change{{Name: "db.service", File: f}})
	if err == nil {
		t.Fatal("a no-op write on a leader whose etcd member lost its quorum was acknowledged")
	}
	if _, ok := errors.AsType[*engine.EtcdUnreachableError](err); !ok {
		t.Errorf("a no-op write on a leader whose etcd member lost its quorum = %v, want an *EtcdUnreachableError", err)
	}
}

// TestEngineOversizedRecords: a request that would write a record too large
// for etcd is refused as invalid, naming the record and both sizes, before
// anything is written; the leader's term goes on.
func TestEngineOversizedRecords(t *testing.T) {
	reg := "grpc"
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	e1 := startEngine(t, cli, reg, "e1")
	startAgent(t, cli, reg, "m1")
	waitMachines(t, e1.Engine, 1)
	_, rev0 := e1.IsLeader()
	ctx := context.Background()
	big := strings.Repeat("x", 1800_000)
	err := e1.PatchMachine(ctx, "m1", map[string]*string{"blob": &big})
	if !errors.Is(err, engine.ErrInvalid) || !errors.Is(err, registry.ErrTooLarge) {
		t.Errorf("PatchMachine with a 1.8 MB value = %v, want ErrInvalid and registry.ErrTooLarge", err)
	}
	for _, want := range []string{"machine m1", `"blob" is 1800000 bytes`, "1048576 bytes"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("PatchMachine error %q does not mention %q", err, want)
		}
	}
	// A unit file under the file size limit whose record, escaped in JSON,
	// is over the record limit.
	var text strings.Builder
	text.WriteString(simple)
	for range 120 {
		text.WriteString("# " + strings.Repeat("<", 2000) + "\n")
	}
	err = e1.Apply(ctx, []engine.Change{{Name: "big.service", File: parse(t, "big.service", text.String())}})
	if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "unit big.service") {
		t.Errorf("Apply of a unit whose record is over the limit = %v, want ErrInvalid naming it", err)
	}
	if ok, rev := e1.IsLeader(); !ok || rev != rev0 {
		t.Errorf("after oversized requests IsLeader() = %v, %d; want the same term %d", ok, rev, rev0)
	}
	snap, err := registry.Load(ctx, cli, registry.Keys{})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Units) != 0 || len(snap.Machines) != 0 {
		t.Errorf("etcd holds %d units and machines %v after refused requests, want nothing", len(snap.Units), snap.Machines)
	}
	small := "ssd"
	if err := e1.PatchMachine(ctx, "m1", map[string]*string{"disk": &small}); err != nil {
		t.Errorf("a small patch after the refused one: %v", err)
	}
}

// TestEngineElectionOwnConnection: the election has its own etcd
// connection (Config.ElectionClient), so a leader whose data connection
// is stalled for several election TTLs (as by a million-unit write) keeps
// its lease: the same term leads throughout, answering reads as current,
// and writes again once the connection moves.
func TestEngineElectionOwnConnection(t *testing.T) { inBubble(t, testEngineElectionOwnConnection) }

func testEngineElectionOwnConnection(t *testing.T) {
	px, direct := cuttableEtcd(t) // the engine's writes, reads and watches; its election
	e, err := engine.New(engine.Config{Machine: "e1", Client: px.Client, ElectionClient: direct, ElectionTTL: time.Second,
		AgentTTL: agentTTL, GRPCAddr: "127.0.0.1:1", APIAddr: "127.0.0.1:1", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	te := &testEngine{Engine: e, name: "e1"}
	waitLeader(t, te)
	if err := e.Apply(context.Background(), launch(t, 3, "web")); err != nil {
		t.Fatal(err)
	}
	_, rev0 := e.IsLeader()

	px.Cut(true) // the data connection stalls; etcd and the election's connection do not
	cutAt := time.Now()
	// Nothing tells that the engine would have been deposed by now but
	// time: the term is watched for 4 TTLs.
	waitfor.Holds(t, 4*time.Second, "the term while only the data connection stalls", func() error {
		if ok, rev := e.IsLeader(); !ok || rev != rev0 {
			return fmt.Errorf("IsLeader() = %v, %d %v after the stall, want true, %d", ok, rev, time.Since(cutAt).Round(time.Millisecond), rev0)
		}
		if since, degraded := e.EtcdUnreachableSince(); degraded {
			return fmt.Errorf("degraded (etcd unreachable since %v)", since)
		}
		if us, err := e.Units(nil); err != nil || len(us) != 3 {
			return fmt.Errorf("Units() = %d units, %v", len(us), err)
		}
		return nil
	})
	px.Cut(false)
	if err := e.Apply(context.Background(), launch(t, 1, "after")); err != nil {
		t.Fatalf("a write once the data connection moves: %v", err)
	}
	if ok, rev := e.IsLeader(); !ok || rev != rev0 {
		t.Errorf("IsLeader() = %v, %d after the stall, want the same term %d", ok, rev, rev0)
	}
}
