package bench

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"
)

// echoServer echoes every connection until the client half-closes, then
// half-closes its side.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	return ln.Addr().String()
}

func newTestProxy(t *testing.T, target string, delay time.Duration) *Proxy {
	t.Helper()
	p, err := NewProxy(target, delay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestProxyDelaysEachDirection(t *testing.T) {
	const delay = 40 * time.Millisecond
	p := newTestProxy(t, echoServer(t), delay)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 4)
	for i := range 3 {
		start := time.Now()
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		rtt := time.Since(start)
		if rtt < 2*delay || rtt > 2*delay+500*time.Millisecond {
			t.Errorf("round trip %d took %v, want about %v", i, rtt, 2*delay)
		}
	}
}

func TestProxyNoDelay(t *testing.T) {
	p := newTestProxy(t, echoServer(t), 0)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	c.Write([]byte("x"))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 200*time.Millisecond {
		t.Errorf("round trip without delay took %v", d)
	}
}

// A stream larger than the proxy's buffers, written in chunks of random
// sizes while it is read back, arrives whole and in order, and the
// client's half-close reaches the server and comes back.
func TestProxyPreservesOrderAndHalfClose(t *testing.T) {
	p := newTestProxy(t, echoServer(t), 5*time.Millisecond)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := make([]byte, 8<<20) // 4× the proxy's buffer per direction
	r := rand.New(rand.NewPCG(1, 2))
	for i := range want {
		want[i] = byte(r.UintN(256))
	}
	errc := make(chan error, 1)
	go func() {
		rest := want
		for len(rest) > 0 {
			n := min(len(rest), 1+r.IntN(100<<10))
			if _, err := c.Write(rest[:n]); err != nil {
				errc <- err
				return
			}
			rest = rest[n:]
		}
		errc <- c.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(c) // ends when the echo server's FIN arrives
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("got %d bytes back, want the %d sent, in order", len(got), len(want))
	}
}

func TestProxyTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().String()
	ln.Close()
	p := newTestProxy(t, target, time.Millisecond)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Errorf("read %d bytes through a proxy whose target is down, want the connection closed", n)
	}
}

func TestProxyCloseEndsConnections(t *testing.T) {
	p, err := NewProxy(echoServer(t), 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("x"))
	io.ReadFull(c, make([]byte, 1))
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return within 5s with a connection open")
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("the connection is still open after Close")
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Error("the proxy still accepts after Close")
	}
}

func TestProxyNegativeDelay(t *testing.T) {
	if _, err := NewProxy("127.0.0.1:1", -time.Second); err == nil {
		t.Error("NewProxy with a negative delay succeeded")
	}
}
