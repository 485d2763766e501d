package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/machine"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// TestEmbeddedMaxTxnOps: --etcd-max-txn-ops reaches the embedded etcd
// member, so a transaction of that many ops commits (etcd's default is
// 128), and a batch that large commits through the API without ending the
// leader's term.
func TestEmbeddedMaxTxnOps(t *testing.T) {
	ready := make(chan Addrs, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Name: "n1", DataDir: t.TempDir(), APIAddr: "127.0.0.1:0", EtcdEmbed: true,
			EtcdClientAddr: "127.0.0.1:0", EtcdPeerAddr: "127.0.0.1:0", NoAgent: true, MaxTxnOps: 512,
			ElectionTTL: time.Second, AgentTTL: 5 * time.Second,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Ready: func(a Addrs) { ready <- a }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	var addrs Addrs
	select {
	case addrs = <-ready:
	case err := <-done:
		t.Fatalf("daemon did not start: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("daemon not ready within 60s")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + addrs.EtcdClient}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	txn := func(n int) error {
		ops := make([]clientv3.Op, n)
		for i := range ops {
			ops[i] = clientv3.OpPut(fmt.Sprintf("/test/%d/%d", n, i), "x")
		}
		tctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := cli.Txn(tctx).Then(ops...).Commit()
		return err
	}
	if err := txn(512); err != nil {
		t.Fatalf("a 512-op transaction on a member started with --etcd-max-txn-ops 512: %v", err)
	}
	if err := txn(513); err == nil || !strings.Contains(err.Error(), "too many operations") {
		t.Errorf("a 513-op transaction = %v, want etcd refusing too many operations", err)
	}

	// Through the API: 512 units in one batch, one transaction, same term.
	api := "http://" + addrs.API
	status := func() apiv1.Status {
		t.Helper()
		var st apiv1.Status
		waitfor.Until(t, 10*time.Second, "a leader", func() error {
			resp, err := http.Get(api + "/v1/status")
			if err != nil {
				return err
			}
			st = apiv1.Status{}
			json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if !st.IsLeader {
				return fmt.Errorf("%+v", st)
			}
			return nil
		})
		return st
	}
	before := status()
	var b apiv1.Batch
	for i := range 512 {
		b.Units = append(b.Units, apiv1.UnitChange{Name: fmt.Sprintf("u%03d.service", i), File: "[Service]\nExecStart=/bin/true\n"})
	}
	body, _ := json.Marshal(b)
	resp, err := http.Post(api+"/v1/batch", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/batch of 512 units: %s: %s", resp.Status, msg)
	}
	if after := status(); after.ElectionRev != before.ElectionRev {
		t.Errorf("the leader's term changed from %d to %d during a 512-op commit", before.ElectionRev, after.ElectionRev)
	}
}

// TestValidateMachineOnlyRunsUnits: --servers makes a machine that only
// runs units, which reaches no etcd; and no machine offers units more CPU
// or memory than its host has.
func TestValidateMachineOnlyRunsUnits(t *testing.T) {
	host := machine.Detect()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Servers: []string{"127.0.0.1:7481"}, EtcdEmbed: true}, "--servers and --etcd-embed"},
		{Config{Servers: []string{"127.0.0.1:7481"}, Registry: "etcd"}, "--registry etcd"},
		{Config{Servers: []string{"127.0.0.1:7481"}, NoAgent: true}, "--no-agent"},
		{Config{Servers: []string{"s1"}}, `--servers "s1"`},
		{Config{}, "--servers ADDR"},
		{Config{Servers: []string{"127.0.0.1:7481"}, Capacity: machine.Capacity{CPUPercent: host.CPUPercent + 100}}, "--capacity-cpu"},
		{Config{Servers: []string{"127.0.0.1:7481"}, Capacity: machine.Capacity{MemoryBytes: host.MemoryBytes + 1}}, "--capacity-memory"},
	} {
		tc.cfg.Name, tc.cfg.DataDir = "a1", t.TempDir()
		if err := tc.cfg.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("validate(%+v) = %v, want an error naming %q", tc.cfg, err, tc.want)
		}
	}
	ok := Config{Name: "a1", DataDir: t.TempDir(), Servers: []string{"127.0.0.1:7481"}}
	if err := ok.validate(); err != nil || !ok.NoEngine {
		t.Errorf("validate(--servers) = %v, NoEngine %v; want nil, true", err, ok.NoEngine)
	}
	sim := Config{Name: "a1", DataDir: t.TempDir(), Servers: []string{"127.0.0.1:7481"}, Driver: "sim", Capacity: machine.Capacity{CPUPercent: host.CPUPercent * 10}}
	if err := sim.validate(); err != nil {
		t.Errorf("validate(sim driver, 10x the host's CPUs) = %v, want nil (sim units use nothing)", err)
	}
}
