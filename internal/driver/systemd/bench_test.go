package systemddriver

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/systemdtest"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// benchEnv sets how many units TestInsideBench starts and stops; unset, it
// is skipped (BenchmarkStartStop sets it).
const benchEnv = "FLOTILLA_SYSTEMD_BENCH"

// BenchmarkStartStop starts and then stops 1,000 units (ExecStart=/bin/sleep
// infinity) through the driver in a systemd container, as the agent drives
// it (one LoadBatch, then the starts and the stops from several
// goroutines), and the same with a plain loop of systemd-run and systemctl
// stop, and reports the seconds each took. Run it once:
//
//	go test -run '^$' -bench BenchmarkStartStop -benchtime 1x ./internal/driver/systemd/
func BenchmarkStartStop(b *testing.B) {
	c := systemdtest.Start(b)
	bin := systemdtest.BuildStatic(b, b.TempDir(), ".", "systemd.test", true)
	c.CopyIn(bin, testBinary)
	n := 1000
	if v, err := strconv.Atoi(os.Getenv(benchEnv)); err == nil && v > 0 {
		n = v
	}
	b.ResetTimer()
	for range b.N {
		out, err := c.ExecEnv([]string{insideEnv + "=1", benchEnv + "=" + strconv.Itoa(n)},
			testBinary, "-test.run", "^TestInsideBench$", "-test.v", "-test.timeout=20m")
		if err != nil {
			b.Fatalf("%v\n%s", err, out)
		}
		b.Log(out)
		for _, m := range regexp.MustCompile(`(?m)^\s*\S+: RESULT (\S+) ([0-9.]+)s$`).FindAllStringSubmatch(out, -1) {
			v, _ := strconv.ParseFloat(m[2], 64)
			b.ReportMetric(v, m[1]+"-s")
		}
	}
}

// counter keeps each unit's last Active/Sub.
type counter struct {
	mu   sync.Mutex
	last map[string]string
}

func (c *counter) notify(s unit.Status) {
	c.mu.Lock()
	c.last[s.Name] = s.Active + "/" + s.Sub
	c.mu.Unlock()
}

func (c *counter) count(state string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.last {
		if s == state {
			n++
		}
	}
	return n
}

// agentWorkers is how many starts or stops the agent has in flight on a
// driver.BatchLoader (internal/agent's passWorkers).
const agentWorkers = 8

// fanOut calls f(0) ... f(n-1) from agentWorkers goroutines.
func fanOut(t *testing.T, n int, f func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range agentWorkers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

func TestInsideBench(t *testing.T) {
	inside(t)
	n, _ := strconv.Atoi(os.Getenv(benchEnv))
	if n <= 0 {
		t.Skip("BenchmarkStartStop runs it (" + benchEnv + "=N)")
	}
	c := &counter{last: map[string]string{}}
	d, err := New(Config{Machine: "m1", Notify: c.notify})
	if err != nil {
		t.Fatal(err)
	}
	name := func(i int) string { return fmt.Sprintf("bench-%04d.service", i) }
	result := func(what string, d time.Duration) { t.Logf("RESULT %s %.2fs", what, d.Seconds()) }
	waitCount := func(state string) {
		waitfor.Until(t, 10*time.Minute, "units "+state, func() error {
			if got := c.count(state); got < n {
				return fmt.Errorf("%d of %d units %s", got, n, state)
			}
			return nil
		})
	}

	// As the agent does with a driver.BatchLoader: the pass's loads in one
	// LoadBatch, then its starts from agentWorkers goroutines (the agent's
	// passWorkers); the time runs until the driver has reported every unit
	// running. Then the same with the stops.
	start := time.Now()
	files := make([]*unit.File, n)
	for i := range n {
		f, err := unit.Parse(name(i), []byte("[Service]\nExecStart=/bin/sleep infinity\n"))
		if err != nil {
			t.Fatal(err)
		}
		files[i] = f
	}
	for i, err := range d.LoadBatch(files) {
		if err != nil {
			t.Fatalf("load %s: %v", files[i].Name, err)
		}
	}
	result("driver-load", time.Since(start))
	fanOut(t, n, func(i int) error { return d.Start(name(i)) })
	waitCount("active/running")
	result("driver-start", time.Since(start))
	start = time.Now()
	fanOut(t, n, func(i int) error { return d.Stop(name(i)) })
	waitCount("inactive/dead")
	result("driver-stop", time.Since(start))
	start = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	result("driver-close", time.Since(start))

	// The same with systemd's own tools, one command per unit.
	start = time.Now()
	for i := range n {
		if out, err := runOut("systemd-run", "--quiet", "--unit", fmt.Sprintf("plain-%04d", i), "/bin/sleep", "infinity"); err != nil {
			t.Fatalf("systemd-run: %v %s", err, out)
		}
	}
	result("systemd-run-start", time.Since(start))
	start = time.Now()
	for i := range n {
		if out, err := runOut("systemctl", "stop", fmt.Sprintf("plain-%04d", i)); err != nil {
			t.Fatalf("systemctl stop: %v %s", err, out)
		}
	}
	result("systemctl-stop", time.Since(start))
}
