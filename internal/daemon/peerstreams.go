package daemon

import (
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// An embedded etcd member cut off from the others keeps its peer streams
// on the TCP connections it had before the partition: rafthttp means to
// cut a stream silent for 5 s (a read timeout on the connections it
// dials), but the timeout rides on http.Transport.Dial, which the
// transport ignores because etcd also sets DialContext. After the
// partition, the others' messages then wait for TCP to retransmit on the
// old connections, and TCP's backoff grows with the partition's length:
// the member rejoined 3 to 5 s after a 20 s partition, tens of seconds
// after longer ones, and its daemon stayed on its degraded term
// meanwhile (issue 24).
//
// So while the member has had no raft leader for leaderlessAfter, the
// daemon shuts its peer connections down, as the read timeout would have:
// rafthttp dials its streams again, and the new connections carry the
// others' messages as soon as the network lets them.

const (
	// leaderlessAfter is how long the member must have gone without a
	// raft leader before its peer connections are reset: several of
	// etcd's election timeouts (1 s), so a normal election never sees it.
	leaderlessAfter = 3 * time.Second
	// peerResetEvery is the least time between two resets.
	peerResetEvery = 2 * time.Second
)

// resetStalePeerStreams watches member e, whose own peer address is
// peerAddr and whose cluster is initialCluster (name=URL,...), until it
// stops.
func resetStalePeerStreams(e *embed.Etcd, name, peerAddr, initialCluster string, log *slog.Logger) {
	_, ownPort, err := net.SplitHostPort(peerAddr)
	if err != nil {
		return
	}
	peers := map[string]bool{} // the other members' peer addresses, ip:port
	for part := range strings.SplitSeq(initialCluster, ",") {
		n, u, _ := strings.Cut(part, "=")
		pu, err := url.Parse(u)
		if n == name || err != nil {
			continue
		}
		ips, err := net.LookupIP(pu.Hostname())
		if err != nil {
			continue
		}
		for _, ip := range ips {
			peers[net.JoinHostPort(ip.String(), pu.Port())] = true
		}
	}
	if len(peers) == 0 {
		return // a single member has no peers
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var leaderless, reset time.Time
	for {
		select {
		case <-e.Server.StopNotify():
			return
		case <-tick.C:
		}
		now := time.Now()
		if e.Server.Leader() != 0 {
			leaderless = time.Time{}
			continue
		}
		if leaderless.IsZero() {
			leaderless = now
		}
		if now.Sub(leaderless) < leaderlessAfter || now.Sub(reset) < peerResetEvery {
			continue
		}
		reset = now
		if n := shutdownPeerConns(ownPort, peers); n > 0 {
			log.Info("etcd member without a leader: reset its peer connections so that it rejoins as soon as the network lets it",
				"connections", n, "leaderless_ms", now.Sub(leaderless).Milliseconds())
		}
	}
}

// shutdownPeerConns shuts down this process's TCP connections accepted on
// the peer port ownPort or dialled to one of peers, and returns how many.
// It finds them among the process's file descriptors (Linux's /proc).
func shutdownPeerConns(ownPort string, peers map[string]bool) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	n := 0
	for _, ent := range ents {
		fd, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if link, err := os.Readlink("/proc/self/fd/" + ent.Name()); err != nil || !strings.HasPrefix(link, "socket:") {
			continue
		}
		if typ, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TYPE); err != nil || typ != syscall.SOCK_STREAM {
			continue
		}
		local, err1 := syscall.Getsockname(fd)
		remote, err2 := syscall.Getpeername(fd)
		if err1 != nil || err2 != nil {
			continue // a listener, or not connected
		}
		_, lport := sockaddrHostPort(local)
		rhost, rport := sockaddrHostPort(remote)
		if lport == ownPort || peers[net.JoinHostPort(rhost, rport)] {
			if syscall.Shutdown(fd, syscall.SHUT_RDWR) == nil {
				n++
			}
		}
	}
	return n
}

func sockaddrHostPort(sa syscall.Sockaddr) (host, port string) {
	switch a := sa.(type) {
	case *syscall.SockaddrInet4:
		return net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port)
	case *syscall.SockaddrInet6:
		return net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port)
	}
	return "", ""
}
