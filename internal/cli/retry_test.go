package cli_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/cli"
	"github.com/flotilla/flotilla/internal/daemon"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// daemonRun runs a daemon with cfg until the returned stop is called (or
// the test ends) and returns its addresses once it serves.
func daemonRun(t *testing.T, cfg daemon.Config) (daemon.Addrs, func()) {
	t.Helper()
	cfg.APIAddr = "127.0.0.1:0"
	cfg.ElectionTTL, cfg.AgentTTL = time.Second, 5*time.Second
	cfg.Logger = slog.New(slog.DiscardHandler)
	ready := make(chan daemon.Addrs, 1)
	cfg.Ready = func(a daemon.Addrs) { ready <- a }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.Run(ctx, cfg) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon %s: %v", cfg.Name, err)
		}
	}
	t.Cleanup(stop)
	select {
	case a := <-ready:
		return a, stop
	case err := <-done:
		t.Fatalf("daemon %s ended before it was ready: %v", cfg.Name, err)
	case <-time.After(60 * time.Second):
		t.Fatalf("daemon %s not ready within 60s", cfg.Name)
	}
	return daemon.Addrs{}, nil
}

// TestRetryThroughLeaderChange: a command run while the cluster has no
// leader, as in the second after the leader's daemon restarts, waits for
// the new leader instead of failing with exit 4; with no leader at all it
// gives up after a few seconds.
func TestRetryThroughLeaderChange(t *testing.T) {
	// An etcd daemon that serves the API and forwards to the leader, and
	// the leader's daemon, restarted on its data directory.
	front, _ := daemonRun(t, daemon.Config{Name: "front", DataDir: t.TempDir(), EtcdEmbed: true,
		EtcdClientAddr: "127.0.0.1:0", EtcdPeerAddr: "127.0.0.1:0", NoEngine: true, NoAgent: true})
	leader := daemon.Config{Name: "lead", DataDir: t.TempDir(), Driver: "sim", EtcdEndpoints: []string{"http://" + front.EtcdClient}}
	_, stop := daemonRun(t, leader)
	endpoint := "http://" + front.API
	waitLeader(t, endpoint, "lead")

	unit := filepath.Join(t.TempDir(), "hello.service")
	if err := os.WriteFile(unit, []byte("[Service]\nExecStart=/bin/sleep 1000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A read, then a write (a batch, safe to send again), each while the
	// leader's daemon restarts.
	for _, args := range [][]string{{"list-machines", "--no-legend"}, {"start", "--block-timeout", "30s", unit}} {
		stop()
		restarted := make(chan func())
		go func() {
			time.Sleep(500 * time.Millisecond)
			_, s := daemonRun(t, leader)
			restarted <- s
		}()
		start := time.Now()
		code, stdout, stderr := flotilla(t, endpoint, args...)
		stop = <-restarted
		if code != cli.ExitOK || !strings.Contains(stdout, "lead") {
			t.Fatalf("%s during the restart: exit %d, stdout %q, stderr %q; want exit 0 once the new leader answers", args[0], code, stdout, stderr)
		}
		t.Logf("%s answered after %v", args[0], time.Since(start))
	}

	// With no leader to come, the command gives up with exit 4 after the
	// retries' bound.
	noLeader, _ := daemonRun(t, daemon.Config{Name: "noleader", DataDir: t.TempDir(), EtcdEmbed: true,
		EtcdClientAddr: "127.0.0.1:0", EtcdPeerAddr: "127.0.0.1:0", NoEngine: true, NoAgent: true})
	start := time.Now()
	code, _, stderr := flotilla(t, "http://"+noLeader.API, "list-units")
	if took := time.Since(start); code != cli.ExitUnavailable || !strings.Contains(stderr, "no engine leader") || took < 4*time.Second || took > 8*time.Second {
		t.Errorf("list-units with no leader: exit %d after %v, stderr %q; want exit %d after about 5s", code, took, stderr, cli.ExitUnavailable)
	}
}

// waitLeader waits until the daemon at endpoint says id leads.
func waitLeader(t *testing.T, endpoint, id string) {
	t.Helper()
	c, err := client.New(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 60*time.Second, id+" leading", func() error {
		st, err := c.Status(context.Background())
		if err != nil {
			return err
		}
		if st.Leader != id {
			return fmt.Errorf("the leader is %q", st.Leader)
		}
		_, err = c.Machines(context.Background())
		return err
	})
}
