package agent

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// FuzzAssignments: two messages from a leader, each any bytes as an
// EngineMessage, handled by a fresh agent on the sim driver, each followed
// by reconciling until there is nothing left to do: the agent never
// panics; it wants only units whose file parsed, under a valid name, with
// the file's hash and a state it can hold; and once reconciled the driver
// runs exactly what the agent wants.
func FuzzAssignments(f *testing.F) {
	const svc = "[Service]\nExecStart=/bin/sleep infinity\n"
	msg := func(as *agentpb.Assignments) []byte {
		b, _ := proto.Marshal(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: as}, SentMonoNano: 5})
		return b
	}
	full := msg(&agentpb.Assignments{Full: true, LeaderRev: 7, AgentTtlMs: 20000, Units: []*agentpb.Assignment{
		{Name: "a.service", File: svc, DesiredState: "launched"},
		{Name: "b.service", File: svc + "[X-Fleet]\nSingleton=true\nLostAfter=10s\n", DesiredState: "loaded"},
		{Name: "web@1.service", File: svc + "[X-Fleet]\nConflicts=web@*.service\n", DesiredState: "launched", Global: true},
	}})
	f.Add(full, msg(&agentpb.Assignments{Removed: []string{"a.service"}, Units: []*agentpb.Assignment{{Name: "b.service", File: svc, DesiredState: "launched"}}}))
	f.Add(full, msg(&agentpb.Assignments{Full: true}))
	f.Add(msg(&agentpb.Assignments{Units: []*agentpb.Assignment{{Name: "../etc/passwd", File: svc, DesiredState: "launched"}}}), []byte{})
	f.Add(msg(&agentpb.Assignments{Units: []*agentpb.Assignment{{Name: "a.service", File: "[Service\n", DesiredState: "launched"}}}), []byte{})
	f.Add(msg(&agentpb.Assignments{Units: []*agentpb.Assignment{{Name: "a.service", File: svc, DesiredState: "running"}}}), full)
	f.Add(msg(&agentpb.Assignments{Units: []*agentpb.Assignment{{Name: "web@.service", File: svc, DesiredState: "launched"}}}), []byte{})
	hb, _ := proto.Marshal(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Heartbeat{Heartbeat: &agentpb.Heartbeat{UnixNano: 1}}})
	f.Add(hb, []byte{0x0a, 0x02, 0x08, 0x01})

	f.Fuzz(func(t *testing.T, first, second []byte) {
		a, d := newTestAgent(t, 0)
		defer d.Close(context.Background())
		a.adopt()
		for _, b := range [][]byte{first, second} {
			var m agentpb.EngineMessage
			if proto.Unmarshal(b, &m) != nil {
				continue // gRPC refuses what does not decode
			}
			a.received(&m, a.cfg.Mono())
			checkWants(t, a)
			reconcile(t, a)
		}
	})
}

// checkWants checks what the agent wants against the files it keeps.
func checkWants(t *testing.T, a *Agent) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	for name, w := range a.wants {
		f := a.files[name]
		switch {
		case unit.ValidateName(name) != nil:
			t.Fatalf("the agent wants %q: %v", name, unit.ValidateName(name))
		case f == nil || f.Hash != w.Hash:
			t.Fatalf("the agent wants %s with hash %s but keeps file %v", name, w.Hash, f)
		case w.State != unit.Loaded && w.State != unit.Launched:
			t.Fatalf("the agent wants %s %q", name, w.State)
		case unit.IsTemplate(name):
			t.Fatalf("the agent wants template %s to run", name)
		}
	}
}

// reconcile carries out the agent's plan until it is empty (at most three
// passes: an unload, then a load and a start), then checks the driver runs
// what the agent wants.
func reconcile(t *testing.T, a *Agent) {
	t.Helper()
	ctx := context.Background()
	for range 3 {
		a.mu.Lock()
		acts := plan(a.wants, a.haves)
		a.mu.Unlock()
		if len(acts) == 0 {
			break
		}
		var wg sync.WaitGroup
		for _, act := range acts {
			a.do(ctx, act, &wg)
		}
		wg.Wait()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if acts := plan(a.wants, a.haves); len(acts) > 0 {
		t.Fatalf("after three passes the plan still holds %v", acts)
	}
	var want, got []string
	for name := range a.wants {
		want = append(want, name)
	}
	for _, s := range a.cfg.Driver.States() {
		got = append(got, s.Name)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) {
		t.Fatalf("the agent wants %s but the driver has %s", strings.Join(want, " "), strings.Join(got, " "))
	}
}
