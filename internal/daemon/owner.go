package daemon

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	apiv1 "github.com/flotilla/flotilla/api"
)

// A daemon without --acl has no tokens to tell people apart, so on
// loopback it serves its own user alone (and root): the user who holds the
// other end of each TCP connection is read from the kernel's socket table
// (/proc/net/tcp and tcp6, as identd does), as SO_PEERCRED gives it for a
// unix socket. The API answers anyone else 403; the agents' gRPC port
// closes their connections. The browser of the user who runs `flotilla
// dev` is that user, so the dashboard keeps working with no token; other
// users of the host get nothing. A listener beyond loopback (--insecure)
// stays open to all, as asked.

// owner is who may use a daemon without --acl on loopback. With
// metricsPublic (--metrics-public), GET /metrics is for anyone.
type owner struct {
	uid           int
	metricsPublic bool
}

func currentOwner() owner { return owner{uid: os.Geteuid()} }

// allows reports whether the peer of c may be served: c is not on
// loopback (open by --insecure), or its peer is the owner or root. err
// says why not.
func (o owner) allows(c net.Conn) error {
	local, ok := c.LocalAddr().(*net.TCPAddr)
	if !ok || !local.IP.IsLoopback() {
		return nil
	}
	uid, err := peerUID(c)
	if err != nil {
		return fmt.Errorf("this daemon runs without --acl and serves only its own user (uid %d) on loopback, and the user of this connection is unknown: %w", o.uid, err)
	}
	if uid != o.uid && uid != 0 {
		return fmt.Errorf("this daemon runs without --acl and serves only its own user (uid %d) and root on loopback; this connection is uid %d's: ask the daemon's owner, or run the cluster with --acl and use a token", o.uid, uid)
	}
	return nil
}

type peerKey struct{}

// connContext records, for each connection, whether its peer may be
// served (see owner.allows).
func (o owner) connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, peerKey{}, o.allows(c))
}

// handler refuses with 403 the requests of connections connContext did
// not allow.
func (o owner) handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		public := o.metricsPublic && r.Method == http.MethodGet && r.URL.Path == "/metrics"
		if err, _ := r.Context().Value(peerKey{}).(error); err != nil && !public {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			json.NewEncoder(w).Encode(apiv1.Error{Error: err.Error(), Code: "forbidden"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// ownerListener closes, as it accepts them, the connections of other
// users (the agents' gRPC port without TLS).
type ownerListener struct {
	net.Listener
	o owner
}

func (l ownerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.o.allows(c) == nil {
			return c, nil
		}
		c.Close()
	}
}

// peerUID returns the user that owns the socket at the other end of c, a
// TCP connection within this host: asked of the kernel by the connection's
// addresses (diagUID), or, where sock_diag is not there, found in
// /proc/net/tcp or tcp6.
func peerUID(c net.Conn) (int, error) {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return 0, errors.New("not a TCP connection")
	}
	// The peer's socket has our ends swapped. An IPv4 peer's socket is
	// AF_INET, or AF_INET6 with v4-mapped addresses.
	families := []int{unix.AF_INET6}
	if remote.IP.To4() != nil && local.IP.To4() != nil {
		families = []int{unix.AF_INET, unix.AF_INET6}
	}
	var diagErr error
	for _, f := range families {
		uid, err := diagUID(f, remote, local)
		if err == nil {
			return uid, nil
		}
		if !errors.Is(err, errNoSocket) {
			diagErr = err
			break
		}
	}
	if diagErr == nil {
		return 0, fmt.Errorf("no socket %s -> %s in the kernel's table", remote, local)
	}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		v6 := strings.HasSuffix(table, "6")
		if !v6 && (remote.IP.To4() == nil || local.IP.To4() == nil) {
			continue
		}
		uid, found, err := findSocket(table, procAddr(remote, v6), procAddr(local, v6))
		if err != nil {
			return 0, err
		}
		if found {
			return uid, nil
		}
	}
	return 0, fmt.Errorf("no socket %s -> %s in the kernel's table (sock_diag: %v)", remote, local, diagErr)
}

// findSocket returns the uid of the socket of table whose local and remote
// addresses are those given (in the table's hex form).
func findSocket(table, local, remote string) (uid int, found bool, err error) {
	f, err := os.Open(table)
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 8 || !strings.EqualFold(fs[1], local) || !strings.EqualFold(fs[2], remote) {
			continue
		}
		uid, err := strconv.Atoi(fs[7])
		return uid, err == nil, err
	}
	return 0, false, sc.Err()
}

// procAddr writes a as /proc/net/tcp{,6} does: the address as 32-bit
// words in the host's byte order, in hex, then the port.
func procAddr(a *net.TCPAddr, v6 bool) string {
	ip := a.IP.To16()
	if !v6 {
		ip = a.IP.To4()
	}
	var b strings.Builder
	for i := 0; i+4 <= len(ip); i += 4 {
		fmt.Fprintf(&b, "%08X", binary.NativeEndian.Uint32(ip[i:i+4]))
	}
	fmt.Fprintf(&b, ":%04X", a.Port)
	return b.String()
}
