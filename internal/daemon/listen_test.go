package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/waitfor"
)

// startDaemon runs a daemon (no agent) with cfg's API settings until the
// test ends.
func startDaemon(t *testing.T, cfg Config) Addrs {
	t.Helper()
	ready := make(chan Addrs, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg.Name, cfg.DataDir, cfg.EtcdEmbed = "n1", t.TempDir(), true
	cfg.EtcdClientAddr, cfg.EtcdPeerAddr, cfg.NoAgent = "127.0.0.1:0", "127.0.0.1:0", true
	cfg.ElectionTTL, cfg.AgentTTL = time.Second, 5*time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Ready = func(a Addrs) { ready <- a }
	go func() { done <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	select {
	case a := <-ready:
		return a
	case err := <-done:
		t.Fatalf("daemon did not start: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("daemon not ready within 60s")
	}
	return Addrs{}
}

// unixClient is an HTTP client whose every connection goes to the socket
// at path, whatever the URL's host.
func unixClient(path string) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}}}
}

func call(t *testing.T, c *http.Client, method, url, body string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitLeader waits until the daemon at base (its API's URL) behind c is
// the engine leader.
func waitLeader(t *testing.T, c *http.Client, base string) {
	t.Helper()
	waitfor.Until(t, 20*time.Second, "a leader", func() error {
		if code, b := call(t, c, "GET", base+"/v1/status", ""); code != 200 || !strings.Contains(b, `"isLeader":true`) {
			return fmt.Errorf("%d %s", code, b)
		}
		return nil
	})
}

// shortTempDir is a temporary directory whose paths fit a unix socket's
// 108 bytes.
func shortTempDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "fl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// TestAPISocket: --api-socket serves the whole API to a real unix-socket
// HTTP client under any Host, keeps the Origin and JSON rules, has mode
// 0600, refuses a path in use, and is removed on exit.
func TestAPISocket(t *testing.T) {
	sock := filepath.Join(shortTempDir(t), "fleet.sock")
	t.Run("serve", func(t *testing.T) {
		startDaemon(t, Config{APIAddr: "127.0.0.1:0", APISocket: sock})
		fi, err := os.Stat(sock)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want a socket with 0600", sock, fi.Mode())
		}
		c := unixClient(sock)
		waitLeader(t, c, "http://fleet.sock")
		for _, host := range []string{"fleet.sock", "localhost", "anything.example"} {
			for _, path := range []string{"/v1/status", "/fleet/v1/machines", "/fleet/v1/units", "/metrics", "/ui/"} {
				if code, b := call(t, c, "GET", "http://"+host+path, ""); code != 200 {
					t.Errorf("GET %s with Host %s over the socket = %d %s, want 200", path, host, code, b)
				}
			}
		}
		body := `{"units":[{"name":"a.service","file":"[Service]\nExecStart=/bin/true\n"}]}`
		if code, b := call(t, c, "POST", "http://fleet.sock/v1/batch", body, "Content-Type", "text/plain"); code != 415 {
			t.Errorf("text/plain POST over the socket = %d %s, want 415", code, b)
		}
		if code, b := call(t, c, "POST", "http://fleet.sock/v1/batch", body, "Origin", "http://evil.example"); code != 403 {
			t.Errorf("cross-site POST over the socket = %d %s, want 403", code, b)
		}
		if code, b := call(t, c, "POST", "http://fleet.sock/v1/batch", body); code != 200 {
			t.Errorf("POST /v1/batch over the socket = %d %s, want 200", code, b)
		}
		if code, b := call(t, c, "GET", "http://fleet.sock/fleet/v1/units/a.service", ""); code != 200 || !strings.Contains(b, `"name":"a.service"`) {
			t.Errorf("GET /fleet/v1/units/a.service over the socket = %d %s, want the unit", code, b)
		}
		if _, err := listenUnix(sock, ""); err == nil || !strings.Contains(err.Error(), "in use") {
			t.Errorf("listening on a live socket = %v, want it refused as in use", err)
		}
	})
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("after the daemon stopped, %s: %v, want it removed", sock, err)
	}
}

// TestAPISocketStale: a socket file no process listens on is replaced;
// a file that is not a socket is refused.
func TestAPISocketStale(t *testing.T) {
	dir := shortTempDir(t)
	sock := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	ln, err = listenUnix(sock, "")
	if err != nil {
		t.Fatalf("listening over a stale socket: %v", err)
	}
	ln.Close()
	plain := filepath.Join(dir, "f")
	os.WriteFile(plain, nil, 0o600)
	if _, err := listenUnix(plain, ""); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("listening on a regular file = %v, want it refused", err)
	}
}

