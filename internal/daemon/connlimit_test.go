package daemon

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/auth"
	"github.com/flotilla/flotilla/internal/limits"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// dialIdle opens n connections to addr that send nothing, closed when the
// test ends.
func dialIdle(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	var conns []net.Conn
	t.Cleanup(func() {
		for _, cn := range conns {
			cn.Close()
		}
	})
	for range n {
		cn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, cn)
	}
	return conns
}

// heardFrom waits until the daemon sends something on cn: gRPC's server
// speaks first, once the daemon has accepted the connection.
func heardFrom(t *testing.T, cn net.Conn, what string) {
	t.Helper()
	cn.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer cn.SetReadDeadline(time.Time{})
	if _, err := io.ReadFull(cn, make([]byte, 1)); err != nil {
		t.Fatalf("%s: the daemon's first bytes: %v", what, err)
	}
}

// closedWithin reports whether the daemon closes cn within d (reading
// what it sends meanwhile: gRPC's server speaks first).
func closedWithin(cn net.Conn, d time.Duration) bool {
	cn.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, cn)
	ne, ok := err.(net.Error)
	return !(ok && ne.Timeout())
}

// heldWithin reports whether cn stays open and silent for d: the daemon
// has not accepted it (gRPC's server speaks first once it has).
func heldWithin(cn net.Conn, d time.Duration) bool {
	cn.SetReadDeadline(time.Now().Add(d))
	defer cn.SetReadDeadline(time.Time{})
	n, err := cn.Read(make([]byte, 1))
	ne, ok := err.(net.Error)
	return n == 0 && ok && ne.Timeout()
}

