package daemon

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"
)

// TestNotifySystemd: run under systemd as Type=notify (NOTIFY_SOCKET set),
// a real daemon says READY=1 once its API serves, and STOPPING=1 when it
// begins to shut down.
func TestNotifySystemd(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	messages := make(chan string, 4)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := conn.ReadFromUnix(buf)
			if err != nil {
				return
			}
			messages <- string(buf[:n])
		}
	}()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan Addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Name: "m1", DataDir: dir, APIAddr: "127.0.0.1:0", EtcdEmbed: true,
			EtcdClientAddr: "127.0.0.1:0", EtcdPeerAddr: "127.0.0.1:0", Driver: "sim", ElectionTTL: time.Second, AgentTTL: 5 * time.Second,
			Logger: slog.New(slog.DiscardHandler), Ready: func(a Addrs) { ready <- a }})
	}()
	next := func(want string) {
		t.Helper()
		select {
		case m := <-messages:
			if m != want {
				t.Fatalf("systemd was sent %q, want %q", m, want)
			}
		case err := <-done:
			t.Fatalf("daemon ended before sending %q: %v", want, err)
		case <-time.After(60 * time.Second):
			t.Fatalf("systemd was not sent %q within 60s", want)
		}
	}
	next("READY=1")
	addrs := <-ready
	resp, err := http.Get("http://" + addrs.API + "/v1/status")
	if err != nil {
		t.Fatalf("the API does not serve once READY=1 is sent: %v", err)
	}
	resp.Body.Close()
	cancel()
	next("STOPPING=1")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