// TestAPISocketACL: with --acl, requests over the socket need a token too.
func TestAPISocketACL(t *testing.T) {
	sock := filepath.Join(shortTempDir(t), "fleet.sock")
	startDaemon(t, Config{APIAddr: "127.0.0.1:0", APISocket: sock, ACL: true})
	c := unixClient(sock)
	if code, b := call(t, c, "GET", "http://fleet.sock/fleet/v1/units", ""); code != 401 {
		t.Errorf("GET /fleet/v1/units over the socket without a token = %d %s, want 401", code, b)
	}
	code, b := call(t, c, "POST", "http://fleet.sock/v1/acl/bootstrap", "{}")
	if code != 200 {
		t.Fatalf("bootstrap over the socket = %d %s", code, b)
	}
	var tok struct {
		Secret string `json:"token"`
	}
	json.Unmarshal([]byte(b), &tok)
	waitfor.Until(t, 20*time.Second, "a leader to answer", func() error {
		code, b = call(t, c, "GET", "http://fleet.sock/fleet/v1/units", "", "Authorization", "Bearer "+tok.Secret)
		if code == 503 {
			return fmt.Errorf("503 %s", b)
		}
		return nil
	})
	if code != 200 {
		t.Errorf("GET /fleet/v1/units over the socket with the admin token = %d %s, want 200", code, b)
	}
}

// TestSocketActivation: sockets passed as systemd does (LISTEN_FDS,
// LISTEN_PID, fds from 3) are served instead of --api-addr and
// --api-socket. The daemon runs in a child process that inherits them.
func TestSocketActivation(t *testing.T) {
	if os.Getenv("FLOTILLA_TEST_ACTIVATED") != "" {
		activatedChild()
		return
	}
	dir := shortTempDir(t)
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	sock := filepath.Join(dir, "act.sock")
	unix, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close()
	tf, _ := tcp.(*net.TCPListener).File()
	uf, _ := unix.(*net.UnixListener).File()
	// --api-addr is a port held here: listening on it would fail.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSocketActivation$")
	cmd.Env = append(os.Environ(), "FLOTILLA_TEST_ACTIVATED=1", "LISTEN_FDS=2", "FLOTILLA_TEST_DIR="+t.TempDir(),
		"FLOTILLA_TEST_API_ADDR="+busy.Addr().String(), "FLOTILLA_TEST_API_SOCKET="+filepath.Join(dir, "unused.sock"))
	cmd.ExtraFiles = []*os.File{tf, uf}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tf.Close()
	uf.Close()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-waited:
			if err != nil {
				t.Errorf("activated daemon: %v\n%s", err, out.String())
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Errorf("activated daemon did not stop within 30s\n%s", out.String())
		}
	}()
	for name, c := range map[string]*http.Client{"tcp": {Timeout: 5 * time.Second}, "unix": unixClient(sock)} {
		url := "http://" + tcp.Addr().String() + "/fleet/v1/machines"
		if name == "unix" {
			url = "http://fleet.sock/fleet/v1/machines"
		}
		if err := waitfor.Poll(60*time.Second, func() error {
			resp, err := c.Get(url)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("%s", resp.Status)
			}
			return nil
		}); err != nil {
			t.Fatalf("the activated %s socket answering 200: %v\n%s", name, err, out.String())
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "unused.sock")); !os.IsNotExist(err) {
		t.Errorf("--api-socket was created although systemd passed a unix socket: %v", err)
	}
}

// activatedChild runs the daemon of TestSocketActivation until interrupted.
func activatedChild() {
	os.Setenv("LISTEN_PID", strconv.Itoa(os.Getpid()))
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	err := Run(ctx, Config{Name: "act", DataDir: os.Getenv("FLOTILLA_TEST_DIR"), APIAddr: os.Getenv("FLOTILLA_TEST_API_ADDR"),
		APISocket: os.Getenv("FLOTILLA_TEST_API_SOCKET"), EtcdEmbed: true, EtcdClientAddr: "127.0.0.1:0",
		EtcdPeerAddr: "127.0.0.1:0", NoAgent: true, ElectionTTL: time.Second, AgentTTL: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		fmt.Fprintln(os.Stderr, "daemon:", err)
		os.Exit(1)
	}
	os.Exit(0)
}
