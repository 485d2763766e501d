package health

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/unit"
)

// BenchmarkRunTCP is one run of a unit's TCP= check against a listener
// that accepts and closes, as the agent runs it every Interval (the
// listener's side included).
func BenchmarkRunTCP(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	probes, err := Probes(&unit.Check{TCP: []string{ln.Addr().String()}}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := RunAll(context.Background(), probes, 5*time.Second); err != nil {
			b.Fatal(err)
		}
	}
}
