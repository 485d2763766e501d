// Package freeport finds loopback TCP addresses for servers that must be
// told their addresses before they listen: the daemons a benchmark or a
// test starts as processes of their own, and the etcd `flotilla dev`
// embeds (its ports are kept for its next runs).
//
// An address is free when returned; it can be taken before its daemon
// listens. Two ways that happened are closed here. A port from the
// kernel's ephemeral range (what listening on port 0 gives) was taken, in
// between, as the local port of another process's outgoing connection
// (the etcd client of an engine started just before), so ports are picked
// below that range when it can be read. And a port freed by one call was
// handed out again by the next (an integration test's daemon was given the
// same port for its API and its etcd client, and could not start), so a
// process is never given a port twice.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"

	"github.com/prometheus/procfs"
)

// MinPort is the lowest port Addrs picks: above the well-known and most
// registered services' ports.
const MinPort = 20000

var (
	mu    sync.Mutex
	given = map[int]bool{}
)

// Addrs returns n distinct free addresses on 127.0.0.1, none returned
// before by this process.
func Addrs(n int) ([]string, error) {
	mu.Lock()
	defer mu.Unlock()
	lns := make([]net.Listener, 0, n)
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	lo, ok := EphemeralLow()
	addrs := make([]string, 0, n)
	for tries := 0; len(addrs) < n; tries++ {
		if tries > 1000*n {
			return nil, fmt.Errorf("find %d free ports: none left after %d tries", n, tries)
		}
		addr := "127.0.0.1:0"
		if ok && tries < 100*n {
			addr = fmt.Sprintf("127.0.0.1:%d", MinPort+rand.IntN(lo-MinPort))
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			if addr != "127.0.0.1:0" {
				continue // taken: try another
			}
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		lns = append(lns, ln)
		port := ln.Addr().(*net.TCPAddr).Port
		if given[port] {
			continue // handed out before, maybe not yet listened on
		}
		given[port] = true
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}

// EphemeralLow returns the lowest port of the kernel's ephemeral range,
// when there is room below it above MinPort.
func EphemeralLow() (int, bool) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, false
	}
	r, err := fs.SysctlInts("net.ipv4.ip_local_port_range")
	if err != nil || len(r) != 2 || r[0] <= MinPort+1000 {
		return 0, false
	}
	return r[0], true
}