// TestIdleGRPCConnections (issue 23, finding 7): connections to the gRPC
// port that never handshake are closed after limits.GRPCHandshakeTimeout,
// not held for gRPC's default 2 minutes; beyond limits.GRPCPendingConns of
// them, new ones wait in the listen queue, neither served nor closed,
// until there is room, and are served then (a reconnecting agent is not
// sent into its backoff).
func TestIdleGRPCConnections(t *testing.T) {
	a := startDaemon(t, Config{APIAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0"})
	idle := dialIdle(t, a.GRPC, limits.GRPCPendingConns)
	for i, cn := range idle {
		heardFrom(t, cn, fmt.Sprintf("idle connection %d", i))
	}
	extra, err := net.Dial("tcp", a.GRPC)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if !heldWithin(extra, 2*time.Second) {
		t.Errorf("connection %d beyond %d unauthenticated ones was served or closed at once; want it held in the listen queue", limits.GRPCPendingConns+1, limits.GRPCPendingConns)
	}
	for i, cn := range idle {
		if !closedWithin(cn, limits.GRPCHandshakeTimeout+5*time.Second) {
			t.Fatalf("idle connection %d still open %v after the handshake deadline", i, 5*time.Second)
		}
	}
	// Room again: the one held is served, and so is a new one that speaks.
	heardFrom(t, extra, "the connection held while the idle ones were pending")
	cn, err := net.Dial("tcp", a.GRPC)
	if err != nil {
		t.Fatal(err)
	}
	defer cn.Close()
	fmt.Fprint(cn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	cn.Write([]byte{0, 0, 0, 4, 0, 0, 0, 0, 0}) // an empty SETTINGS frame
	cn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := cn.Read(make([]byte, 9)); err != nil {
		t.Errorf("a gRPC connection after the idle ones were closed: %v", err)
	}
}

// TestConnsFor: the listeners keep a quarter of the open-files limit, at
// least limits.ReservedFDs but never more than half, for the rest.
func TestConnsFor(t *testing.T) {
	for _, tc := range []struct{ n, want int64 }{{100, 50}, {512, 256}, {1024, 768}, {4096, 3072}, {20000, 15000}} {
		if got := connsFor(tc.n); got != tc.want {
			t.Errorf("connsFor(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

const fdChildEnv = "FLOTILLA_TEST_FD_CHILD"

// TestLowFDLimit (issue 23, finding 7): a daemon with its embedded etcd
// member, in a child process whose open-files limit is 400, is flooded
// with idle connections to its API and gRPC ports, far more than the
// limit. It refuses what it cannot hold, stays up, and once the flood
// ends writes to etcd again.
func TestLowFDLimit(t *testing.T) {
	if os.Getenv(fdChildEnv) != "" {
		fdChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLowFDLimit$", "-test.v")
	cmd.Env = append(os.Environ(), fdChildEnv+"=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	var addrs Addrs
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if line, ok := bytes.CutPrefix(sc.Bytes(), []byte("ADDRS ")); ok {
			json.Unmarshal(line, &addrs)
			break
		}
	}
	go func() { io.Copy(io.Discard, stdout); exited <- cmd.Wait() }()
	defer func() {
		stdin.Close()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("the child daemon: %v\n%s", err, stderr.Bytes())
			}
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			t.Error("the child daemon did not stop")
		}
	}()
	if addrs.API == "" {
		t.Fatalf("the child daemon did not start\n%s", stderr.Bytes())
	}
	var flood []net.Conn
	for i := range 1500 {
		addr := addrs.API
		if i%2 == 1 {
			addr = addrs.GRPC
		}
		cn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			continue
		}
		flood = append(flood, cn)
	}
	// The daemon has taken the whole flood once it refuses a connection
	// made after it: it holds all it may, and has accepted (and closed)
	// the rest queued before that one.
	after, err := net.DialTimeout("tcp", addrs.API, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	if !closedWithin(after, 20*time.Second) {
		t.Fatalf("a connection made after a flood of %d was not refused within 20s", len(flood))
	}
	select {
	case err := <-exited:
		t.Fatalf("the daemon exited under the flood: %v\n%s", err, stderr.Bytes())
	default:
	}
	// Descriptors are left for etcd: the listeners stopped well short of
	// the limit.
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d connections made; the daemon holds %d descriptors of its 400", len(flood), len(fds))
	if free := 400 - len(fds); free < 64 {
		t.Errorf("under the flood the daemon has %d descriptors free of 400, want at least 64 kept for etcd", free)
	}
	for _, cn := range flood {
		cn.Close()
	}
	// The flood gone, a write reaches etcd.
	body := `{"units":[{"name":"after.service","file":"[Service]\nExecStart=/bin/true\n"}]}`
	if err := waitfor.Poll(30*time.Second, func() error {
		resp, err := http.Post("http://"+addrs.API+"/v1/batch", "application/json", bytes.NewReader([]byte(body)))
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s: %s", resp.Status, b)
		}
		return nil
	}); err != nil {
		t.Fatalf("a write after the flood: %v\n%s", err, stderr.Bytes())
	}
}

// fdChild runs a daemon at an open-files limit of 400 until stdin closes.
func fdChild(t *testing.T) {
	lim := syscall.Rlimit{Cur: 400, Max: 400}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	a := startDaemon(t, Config{APIAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0"})
	b, _ := json.Marshal(a)
	fmt.Printf("ADDRS %s\n", b)
	io.Copy(io.Discard, os.Stdin)
}

// TestGRPCPendingWithTLS: with TLS, a connection stops counting against
// limits.GRPCPendingConns once its handshake authenticated the peer.
func TestGRPCPendingWithTLS(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := auth.CreateCA(filepath.Join(dir, "ca"), 0); err != nil {
		t.Fatal(err)
	}
	cert, key, err := auth.CreateCert(auth.CertRequest{CADir: filepath.Join(dir, "ca"), Name: "n1", OutDir: filepath.Join(dir, "certs")})
	if err != nil {
		t.Fatal(err)
	}
	files := auth.Files{CA: filepath.Join(dir, "ca", "ca.pem"), Cert: cert, Key: key}
	a := startDaemon(t, Config{APIAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", TLS: files})
	tc, err := auth.ClientConfig(files)
	if err != nil {
		t.Fatal(err)
	}
	tc.NextProtos = []string{"h2"} // gRPC refuses a handshake without it
	authed, err := tls.Dial("tcp", a.GRPC, tc)
	if err != nil {
		t.Fatalf("a TLS handshake with the gRPC port: %v", err)
	}
	defer authed.Close()
	authed.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := authed.Read(make([]byte, 1)); err != nil {
		t.Fatalf("the gRPC server after the handshake: %v, want its SETTINGS", err)
	}
	// A TLS server does not speak first: a connection accepted and left
	// idle is closed at the handshake deadline, one held in the listen
	// queue is not.
	idle := dialIdle(t, a.GRPC, limits.GRPCPendingConns)
	extra, err := net.Dial("tcp", a.GRPC)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if !closedWithin(idle[len(idle)-1], limits.GRPCHandshakeTimeout+5*time.Second) {
		t.Fatalf("idle connection %d beside an authenticated one was not accepted (closed at the handshake deadline): the authenticated one still counts", limits.GRPCPendingConns)
	}
	// The idle ones went at their deadline; the one held was accepted only
	// then, so it is still open.
	if closedWithin(extra, time.Second) {
		t.Errorf("connection %d beyond %d unauthenticated ones was accepted at once; want it held", limits.GRPCPendingConns+1, limits.GRPCPendingConns)
	}
	if !closedWithin(extra, limits.GRPCHandshakeTimeout+5*time.Second) {
		t.Errorf("connection %d, held, was not accepted (and closed idle) once there was room", limits.GRPCPendingConns+1)
	}
}
