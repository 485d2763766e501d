package bench

import (
	"net"
	"strconv"
	"testing"
)

// TestFreeAddrsOutsideEphemeralRange: the daemons' addresses are distinct,
// free, and below the kernel's ephemeral range, where no outgoing
// connection's local port or port-0 listener can take one first.
func TestFreeAddrsOutsideEphemeralRange(t *testing.T) {
	lo, ok := ephemeralLow()
	if !ok {
		t.Skip("the ephemeral port range cannot be read here")
	}
	addrs, err := freeAddrs(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		if port < minFixedPort || port >= lo || seen[a] {
			t.Errorf("address %s: want distinct ports in [%d, %d)", a, minFixedPort, lo)
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
