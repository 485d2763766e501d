package cli_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
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
	// The commands go through a proxy that counts the front daemon's
	// refusals. Once a command has been refused for want of a leader, the
	// leader's daemon restarts while the proxy holds the command's
	// retries, until the new leader hears from its machine: a leader that
	// has just come answers with the machines whose agents have reached
	// it, which may be none yet (start would then say "cannot be placed:
	// no machines available" and give up).
	var refused atomic.Int64
	// held is what requests wait on while the proxy holds them; next is
	// what it becomes at the next refusal.
	var held, next atomic.Pointer[chan struct{}]
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(r *http.Response) error {
		if r.StatusCode >= 500 {
			refused.Add(1)
			if h := next.Swap(nil); h != nil {
				held.Store(h)
			}
		}
		return nil
	}
	px := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := held.Load(); h != nil {
			<-*h
		}
		rp.ServeHTTP(w, r)
	}))
	defer px.Close()
	// A read, then a write (a batch, safe to send again), each while the
	// leader's daemon restarts.
	for _, args := range [][]string{{"list-machines", "--no-legend"}, {"start", "--block-timeout", "30s", unit}} {
		stop()
		before := refused.Load()
		hold := make(chan struct{})
		next.Store(&hold)
		restarted := make(chan func(), 1)
		go func() {
			defer func() { next.Store(nil); held.Store(nil); close(hold) }()
			waitfor.Poll(30*time.Second, func() error {
				if refused.Load() == before {
					return errors.New("no refusal yet")
				}
				return nil
			})
			_, s := daemonRun(t, leader)
			restarted <- s
			waitfor.Poll(30*time.Second, func() error { return leads(endpoint, "lead") })
		}()
		start := time.Now()
		code, stdout, stderr := flotilla(t, px.URL, args...)
		stop = <-restarted
		if refused.Load() == before {
			t.Errorf("%s was never refused: it ran through no leader's absence", args[0])
		}
		if code != cli.ExitOK || !strings.Contains(stdout, "lead") {
			t.Fatalf("%s during the restart: exit %d, stdout %q, stderr %q; want exit 0 once the new leader answers", args[0], code, stdout, stderr)
		}
		t.Logf("%s answered after %v, refused %d times", args[0], time.Since(start), refused.Load()-before)
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

// waitLeader waits until the daemon at endpoint says id leads and lists
// id's machine.
func waitLeader(t *testing.T, endpoint, id string) {
	t.Helper()
	waitfor.Until(t, 60*time.Second, id+" leading", func() error { return leads(endpoint, id) })
}

// leads is nil once the daemon at endpoint says id leads and lists id's
// machine.
func leads(endpoint, id string) error {
	c, err := client.New(endpoint)
	if err != nil {
		return err
	}
	st, err := c.Status(context.Background())
	if err != nil {
		return err
	}
	if st.Leader != id {
		return fmt.Errorf("the leader is %q", st.Leader)
	}
	ms, err := c.Machines(context.Background())
	if err != nil {
		return err
	}
	for _, m := range ms.Machines {
		if m.ID == id {
			return nil
		}
	}
	return fmt.Errorf("machines %+v", ms.Machines)
}
