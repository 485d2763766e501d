package version

import (
	"strings"
	"testing"
)

func TestWindowAccepts(t *testing.T) {
	w := Window{Min: 1, Max: 3}
	for p, want := range map[int]bool{0: false, 1: true, 2: true, 3: true, 4: false, 9: false} {
		if got := w.Accepts(p); got != want {
			t.Errorf("Window{1, 3}.Accepts(%d) = %v, want %v", p, got, want)
		}
	}
	if got := (Window{Min: 2, Max: 2}).String(); got != "2" {
		t.Errorf("Window{2, 2}.String() = %q, want 2", got)
	}
}

func TestPeerProtocol(t *testing.T) {
	for in, want := range map[int32]int{0: 1, -1: 1, 1: 1, 2: 2, 7: 7} {
		if got := PeerProtocol(in); got != want {
			t.Errorf("PeerProtocol(%d) = %d, want %d", in, got, want)
		}
	}
}

// The default window is one protocol each way around this binary's.
func TestDefaultWindow(t *testing.T) {
	w := ProtocolWindow()
	if !w.Accepts(ProtocolVersion-1) || !w.Accepts(ProtocolVersion) || !w.Accepts(ProtocolVersion+1) {
		t.Errorf("window %v around protocol %d does not reach one version each way", w, ProtocolVersion)
	}
	if !w.Accepts(OldestProtocol) {
		t.Errorf("window %v refuses agents that do not say their protocol (%d)", w, OldestProtocol)
	}
}

func TestCheckProtocol(t *testing.T) {
	self := Peer{What: "leader m1", Release: "0.2.0+abc1234", Protocol: 2}
	w := Window{Min: 1, Max: 3}
	if err := CheckProtocol(self, w, Peer{What: "machine m2", Release: "0.3.0", Protocol: 3}); err != nil {
		t.Errorf("protocol 3 inside [1, 3] refused: %v", err)
	}
	for _, tc := range []struct {
		peer Peer
		want []string
	}{
		{Peer{What: "machine m2", Release: "0.9.0", Protocol: 9},
			[]string{"machine m2 (0.9.0, protocol 9)", "leader m1 (0.2.0+abc1234, protocol 2)", "accepts protocol 2 to 3", "upgrade leader m1"}},
		{Peer{What: "machine m3", Protocol: 1},
			[]string{"machine m3 (unknown release, protocol 1)", "leader m1 (0.2.0+abc1234, protocol 2)", "upgrade machine m3"}},
	} {
		err := CheckProtocol(self, Window{Min: 2, Max: 3}, tc.peer)
		if err == nil {
			t.Errorf("CheckProtocol(%v) accepted a peer outside [2, 3]", tc.peer)
			continue
		}
		for _, s := range tc.want {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("CheckProtocol(%v) = %q, want it to contain %q", tc.peer, err, s)
			}
		}
	}
}

func TestCheckSchema(t *testing.T) {
	defer func(s int) { SchemaVersion = s }(SchemaVersion)
	SchemaVersion = 2
	for _, stored := range []int{1, 2} {
		if err := CheckSchema(stored, "0.1.0-dev"); err != nil {
			t.Errorf("CheckSchema(%d) at schema 2: %v", stored, err)
		}
	}
	err := CheckSchema(3, "0.1.0-dev")
	want := "etcd holds schema 3; this binary (0.1.0-dev, schema 2) cannot lead it: upgrade this machine"
	if err == nil || err.Error() != want {
		t.Errorf("CheckSchema(3) at schema 2 = %v, want %q", err, want)
	}
}

func TestShort(t *testing.T) {
	for _, tc := range []struct {
		in   Info
		want string
	}{
		{Info{Version: "0.2.0"}, "0.2.0"},
		{Info{Version: "0.2.0", Commit: "abcdef0123456789"}, "0.2.0+abcdef0"},
		{Info{Version: "0.2.0", Commit: "abcdef0123456789", Modified: true}, "0.2.0+abcdef0-dirty"},
		{Info{Version: "0.2.0", Commit: "abcdef0123456789-dirty"}, "0.2.0+abcdef0-dirty"},
	} {
		if got := tc.in.Short(); got != tc.want {
			t.Errorf("%+v.Short() = %q, want %q", tc.in, got, tc.want)
		}
	}
}
