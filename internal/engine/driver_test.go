package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flotilla/flotilla/internal/metrics"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/unit"
)

// coreTerm is a term's core with no driver and no etcd: a test steps it
// and plays the driver, performing (or failing) the txns it queues.
func coreTerm(t *testing.T) *term {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	now := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	return &term{
		e: &Engine{cfg: Config{Now: func() time.Time { return now }, Metrics: metrics.New(), Registry: registry.ModeGRPC},
			log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		ctx: ctx, cancel: cancel, now: now,
		committer:     registry.NewCommitter(nil, clientv3.Cmp{}, registry.CommitterConfig{}),
		deg:           newDegradation(),
		events:        newEventLog(0, ctx.Done()),
		inbox:         newInboxes(),
		decisionState: newDecisionState(),
	}
}

// takeTxn returns the one txn the core queued.
func takeTxn(t *testing.T, tm *term) *txn {
	t.Helper()
	if len(tm.outbox) != 1 {
		t.Fatalf("the core queued %d txns, want 1", len(tm.outbox))
	}
	tx := tm.outbox[0]
	tm.outbox = nil
	return tx
}

func opKeys(tx *txn) string {
	var keys []string
	for _, s := range tx.stages {
		for _, op := range s {
			keys = append(keys, op.Key)
		}
	}
	return strings.Join(keys, " ")
}

// The core decides and asks; it changes nothing and answers nobody until
// the driver steps it with its write's outcome: a request is acknowledged
// only once durable, and a failed write leaves memory as it was.
func TestCoreWaitsForItsWrite(t *testing.T) {
	f, err := unit.Parse("web@1.service", []byte("[Service]\nExecStart=/bin/true\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		err  error
	}{{"written", nil}, {"failed", errors.New("etcd said no")}} {
		t.Run(tc.name, func(t *testing.T) {
			tm := coreTerm(t)
			req := &applyReq{w: &unitsWrite{changes: []Change{{Name: "web@1.service", File: f, DesiredState: unit.Launched}}, by: "test"},
				res: make(chan applyRes, 1), queued: tm.now}
			after := false
			tm.applyRound([]*applyReq{req}, func() { after = true })
			tx := takeTxn(t, tm)
			if keys := opKeys(tx); !strings.Contains(keys, "units/web@1.service") || !strings.Contains(keys, "files/") {
				t.Errorf("the round's txn writes %s; want the unit's record and its file", keys)
			}
			if len(tx.stages) < 2 || len(tx.stages[len(tx.stages)-2]) == 0 {
				t.Errorf("the unit's file is not written in a stage before its record: %d stages", len(tx.stages))
			}
			if _, ok := tm.units["web@1.service"]; ok || after || len(req.res) != 0 {
				t.Fatalf("before its write's outcome the core applied the round (%v), finished it (%v) or answered (%d)", ok, after, len(req.res))
			}
			landed := len(tx.stages)
			if tc.err != nil {
				landed = len(tx.stages) - 1 // the file landed, the record did not
			}
			tx.then(landed, tc.err)
			for len(tm.outbox) > 0 { // whatever follows (files no unit names): written
				tx := takeTxn(t, tm)
				tx.then(len(tx.stages), nil)
			}
			if !after {
				t.Error("the round did not finish")
			}
			if len(req.res) != 1 {
				t.Fatal("the round did not answer its request")
			}
			res := <-req.res
			_, applied := tm.units["web@1.service"]
			if !errors.Is(res.err, tc.err) || applied != (tc.err == nil) {
				t.Errorf("answered %v, applied %v; want %v, %v", res.err, applied, tc.err, tc.err == nil)
			}
			if r := tm.units["web@1.service"]; r != nil {
				if f := tm.store.files[r.content]; f == nil || !f.stored {
					t.Error("the file the txn stored is not marked stored")
				}
			}
		})
	}
}
