package daemon

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/flotilla/flotilla/internal/auth"
)

// etcdMember is the configuration of an embedded etcd member.
type etcdMember struct {
	Name           string
	Dir            string
	ClientAddr     string // host:port
	PeerAddr       string // host:port
	InitialCluster string // name=http(s)://peer,...; "" for a single member
	MaxTxnOps      uint
	// TLS, when set, makes the client and peer URLs https, each requiring
	// a server certificate of the cluster.
	TLS *auth.Credentials
	// AdmitAgents lets agent certificates through the client URL too (the
	// etcd registry mode), where etcd's authentication confines each to
	// its machine's keys (etcdauth.go).
	AdmitAgents bool
}

// startEtcd starts an embedded etcd member and waits until it serves
// (which, for a member of a multi-member cluster, needs a quorum).
func startEtcd(m etcdMember, timeout time.Duration) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = m.Name
	cfg.Dir = filepath.Join(m.Dir, "etcd")
	sch := "http://"
	if m.TLS != nil {
		sch = "https://"
		info := transport.TLSInfo{
			CertFile: m.TLS.Files.Cert, KeyFile: m.TLS.Files.Key, TrustedCAFile: m.TLS.Files.CA,
			ClientCertAuth: true,
			// Only servers: neither a person's client certificate, signed
			// by the same CA for the API, nor an agent-only machine's may
			// reach etcd, where the tokens and every unit are.
			AllowedHostnames: []string{auth.ServerSAN},
		}
		cfg.ClientTLSInfo, cfg.PeerTLSInfo = info, info
		if m.AdmitAgents {
			cfg.ClientTLSInfo.AllowedHostnames = []string{auth.ServerSAN, auth.AgentSAN}
		}
	}
	cu, err := url.Parse(sch + m.ClientAddr)
	if err != nil {
		return nil, fmt.Errorf("etcd client address %q: %w", m.ClientAddr, err)
	}
	pu, err := url.Parse(sch + m.PeerAddr)
	if err != nil {
		return nil, fmt.Errorf("etcd peer address %q: %w", m.PeerAddr, err)
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = m.InitialCluster
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = m.Name + "=" + pu.String()
	}
	cfg.InitialClusterToken = "flotilla"
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.LogLevel = "error"
	cfg.Logger = "zap"
	cfg.LogOutputs = []string{filepath.Join(m.Dir, "etcd.log")}
	cfg.AutoCompactionMode = "revision"
	cfg.AutoCompactionRetention = "10000"
	if m.MaxTxnOps > 0 {
		cfg.MaxTxnOps = m.MaxTxnOps
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd member %s: %w", m.Name, etcdListenError(m, err))
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd member %s: %w", m.Name, err)
	case <-time.After(timeout):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("embedded etcd member %s did not become ready within %v (is a quorum of --etcd-initial-cluster up?)", m.Name, timeout)
	}
}

// parseInitialCluster checks name=url,... and that name is in it.
func parseInitialCluster(s, name string) error {
	found := false
	for _, part := range strings.Split(s, ",") {
		n, u, ok := strings.Cut(part, "=")
		if !ok || n == "" || u == "" {
			return fmt.Errorf("--etcd-initial-cluster: %q is not name=URL", part)
		}
		if _, err := url.Parse(u); err != nil || !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return fmt.Errorf("--etcd-initial-cluster: %q has a bad URL %q (want http://host:port, or https://host:port with TLS)", part, u)
		}
		if n == name {
			found = true
		}
	}
	if !found {
		return fmt.Errorf("--etcd-initial-cluster %q does not include this member %q", s, name)
	}
	return nil
}

// etcdReconnect is how the daemon's etcd clients reconnect after losing
// etcd: an attempt gives up after 2 s and the next comes within a second,
// so that a daemon cut off from etcd talks to it again within a few
// seconds of the partition ending (issue 24). gRPC's defaults (attempts of
// up to 20 s, backoff growing to 2 minutes) kept a daemon whose partition
// had ended on its degraded term for tens of seconds.
var etcdReconnect = grpc.WithConnectParams(grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: 2 * time.Second,
})
