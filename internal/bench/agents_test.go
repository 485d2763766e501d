package bench

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/flotilla/flotilla/internal/election"
)

func TestLeaderFeed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		src := make(chan election.Info)
		f := newLeaderFeed(ctx, src)

		early := f.subscribe(ctx)
		synctest.Wait()
		select {
		case in := <-early:
			t.Fatalf("a subscriber got %+v before any leader was observed", in)
		default:
		}

		a := election.Info{Machine: "engine1", GRPCAddr: "127.0.0.1:1", Rev: 5}
		src <- a
		synctest.Wait()
		if got := <-early; got != a {
			t.Errorf("early subscriber got %+v, want %+v", got, a)
		}
		late := f.subscribe(ctx)
		if got := <-late; got != a {
			t.Errorf("late subscriber got %+v, want the current leader %+v at once", got, a)
		}

		// A subscriber that does not read keeps only the latest leader.
		b := election.Info{Machine: "engine2", Rev: 9}
		c := election.Info{Machine: "engine3", Rev: 12}
		src <- b
		src <- c
		synctest.Wait()
		if got := <-late; got != c {
			t.Errorf("slow subscriber got %+v, want the latest %+v", got, c)
		}
		select {
		case in := <-late:
			t.Errorf("slow subscriber got a stale %+v too", in)
		default:
		}

		// Ending a subscription closes its channel and leaves the others.
		sctx, scancel := context.WithCancel(ctx)
		gone := f.subscribe(sctx)
		<-gone
		scancel()
		synctest.Wait()
		if _, ok := <-gone; ok {
			t.Error("a cancelled subscription's channel is still open")
		}

		// The end of the source closes every channel, and later ones.
		close(src)
		synctest.Wait()
		for _, ch := range []<-chan election.Info{early, late} {
			for range ch {
			}
		}
		if _, ok := <-f.subscribe(ctx); ok {
			t.Error("a subscription after the feed ended got a value")
		}
	})
}

func TestAgentsConfig(t *testing.T) {
	cfg := AgentsConfig{Count: 100, EtcdEndpoints: []string{"http://127.0.0.1:2379"}}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	if got := cfg.AgentName(1); got != "sim-001" {
		t.Errorf("AgentName(1) = %q, want sim-001", got)
	}
	if got := cfg.AgentName(100); got != "sim-100" {
		t.Errorf("AgentName(100) = %q, want sim-100", got)
	}
	cfg = AgentsConfig{Count: 500, First: 501, Width: 4, Prefix: "m", EtcdEndpoints: []string{"x"}}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	if got := cfg.AgentName(501); got != "m0501" {
		t.Errorf("AgentName(501) = %q, want m0501", got)
	}

	for _, tt := range []struct {
		cfg  AgentsConfig
		want string
	}{
		{AgentsConfig{Count: 0, EtcdEndpoints: []string{"x"}}, "--count 0"},
		{AgentsConfig{Count: MaxAgentsPerProcess + 1, EtcdEndpoints: []string{"x"}}, "--count"},
		{AgentsConfig{Count: 1}, "--etcd-endpoints"},
		{AgentsConfig{Count: 1, Registry: "zk", EtcdEndpoints: []string{"x"}}, `--registry "zk"`},
		{AgentsConfig{Count: 1, SimFailureRate: 2, EtcdEndpoints: []string{"x"}}, "--sim-failure-rate"},
		{AgentsConfig{Count: 1, SimStartDelay: -1, EtcdEndpoints: []string{"x"}}, "--sim-start-delay"},
		{AgentsConfig{Count: 1, First: -1, EtcdEndpoints: []string{"x"}}, "--first"},
	} {
		err := tt.cfg.validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("validate(%+v) = %v, want an error naming %s", tt.cfg, err, tt.want)
		}
	}
}
