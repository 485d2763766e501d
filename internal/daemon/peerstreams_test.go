package daemon

import (
	"io"
	"net"
	"testing"
	"time"
)

// TestShutdownPeerConns: the connections accepted on the member's peer
// port and those dialled to another member's are shut down, so that
// their readers fail at once (as rafthttp's read timeout would have had
// them fail), and other connections are left alone.
func TestShutdownPeerConns(t *testing.T) {
	peer, err := net.Listen("tcp", "127.0.0.1:0") // another member's peer port
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	other, err := net.Listen("tcp", "127.0.0.1:0") // anything else
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	dial := func(ln net.Listener) (dialled, accepted net.Conn) {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		a, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(); a.Close() })
		return c, a
	}
	toPeer, _ := dial(peer)
	_, ownPort, _ := net.SplitHostPort(peer.Addr().String()) // as if it were ours too: its accepted side
	toOther, atOther := dial(other)
	_, otherPort, _ := net.SplitHostPort(other.Addr().String())
	if otherPort == ownPort {
		t.Fatal("two listeners on one port")
	}

	if n := shutdownPeerConns(ownPort, map[string]bool{peer.Addr().String(): true}); n != 2 {
		t.Errorf("shutdownPeerConns = %d, want 2 (the dialled and the accepted side)", n)
	}
	toPeer.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := toPeer.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read on a peer connection after the reset = %v, want EOF at once", err)
	}
	if _, err := toOther.Write([]byte("x")); err != nil {
		t.Fatalf("write on another connection: %v", err)
	}
	atOther.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := atOther.Read(make([]byte, 1)); err != nil {
		t.Errorf("another connection was disturbed: %v", err)
	}
}
