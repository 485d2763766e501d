package execdriver

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// waitTimeout bounds every wait of the tests; none should come near it.
const waitTimeout = 10 * time.Second

// newUnit makes a unit file running argv; edit adjusts its [Service], and
// systemd's defaults fill what it leaves zero, as the parser would.
func newUnit(name string, argv []string, edit func(*unit.Service)) *unit.File {
	var svc unit.Service
	if argv != nil {
		svc.ExecStart = []unit.Command{cmd(argv...)}
	}
	if edit != nil {
		edit(&svc)
	}
	svc = svc.Defaults()
	f := &unit.File{Name: name, Service: svc}
	sum := sha1.Sum(fmt.Appendf(nil, "%s %+v", name, svc))
	f.Hash = hex.EncodeToString(sum[:])
	return f
}

func cmd(argv ...string) unit.Command { return unit.Command{Argv: argv} }

// sh is a command running a shell script.
func sh(script string) unit.Command { return cmd("/bin/sh", "-c", script) }

// recorder keeps every status a driver notifies.
type recorder struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every status
	seen    []unit.Status
	next    map[string]int // per unit, the first status wait has not consumed
}

func newRecorder() *recorder {
	return &recorder{changed: make(chan struct{}), next: make(map[string]int)}
}

func (r *recorder) notify(st unit.Status) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, st)
	close(r.changed)
	r.changed = make(chan struct{})
}

// wait returns the first status of the unit, after those returned before,
// that satisfies ok.
func (r *recorder) wait(t *testing.T, name string, what string, ok func(unit.Status) bool) unit.Status {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		r.mu.Lock()
		for i := r.next[name]; i < len(r.seen); i++ {
			if st := r.seen[i]; st.Name == name && ok(st) {
				r.next[name] = i + 1
				r.mu.Unlock()
				return st
			}
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("timed out waiting for %s to be %s; it went through:\n%s", name, what, r.history(name))
		}
	}
}

// waitState waits for the unit to reach active/sub.
func (r *recorder) waitState(t *testing.T, name, active, sub string) unit.Status {
	t.Helper()
	return r.wait(t, name, active+"/"+sub, func(st unit.Status) bool { return st.Active == active && st.Sub == sub })
}

// waitEnded waits for a run of the unit to end inactive or failed (a unit
// that never ran is inactive too, without a result).
func (r *recorder) waitEnded(t *testing.T, name, active string) unit.Status {
	t.Helper()
	return r.wait(t, name, active+" after a run", func(st unit.Status) bool { return st.Active == active && st.Result != "" })
}

// states lists the unit's active/sub states notified so far, without
// repeats (a status also changes with its PID or message).
func (r *recorder) states(name string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, st := range r.seen {
		if s := st.Active + "/" + st.Sub; st.Name == name && (len(out) == 0 || out[len(out)-1] != s) {
			out = append(out, s)
		}
	}
	return out
}

func (r *recorder) history(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, st := range r.seen {
		if st.Name == name {
			fmt.Fprintf(&b, "\t%s/%s pid=%d result=%q message=%q hash=%.8s\n", st.Active, st.Sub, st.PID, st.Result, st.Message, st.Hash)
		}
	}
	return b.String()
}

// newTestDriver makes a driver in a temporary directory; edit adjusts its
// config. The driver is closed when the test ends.
func newTestDriver(t *testing.T, edit func(*Config)) (*Driver, *recorder) {
	t.Helper()
	rec := newRecorder()
	cfg := Config{
		Dir:        t.TempDir(),
		Machine:    "m1",
		Notify:     rec.notify,
		Logger:     slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		CgroupRoot: "/nonexistent-cgroup-root-for-tests",
	}
	if edit != nil {
		edit(&cfg)
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d, rec
}

// testWriter sends the driver's log to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func mustLoadStart(t *testing.T, d *Driver, f *unit.File) {
	t.Helper()
	if err := d.Load(f); err != nil {
		t.Fatalf("Load: %v", err)
	}
	if err := d.Start(f.Name); err != nil {
		t.Fatalf("Start: %v", err)
	}
}

// journal returns the unit's whole log.
func journal(t *testing.T, d *Driver, name string) string {
	t.Helper()
	var b bytes.Buffer
	if err := d.Journal(context.Background(), name, -1, false, &b); err != nil {
		t.Fatalf("Journal(%s): %v", name, err)
	}
	return b.String()
}

// waitLog waits for the unit's log to contain s.
func waitLog(t *testing.T, d *Driver, name, s string) {
	t.Helper()
	waitfor.Until(t, waitTimeout, fmt.Sprintf("%q in the log of %s", s, name), func() error {
		if log := journal(t, d, name); !strings.Contains(log, s) {
			return fmt.Errorf("the log:\n%s", log)
		}
		return nil
	})
}

// alive reports whether pid is a process that is not a zombie.
func alive(pid int) bool {
	st, err := readProcStat(pid)
	return err == nil && st.state != 'Z'
}

// waitGone waits for pid to be gone (or a zombie).
func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	waitfor.True(t, waitTimeout, what+" to be gone", func() bool { return !alive(pid) })
}

// readPid reads a number a unit wrote to a file.
func readPid(t *testing.T, path string) int {
	t.Helper()
	var pid int
	waitfor.True(t, waitTimeout, "a pid in "+path, func() bool {
		data, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		_, err = fmt.Sscan(string(data), &pid)
		return err == nil && pid > 0
	})
	return pid
}

// killGroup cleans up after a test that leaves processes behind on purpose.
func killGroup(pgid int) { syscall.Kill(-pgid, syscall.SIGKILL) }
