package agent

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/flotilla/flotilla/internal/driver/sim"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// BenchmarkAgentUnits is one simulated agent of flotilla bench: an empty
// full set, 100 instances of a template assigned in deltas of 16, then all
// of them stopped, each message carried out and its statuses taken for
// the leader. It measures what the agent spends per unit, without gRPC.
func BenchmarkAgentUnits(b *testing.B) {
	const units, batch = 100, 16
	text := "[Service]\nExecStart=/bin/sleep infinity\n"
	var msgs []*agentpb.EngineMessage
	msg := func(as *agentpb.Assignments) {
		msgs = append(msgs, &agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: as}})
	}
	msg(&agentpb.Assignments{Full: true})
	stop := &agentpb.Assignments{}
	for i := 0; i < units; i += batch {
		as := &agentpb.Assignments{}
		for j := i; j < min(i+batch, units); j++ {
			name := fmt.Sprintf("bench@%06d.service", j)
			as.Units = append(as.Units, &agentpb.Assignment{Name: name, File: text, DesiredState: "launched"})
			stop.Units = append(stop.Units, &agentpb.Assignment{Name: name, File: text, DesiredState: "loaded"})
		}
		msg(as)
	}
	msg(stop)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		a, err := New(Config{Machine: Machine{ID: "m1"}, Leaders: noLeader})
		if err != nil {
			b.Fatal(err)
		}
		d, _ := sim.New(sim.Config{Machine: "m1", Notify: a.Notify})
		a.SetDriver(d)
		a.adopt()
		for _, m := range msgs {
			a.received(m, a.cfg.Mono())
			var wg sync.WaitGroup
			a.pass(ctx, &wg)
			wg.Wait()
			a.takeUpdate()
		}
	}
}
