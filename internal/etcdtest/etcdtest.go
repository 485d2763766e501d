// Package etcdtest starts a real single-member etcd, embedded in the test
// process on loopback, for tests of code that talks to etcd.
package etcdtest

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/flotilla/flotilla/internal/freeport"
)

// Server is a running embedded etcd.
type Server struct {
	Etcd     *embed.Etcd
	Endpoint string
	stop     sync.Once
}

// Stop stops the member (once; the test's end stops it too).
func (s *Server) Stop() { s.stop.Do(s.Etcd.Close) }

// Start starts an etcd member in t.TempDir() and stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = filepath.Join(t.TempDir(), "etcd")
	u, _ := url.Parse("http://127.0.0.1:0")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*u}, []url.URL{*u}
	p, _ := url.Parse("http://127.0.0.1:0")
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*p}, []url.URL{*p}
	cfg.InitialCluster = cfg.Name + "=" + p.String()
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{filepath.Join(t.TempDir(), "etcd.log")}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("etcdtest: start: %v", err)
	}
	s := &Server{Etcd: e, Endpoint: "http://" + e.Clients[0].Addr().String()}
	t.Cleanup(s.Stop)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("etcdtest: etcd not ready within 30s")
	}
	return s
}

// Client returns a client of s, closed when the test ends.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	return client(t, s.Endpoint)
}

// client returns a client of the etcd at endpoint, closed when the test ends.
func client(t testing.TB, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcdtest: client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// StartCluster starts n etcd members that form one cluster, each in
// t.TempDir() and on its own loopback ports, and stops them when the test
// ends. Closing some members (Etcd.Close) leaves the others cut off from
// their quorum, as a partition would: a test sees what such a member still
// answers on its own.
//
// The members' peer addresses must be known before any starts, so they
// are picked free and bound a moment later: another process may take one
// in between (a connection's own port, from the same range), and the
// cluster is then started again on other ports, up to three times.
func StartCluster(t testing.TB, n int) []*Server {
	t.Helper()
	for attempt := 1; ; attempt++ {
		out, err := startCluster(t, n)
		if err == nil {
			return out
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
		t.Logf("%v; starting the cluster again on other ports", err)
	}
}

func startCluster(t testing.TB, n int) ([]*Server, error) {
	cfgs := make([]*embed.Config, n)
	var initial []string
	for i := range cfgs {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i+1)
		cfg.Dir = filepath.Join(t.TempDir(), "etcd")
		u, _ := url.Parse("http://127.0.0.1:0")
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*u}, []url.URL{*u}
		p, _ := url.Parse("http://" + freeAddr(t))
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*p}, []url.URL{*p}
		cfg.LogLevel = "error"
		cfg.LogOutputs = []string{filepath.Join(t.TempDir(), "etcd.log")}
		cfgs[i] = cfg
		initial = append(initial, cfg.Name+"="+p.String())
	}
	out := make([]*Server, n)
	errs := make(chan error, n)
	for i, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
		go func() {
			e, err := embed.StartEtcd(cfg)
			if err != nil {
				errs <- fmt.Errorf("etcdtest: start member %s: %w", cfg.Name, err)
				return
			}
			s := &Server{Etcd: e, Endpoint: "http://" + e.Clients[0].Addr().String()}
			t.Cleanup(s.Stop)
			out[i] = s
			errs <- nil
		}()
	}
	var failed error
	for range cfgs {
		if err := <-errs; err != nil && failed == nil {
			failed = err
		}
	}
	if failed != nil {
		for _, s := range out {
			if s != nil {
				s.Stop() // a member without its peers would wait for them
			}
		}
		return nil, failed
	}
	for _, s := range out {
		select {
		case <-s.Etcd.Server.ReadyNotify():
		case <-time.After(30 * time.Second):
			t.Fatal("etcdtest: cluster not ready within 30s")
		}
	}
	return out, nil
}

// freeAddr returns a loopback address no one listens on now, never one
// given before in this process (freeport).
func freeAddr(t testing.TB) string {
	t.Helper()
	addrs, err := freeport.Addrs(1)
	if err != nil {
		t.Fatalf("etcdtest: free port: %v", err)
	}
	return addrs[0]
}
