package engine

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flotilla/flotilla/internal/memetcd"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// TestFreshTermChecksNothing: the term's check of every placed unit
// against its machine is for what a former term placed; the first leader
// of an empty cluster has none, and does not check the units it places
// itself (a million, in 61 passes, while they reported their states).
func TestFreshTermChecksNothing(t *testing.T) { synctest.Test(t, testFreshTermChecksNothing) }

func testFreshTermChecksNothing(t *testing.T) {
	_, cli := memetcd.Start(t)
	e, err := New(Config{Machine: "e1", Client: cli.Client, ElectionTTL: time.Second, AgentTTL: 5 * time.Second,
		GRPCAddr: "127.0.0.1:1", APIAddr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitfor.True(t, 10*time.Second, "the engine leads", func() bool { return e.leader() != nil })
	tm := e.leader()
	rechecked, err := readOnLoop(tm, func() (bool, error) { return tm.rechecked, nil })
	if err != nil {
		t.Fatal(err)
	}
	if !rechecked {
		t.Error("a term that loaded no placed unit has its check of placed units to do")
	}
}
