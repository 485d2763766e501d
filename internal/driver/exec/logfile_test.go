package execdriver

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/flotilla/flotilla/internal/driver/service"
	"github.com/flotilla/flotilla/internal/waitfor"
)

func TestUnitLogRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "u.log")
	l := newUnitLog(path, LogLimits{MaxBytes: 1024, MaxFiles: 1}, slog.New(slog.DiscardHandler))
	defer l.close()
	for i := range 100 {
		l.line("u.service", 42, fmt.Appendf(nil, "message %03d", i))
	}
	cur, _ := os.ReadFile(path)
	old, err := os.ReadFile(path + ".1")
	if err != nil {
		t.Fatalf("no rotated log: %v", err)
	}
	if len(cur) > 1024 || len(old) > 1024 {
		t.Errorf("log sizes %d and %d, want at most 1024 each", len(cur), len(old))
	}
	re := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z u\.service\[42\]: message (\d{3})$`)
	lines := strings.Split(strings.TrimSuffix(string(old)+string(cur), "\n"), "\n")
	last := -1
	for i, line := range lines {
		m := re.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("line %q does not have the log format", line)
		}
		n, _ := strconv.Atoi(m[1])
		if i > 0 && n != last+1 {
			t.Fatalf("line %q follows message %03d", line, last)
		}
		last = n
	}
	if last != 99 {
		t.Errorf("last message %d, want 99", last)
	}

	// A reopened log appends, and rotates by its size on disk.
	l.close()
	l2 := newUnitLog(path, LogLimits{MaxBytes: 1024, MaxFiles: 1}, slog.New(slog.DiscardHandler))
	defer l2.close()
	for range 20 {
		l2.line("u.service", 1, []byte("more"))
	}
	if fi, _ := os.Stat(path); fi.Size() > 1024 {
		t.Errorf("reopened log grew to %d bytes, want at most 1024", fi.Size())
	}
}

func TestCopyLinesCutsLongLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "u.log")
	l := newUnitLog(path, LogLimits{MaxBytes: DefaultMaxLogBytes, MaxFiles: 1}, slog.New(slog.DiscardHandler))
	defer l.close()
	long := strings.Repeat("x", maxLineBytes+10)
	l.copyLines(strings.NewReader("a\n"+long+"\nlast without newline"), "u", 7)
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 4 || !strings.HasSuffix(lines[0], "u[7]: a") || !strings.HasSuffix(lines[1], "u[7]: "+long[:maxLineBytes]) ||
		!strings.HasSuffix(lines[2], "u[7]: xxxxxxxxxx") || !strings.HasSuffix(lines[3], "u[7]: last without newline") {
		t.Errorf("copied lines = %d: %.80q...", len(lines), lines)
	}
	// A line of exactly the limit is one line; an empty line stays one; a
	// line cut at the limit with nothing left over is followed by an empty
	// one, as the newline comes after the cut.
	path2 := filepath.Join(t.TempDir(), "v.log")
	l2 := newUnitLog(path2, LogLimits{MaxBytes: DefaultMaxLogBytes, MaxFiles: 1}, slog.New(slog.DiscardHandler))
	defer l2.close()
	exact := strings.Repeat("y", maxLineBytes-1)
	l2.copyLines(strings.NewReader(exact+"\n\n"+strings.Repeat("z", 3*maxLineBytes)+"\nend\n"), "v", 8)
	data, _ = os.ReadFile(path2)
	lines = strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	want := []string{exact, "", strings.Repeat("z", maxLineBytes), strings.Repeat("z", maxLineBytes), strings.Repeat("z", maxLineBytes), "", "end"}
	if len(lines) != len(want) {
		t.Fatalf("copied %d lines, want %d", len(lines), len(want))
	}
	for i, w := range want {
		if !strings.HasSuffix(lines[i], "v[8]: "+w) {
			t.Errorf("line %d = %.60q, want it to end %.20q (%d bytes)", i, lines[i], w, len(w))
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func readFile(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}

func TestWriteJournalFollowAcrossRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "u.log")
	l := newUnitLog(path, LogLimits{MaxBytes: 1024, MaxFiles: 1}, slog.New(slog.DiscardHandler))
	defer l.close()
	l.line("u", 1, []byte("before 1"))
	l.line("u", 1, []byte("before 2"))

	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- service.WriteJournal(ctx, path, 1, true, &out) }()
	waitfor.True(t, waitTimeout, "the journal to begin", func() bool { return strings.Contains(out.String(), "before 2") })

	// Written in bursts between polls: each burst rotates the log at most once,
	// and only one older file is kept.
	for burst := range 6 {
		for i := range 8 {
			l.line("u", 1, fmt.Appendf(nil, "after %02d", burst*8+i))
		}
		last := fmt.Sprintf("after %02d\n", burst*8+7)
		waitfor.True(t, waitTimeout, "the followed journal to show "+last, func() bool { return strings.Contains(out.String(), last) })
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("service.WriteJournal: %v", err)
	}
	got := out.String()
	var want []string
	want = append(want, "before 2")
	for i := range 48 {
		want = append(want, fmt.Sprintf("after %02d", i))
	}
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("followed %d lines, want %d:\n%s\n.1:\n%s\ncurrent:\n%s", len(lines), len(want), got, readFile(path+".1"), readFile(path))
	}
	for i, w := range want {
		if !strings.HasSuffix(lines[i], "]: "+w) {
			t.Fatalf("line %d = %q, want one ending in %q", i, lines[i], w)
		}
	}
}
