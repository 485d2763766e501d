package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/flotilla/flotilla/internal/freeport"
)

// DevConfig configures `flotilla dev`: one process holding a single-member
// embedded etcd, an engine, an agent with the exec driver, and the API.
type DevConfig struct {
	Config
}

// devState is what dev keeps in its data dir so that a restart finds its
// etcd member on the same ports under the same name.
type devState struct {
	Name       string `json:"name"`
	EtcdClient string `json:"etcdClient"`
	EtcdPeer   string `json:"etcdPeer"`
}

// Dev runs a one-machine cluster until ctx is done.
func Dev(ctx context.Context, dc DevConfig) error {
	cfg := dc.Config
	if cfg.DataDir == "" {
		return errors.New("--data-dir is required")
	}
	if err := privateDir(cfg.DataDir); err != nil {
		return err
	}
	// Before dev.json is read or written, and before etcd's ports.
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer lock.Close()
	cfg.lock = lock
	path := filepath.Join(cfg.DataDir, "dev.json")
	var st devState
	switch b, err := os.ReadFile(path); {
	case err == nil:
		if err := json.Unmarshal(b, &st); err != nil {
			return fmt.Errorf("%s: %w (remove the data dir to start afresh)", path, err)
		}
	case errors.Is(err, os.ErrNotExist):
		st.Name = cfg.Name
		if st.Name == "" {
			st.Name = "dev"
		}
		addrs, err := freeport.Addrs(2) // two calls of port 0 can give one port twice
		if err != nil {
			return err
		}
		st.EtcdClient, st.EtcdPeer = addrs[0], addrs[1]
		b, _ := json.MarshalIndent(st, "", "  ")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return err
		}
	default:
		return err
	}
	if cfg.Name != "" && cfg.Name != st.Name {
		return fmt.Errorf("--name %q: data dir %s belongs to machine %q", cfg.Name, cfg.DataDir, st.Name)
	}
	cfg.Name = st.Name
	cfg.EtcdEmbed = true
	cfg.EtcdClientAddr, cfg.EtcdPeerAddr = st.EtcdClient, st.EtcdPeer
	if cfg.EtcdClientAddr == "" || cfg.EtcdPeerAddr == "" {
		return fmt.Errorf("%s lacks etcd addresses (remove the data dir to start afresh)", path)
	}
	// dev has no flags for these: say where they come from.
	for what, addr := range map[string]string{"client": cfg.EtcdClientAddr, "peer": cfg.EtcdPeerAddr} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("etcd's %s address %s, kept in %s, cannot be listened on (%v): stop what listens there, or remove the data dir to start afresh", what, addr, path, err)
		}
		ln.Close()
	}
	// One machine: a short election TTL makes restarts snappy.
	if cfg.ElectionTTL == 0 {
		cfg.ElectionTTL = 2 * time.Second
	}
	return Run(ctx, cfg)
}
