package execdriver

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDrainPipeHeldOpen: a drain ends once what the pipe held is logged,
// though a writer keeps the pipe open and writing (a child or an escaped
// process of the unit), and at once for an idle pipe or an ended copier.
func TestDrainPipeHeldOpen(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "u.log")
	l := newUnitLog(path, LogLimits{MaxBytes: DefaultMaxLogBytes, MaxFiles: 1}, slog.New(slog.DiscardHandler))
	defer l.close()
	out := newOutPipe(r)
	copied := make(chan struct{})
	go func() { defer close(copied); l.copyLines(out, "u", 1) }()

	// Idle: the copier waits in a read, with nothing to log.
	select {
	case <-out.drain():
	case <-time.After(5 * time.Second):
		t.Fatal("drain of an empty pipe did not end")
	}
	// A writer that never stops, after a marked line.
	fmt.Fprintln(w, "the marked line")
	stop := make(chan struct{})
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
				fmt.Fprintf(w, "more %d\n", i)
			}
		}
	}()
	select {
	case <-out.drain():
	case <-time.After(5 * time.Second):
		t.Fatal("drain of a pipe held open and written did not end")
	}
	if b, err := os.ReadFile(path); err != nil || !strings.Contains(string(b), "u[1]: the marked line\n") {
		t.Errorf("the marked line is not logged once drained (%v)", err)
	}
	close(stop)
	<-wrote
	w.Close()
	<-copied
	select {
	case <-out.drain():
	case <-time.After(time.Second):
		t.Fatal("drain after the copier ended did not end at once")
	}
}
