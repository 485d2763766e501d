package daemon

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// otherUser is the user the tests below act as: nobody.
const otherUser = 65534

// asOtherUser runs this test binary again as uid 65534, to send one
// request (TestOwnerHelper), and returns its output: "STATUS BODY" or
// "dial: ERROR".
func asOtherUser(t *testing.T, method, url, body string) string {
	t.Helper()
	// The test binary's own directory is private: run a copy.
	dir, err := os.MkdirTemp("", "flotilla-owner")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	self, _ := os.Executable()
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "helper.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestOwnerHelper$", "-test.count=1")
	cmd.Env = []string{"FLOTILLA_OWNER_HELPER=" + method + " " + url, "FLOTILLA_OWNER_BODY=" + body, "HOME=/"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: otherUser, Gid: otherUser}}
	out, err := cmd.CombinedOutput()
	line, _, _ := strings.Cut(string(out), "\n")
	if err != nil && !strings.HasPrefix(line, "dial:") {
		t.Fatalf("helper as uid %d: %v\n%s", otherUser, err, out)
	}
	return line
}

// TestOwnerHelper is the request asOtherUser sends; alone it does nothing.
func TestOwnerHelper(t *testing.T) {
	req := os.Getenv("FLOTILLA_OWNER_HELPER")
	if req == "" {
		t.Skip("a helper of TestLocalUser")
	}
	method, url, _ := strings.Cut(req, " ")
	r, _ := http.NewRequest(method, url, strings.NewReader(os.Getenv("FLOTILLA_OWNER_BODY")))
	r.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(r)
	if err != nil {
		os.Stdout.WriteString("dial: " + err.Error() + "\n")
		os.Exit(0)
	}
	b, _ := io.ReadAll(resp.Body)
	os.Stdout.WriteString(resp.Status[:3] + " " + strings.TrimSpace(string(b)) + "\n")
	os.Exit(0)
}

// TestLocalUser: a daemon without --acl on loopback (as `flotilla dev`
// runs) serves its own user and root alone. Another user of the host
// (uid 65534, a real process) can neither write nor read through the API,
// nor open an agent stream on the gRPC port; the daemon's own user still
// can.
func TestLocalUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("acting as another user needs root")
	}
	a := startDaemon(t, Config{APIAddr: "127.0.0.1:0", MetricsPublic: true})
	base := "http://" + a.API
	c := &http.Client{Timeout: 10 * time.Second}
	waitLeader(t, c, base)
	unit := `{"file":"[Service]\nExecStart=/bin/id\n","desiredState":"launched"}`
	for _, req := range [][2]string{{"PUT", "/v1/units/pwn.service"}, {"POST", "/v1/batch"}, {"GET", "/v1/units"}, {"PUT", "/fleet/v1/units/pwn.service"}} {
		body := ""
		if req[0] != "GET" {
			body = unit
			if req[1] == "/v1/batch" {
				body = `{"units":[{"name":"pwn.service","file":"[Service]\nExecStart=/bin/id\n","desiredState":"launched"}]}`
			}
		}
		out := asOtherUser(t, req[0], base+req[1], body)
		if !strings.HasPrefix(out, "403 ") || !strings.Contains(out, "uid 65534") {
			t.Errorf("%s %s as uid %d = %q, want 403 naming the user", req[0], req[1], otherUser, out)
		}
	}
	// --metrics-public: a scraper of another user gets /metrics alone.
	if out := asOtherUser(t, "GET", base+"/metrics", ""); !strings.HasPrefix(out, "200 ") {
		t.Errorf("GET /metrics with --metrics-public as uid %d = %q, want 200", otherUser, out)
	}
	if code, b := call(t, c, "GET", base+"/v1/units/pwn.service", ""); code != 404 {
		t.Errorf("after the refused writes, GET /v1/units/pwn.service = %d %s, want 404", code, b)
	}
	// The owner (this process) is served.
	if code, b := call(t, c, "PUT", base+"/v1/units/mine.service", `{"file":"[Service]\nExecStart=/bin/true\n"}`); code != 200 {
		t.Errorf("PUT as the owner = %d %s", code, b)
	}
	// The gRPC port closes another user's connections at once.
	out := asOtherUser(t, "GET", "http://"+a.GRPC+"/", "")
	if !strings.HasPrefix(out, "dial:") {
		t.Errorf("a connection to the gRPC port as uid %d = %q, want it closed", otherUser, out)
	}
	if conn, err := net.DialTimeout("tcp", a.GRPC, time.Second); err != nil {
		t.Errorf("the owner dialing the gRPC port: %v", err)
	} else {
		conn.Close()
	}
}

// TestAPISocketGroup: --api-socket-group gives the socket that group, mode
// 0660; an unknown group is refused.
func TestAPISocketGroup(t *testing.T) {
	sock := filepath.Join(shortTempDir(t), "g.sock")
	ln, err := listenUnix(sock, "0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fi, _ := os.Stat(sock)
	if st, ok := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o660 || !ok || st.Gid != 0 {
		t.Errorf("%s: mode %v, want 0660 with group 0", sock, fi.Mode())
	}
	if _, err := listenUnix(filepath.Join(shortTempDir(t), "h.sock"), "no-such-group-flotilla"); err == nil || !strings.Contains(err.Error(), "--api-socket-group") {
		t.Errorf("an unknown group: %v, want it refused naming the flag", err)
	}
}

// TestPeerUID: the user at the other end of a loopback connection, over
// IPv4 and IPv6, is found in the kernel's table: this process's.
func TestPeerUID(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Logf("%s: %v (skipped)", addr, err)
			continue
		}
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if uid, err := peerUID(s); err != nil || uid != os.Geteuid() {
			t.Errorf("%s: peerUID = %d, %v; want %d", addr, uid, err, os.Geteuid())
		}
		if err := currentOwner().allows(s); err != nil {
			t.Errorf("%s: the owner is refused: %v", addr, err)
		}
		c.Close()
		s.Close()
		ln.Close()
	}
}

// TestDiagUID: the kernel's sock_diag finds a loopback connection's peer
// socket by its addresses, as /proc/net/tcp does, and says when there is
// none.
func TestDiagUID(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	local, remote := s.LocalAddr().(*net.TCPAddr), s.RemoteAddr().(*net.TCPAddr)
	if uid, err := diagUID(unix.AF_INET, remote, local); err != nil || uid != os.Geteuid() {
		t.Errorf("diagUID(the peer's socket) = %d, %v; want %d", uid, err, os.Geteuid())
	}
	gone := *remote
	gone.Port = 1 // nothing dials from port 1
	if _, err := diagUID(unix.AF_INET, &gone, local); !errors.Is(err, errNoSocket) {
		t.Errorf("diagUID(no socket) = %v, want errNoSocket", err)
	}
}

// BenchmarkPeerUID: finding a peer's user among n other loopback
// connections, through sock_diag and through /proc/net/tcp.
func BenchmarkPeerUID(b *testing.B) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 2000 {
		c, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c, s)
	}
	s := conns[len(conns)-1]
	local, remote := s.LocalAddr().(*net.TCPAddr), s.RemoteAddr().(*net.TCPAddr)
	b.Run("sock_diag", func(b *testing.B) {
		for b.Loop() {
			if _, err := diagUID(unix.AF_INET, remote, local); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proc", func(b *testing.B) {
		for b.Loop() {
			if _, found, err := findSocket("/proc/net/tcp", procAddr(remote, false), procAddr(local, false)); err != nil || !found {
				b.Fatal(err, found)
			}
		}
	})
}
