package engine

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/flotilla/flotilla/internal/limits"
	"github.com/flotilla/flotilla/internal/machine"
	"github.com/flotilla/flotilla/internal/memetcd"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// feed is one agent stream as the engine's Connect sees it: it hands the
// messages in order, then ends as a closed stream does (io.EOF). What the
// engine sends is dropped. It stands in for gRPC's transport only; the
// handler, the term and etcd are the real ones.
type feed struct {
	grpc.ServerStream
	ctx  context.Context
	msgs []*agentpb.AgentMessage
}

func (f *feed) Context() context.Context { return f.ctx }

func (f *feed) Recv() (*agentpb.AgentMessage, error) {
	if len(f.msgs) == 0 {
		return nil, io.EOF
	}
	m := f.msgs[0]
	f.msgs = f.msgs[1:]
	return m, nil
}

func (f *feed) Send(*agentpb.EngineMessage) error { return nil }
func (f *feed) SetHeader(metadata.MD) error       { return nil }
func (f *feed) SendHeader(metadata.MD) error      { return nil }
func (f *feed) SetTrailer(metadata.MD)            {}

// FuzzAgentMessages: an agent stream of a Hello and two status updates,
// each any bytes as protobuf, with optionally an update of more statuses
// than limits.AgentUnits: the leader never panics; a stream with a Hello
// or an update over a limit ends with InvalidArgument, and a refused
// Hello leaves no machine behind; every state the leader holds has a valid
// unit name and text within the limits; and the term goes on.
//
// It runs the real engine, leading on an embedded etcd, and calls its
// Connect handler in-process with the messages (feed), not over a gRPC
// connection: a connection and stream per execution would cost more than
// the handling they carry. An accepted Hello's machine is renamed to one
// of four, so that a million executions do not leave a million machines
// for the scheduler (their names are checked first, as given).
func FuzzAgentMessages(f *testing.F) {
	st := func(name, active string) *agentpb.UnitStatus {
		return &agentpb.UnitStatus{Name: name, Hash: strings.Repeat("ab", 20), Load: "loaded", Active: active, Sub: "running",
			Pid: 42, SinceUnixNano: 1, Applied: "launched", Message: "ok"}
	}
	hello := func(h *agentpb.Hello) []byte { b, _ := proto.Marshal(h); return b }
	update := func(u *agentpb.StatusUpdate) []byte { b, _ := proto.Marshal(u); return b }
	m1 := &agentpb.Machine{Id: "m1", Ip: "10.0.0.1", Metadata: map[string]string{"disk": "ssd"}, ApiAddr: "10.0.0.1:7480", Version: "1", CpuPercent: 400, MemoryBytes: 1 << 30}
	f.Add(hello(&agentpb.Hello{Machine: m1, Units: []*agentpb.UnitStatus{st("a.service", "active"), st("web@1.service", "failed")}}),
		update(&agentpb.StatusUpdate{Units: []*agentpb.UnitStatus{st("a.service", "inactive")}, Removed: []string{"web@1.service"}}),
		update(&agentpb.StatusUpdate{Units: []*agentpb.UnitStatus{st("b.service", "active")}}), false)
	f.Add(hello(&agentpb.Hello{Machine: &agentpb.Machine{Id: "../m"}}), []byte{}, []byte{}, false)
	f.Add(hello(&agentpb.Hello{Machine: &agentpb.Machine{Id: "m2", Metadata: map[string]string{"k": "a=b", "": "x"}}}), []byte{}, []byte{}, false)
	f.Add(hello(&agentpb.Hello{Machine: &agentpb.Machine{Id: "m2", MemoryBytes: -5}}), []byte{}, []byte{}, false)
	f.Add(hello(&agentpb.Hello{Machine: m1}), update(&agentpb.StatusUpdate{Units: []*agentpb.UnitStatus{st("x.service", "active")}}), []byte{}, true)
	f.Add(hello(&agentpb.Hello{Machine: m1}), update(&agentpb.StatusUpdate{Units: []*agentpb.UnitStatus{{Name: "a b"}}}), []byte{}, false)
	f.Add(hello(&agentpb.Hello{Machine: m1, Units: []*agentpb.UnitStatus{{Name: "a.service", Message: strings.Repeat("é", 3000)}}}), []byte{}, []byte{}, false)
	f.Add([]byte{0xff, 0x01}, []byte{0x0a}, []byte{}, false)

	_, cli := memetcd.Start(f)
	e, err := New(Config{Machine: "e1", Client: cli.Client, ElectionTTL: time.Second, AgentTTL: 5 * time.Second,
		GRPCAddr: "127.0.0.1:1", APIAddr: "127.0.0.1:1"})
	if err != nil {
		f.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	f.Cleanup(func() { cancel(); <-done })
	waitfor.True(f, 10*time.Second, "the engine leads", func() bool { ok, _ := e.IsLeader(); return ok })
	_, rev0 := e.IsLeader()

	f.Fuzz(func(t *testing.T, helloBytes, update1, update2 []byte, huge bool) {
		var h agentpb.Hello
		if proto.Unmarshal(helloBytes, &h) != nil {
			return // gRPC refuses what does not decode
		}
		msgs := []*agentpb.AgentMessage{{Msg: &agentpb.AgentMessage_Hello{Hello: &h}}}
		helloErr := checkHello(&h)
		if helloErr == nil {
			h.Machine.Id = fmt.Sprintf("m%d", len(h.Machine.Id)%4)
		}
		wantInvalid := helloErr != nil
		for i, b := range [][]byte{update1, update2} {
			var u agentpb.StatusUpdate
			if proto.Unmarshal(b, &u) != nil {
				continue
			}
			if huge && i == 0 {
				one := &agentpb.UnitStatus{Name: "a.service"}
				if len(u.Units) > 0 {
					one = u.Units[0]
				}
				u.Units = make([]*agentpb.UnitStatus, limits.AgentUnits+1)
				for j := range u.Units {
					u.Units[j] = one
				}
			}
			wantInvalid = wantInvalid || checkUpdate(&u) != nil
			msgs = append(msgs, &agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Update{Update: &u}})
		}
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		err := e.Connect(&feed{ctx: sctx, msgs: msgs})
		if wantInvalid != (status.Code(err) == codes.InvalidArgument) {
			t.Fatalf("Connect(%v) = %v; want InvalidArgument: %v", msgs[0], err, wantInvalid)
		}
		if id := h.GetMachine().GetId(); helloErr != nil && id != "" && !(len(id) == 2 && id[0] == 'm') { // not one of the renamed

			ms, _ := e.Machines()
			for _, m := range ms {
				if m.ID == id {
					t.Fatalf("refused Hello (%v) left machine %q behind", helloErr, m.ID)
				}
			}
		}
		sts, err := e.UnitStates("", nil)
		if err != nil {
			t.Fatalf("UnitStates: %v", err)
		}
		for _, s := range sts {
			if err := unit.ValidateName(s.Name); err != nil {
				t.Fatalf("the leader holds a state of an invalid unit: %v", err)
			}
			if err := machine.ValidateName(s.Machine); err != nil {
				t.Fatalf("the leader holds a state of %s from an invalid machine: %v", s.Name, err)
			}
			if len(s.Message) > limits.StatusTextBytes || len(s.Result) > limits.StatusTextBytes {
				t.Fatalf("state of %s keeps %d bytes of message", s.Name, len(s.Message))
			}
		}
		if ok, rev := e.IsLeader(); !ok || rev != rev0 {
			t.Fatalf("after the stream IsLeader() = %v, %d; want the same term %d", ok, rev, rev0)
		}
	})
}
