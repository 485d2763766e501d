package supervisor

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/waitfor"
)

// TestSupervisorRSS measures the supervisor's memory per running unit. It
// runs only when FLOTILLA_SUPERVISOR_RSS_UNITS is set (e.g. 1000), as
// docs/benchmarks.md says:
//
//	FLOTILLA_SUPERVISOR_RSS_UNITS=1000 go test -count=1 -run TestSupervisorRSS -v ./internal/supervisor/
func TestSupervisorRSS(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("FLOTILLA_SUPERVISOR_RSS_UNITS"))
	if n <= 0 {
		t.Skip("set FLOTILLA_SUPERVISOR_RSS_UNITS to the number of units to measure with")
	}
	dir := newTestDir(t)
	c, _ := newClient(t, dir)
	sup := supervisorPID(t, dir)
	time.Sleep(time.Second) // a measurement: the RSS of a supervisor settled, no condition to wait for
	base := vmRSS(t, sup)

	for i := range n {
		name := fmt.Sprintf("sleep%04d.service", i)
		mustLoadStart(t, c, parseUnit(t, name, "[Service]\nExecStart=/bin/sleep 3600\n"))
	}
	waitfor.Until(t, 5*time.Minute, fmt.Sprintf("%d units active", n), func() error {
		active := 0
		for _, st := range c.States() {
			if st.Active == "active" && st.PID != 0 {
				active++
			}
		}
		if active != n {
			return fmt.Errorf("%d of %d active", active, n)
		}
		return nil
	})
	time.Sleep(5 * time.Second) // a measurement: let the heap settle before reading RSS
	rss := vmRSS(t, sup)
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", sup))
	threads, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", sup))
	t.Logf("supervisor RSS: %.1f MiB with no units, %.1f MiB with %d running units: %.1f KiB per unit; %d open files, %d threads",
		float64(base)/(1<<20), float64(rss)/(1<<20), n, float64(rss-base)/float64(n)/1024, len(fds), len(threads))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	begin := time.Now()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close stopped %d units and the supervisor in %v", n, time.Since(begin).Round(time.Millisecond))
}

// vmRSS reads a process's resident set size in bytes.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
