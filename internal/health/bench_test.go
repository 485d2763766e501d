package health

import (
	"context"
	"net"
	"syscall"
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

// BenchmarkRunExec is one run of an Exec=/bin/true check, started and
// waited for by this process, and reports the CPU of the probe's own
// process (its fork's child, its exec of /bin/true and the loader, its
// exit: child-ms/op) apart from this process's (starting and reaping it:
// parent-ms/op): what any process running a command pays.
func BenchmarkRunExec(b *testing.B) {
	probes, err := Probes(&unit.Check{Exec: []unit.Command{{Argv: []string{"/bin/true"}}}}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	cpu := func(who int) time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(who, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	self0, child0 := cpu(syscall.RUSAGE_SELF), cpu(syscall.RUSAGE_CHILDREN)
	for b.Loop() {
		if err := RunAll(context.Background(), probes, 5*time.Second); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpu(syscall.RUSAGE_SELF)-self0)/float64(time.Millisecond)/float64(b.N), "parent-ms/op")
	b.ReportMetric(float64(cpu(syscall.RUSAGE_CHILDREN)-child0)/float64(time.Millisecond)/float64(b.N), "child-ms/op")
}
