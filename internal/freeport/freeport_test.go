package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestAddrsOutsideEphemeralRange: the addresses are distinct, free, below
// the kernel's ephemeral range, where no outgoing connection's local port
// or port-0 listener can take one first, and never given twice: 400 picks
// from some 12,000 ports would repeat one almost surely (all but 0.2 % of
// the time) if the process did not remember them.
func TestAddrsOutsideEphemeralRange(t *testing.T) {
	lo, ok := EphemeralLow()
	if !ok {
		t.Skip("the ephemeral port range cannot be read here")
	}
	seen := map[string]bool{}
	for range 20 {
		addrs, err := Addrs(20)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			_, p, err := net.SplitHostPort(a)
			if err != nil {
				t.Fatal(err)
			}
			port, _ := strconv.Atoi(p)
			if port < MinPort || port >= lo || seen[a] {
				t.Errorf("address %s: want ports in [%d, %d), each once", a, MinPort, lo)
			}
			seen[a] = true
			ln, err := net.Listen("tcp", a)
			if err != nil {
				t.Errorf("address %s is not free: %v", a, err)
				continue
			}
			ln.Close()
		}
	}
}
