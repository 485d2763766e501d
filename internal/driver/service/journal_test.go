package service

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/waitfor"
)

func TestLastLines(t *testing.T) {
	tests := []struct {
		data  string
		n     int
		want  string
		found int
	}{
		{"", 3, "", 0},
		{"partial", 3, "", 0},
		{"a\nb\nc\n", 2, "b\nc\n", 2},
		{"a\nb\nc\n", 3, "a\nb\nc\n", 3},
		{"a\nb\nc\n", 5, "a\nb\nc\n", 3},
		{"a\nb\nc\npart", 2, "b\nc\n", 2},
		{"a\nb\nc\n", 0, "", 0},
		{"a\nb\nc\npart", -1, "a\nb\nc\n", -1},
		{"\n\n", 1, "\n", 1},
	}
	for _, tt := range tests {
		start, end, found, err := lastLines(strings.NewReader(tt.data), int64(len(tt.data)), tt.n)
		if err != nil {
			t.Fatal(err)
		}
		if got := tt.data[start:end]; got != tt.want || found != tt.found {
			t.Errorf("lastLines(%q, %d) = %q, %d lines; want %q, %d", tt.data, tt.n, got, found, tt.want, tt.found)
		}
	}

	// Across chunk boundaries.
	var b strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	data := b.String()
	start, end, found, err := lastLines(strings.NewReader(data), int64(len(data)), 10001)
	if err != nil || found != 10001 || !strings.HasPrefix(data[start:end], "line 9999\n") || end != int64(len(data)) {
		t.Errorf("lastLines(20000 lines, 10001) = [%d:%d] %d lines, %v; want from line 9999", start, end, found, err)
	}
}

func TestWriteJournal(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "u.log")
	os.WriteFile(path+".1", []byte("r1\nr2\nr3\n"), 0o644)
	os.WriteFile(path, []byte("c1\nc2\npartial"), 0o644)
	tests := []struct {
		n    int
		want string
	}{
		{0, ""},
		{1, "c2\n"},
		{2, "c1\nc2\n"},
		{4, "r2\nr3\nc1\nc2\n"},
		{100, "r1\nr2\nr3\nc1\nc2\n"},
		{-1, "r1\nr2\nr3\nc1\nc2\n"},
	}
	for _, tt := range tests {
		var b bytes.Buffer
		if err := WriteJournal(context.Background(), path, tt.n, false, &b); err != nil {
			t.Fatal(err)
		}
		if b.String() != tt.want {
			t.Errorf("WriteJournal(%d) = %q, want %q", tt.n, b.String(), tt.want)
		}
	}

	// Only the rotated file left.
	os.Remove(path)
	var b bytes.Buffer
	if err := WriteJournal(context.Background(), path, 2, false, &b); err != nil || b.String() != "r2\nr3\n" {
		t.Errorf("WriteJournal(2) without a current file = %q, %v; want the rotated file's tail", b.String(), err)
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

func TestWriteJournalFollowWaitsForFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "u.log")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- WriteJournal(ctx, path, 10, true, &out) }()
	// Once it waits for the next poll, it has looked for the file and not found it.
	waitfor.Until(t, 10*time.Second, "the follower to wait for the file", waitfor.Parked("service.WriteJournal"))
	os.WriteFile(path, []byte("hello\nhalf"), 0o644)
	waitfor.True(t, 10*time.Second, "the journal to show the new file's complete line", func() bool { return out.String() == "hello\n" })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// errWriter fails every write.
type errWriter struct{}

func (errWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }

func TestWriteJournalWriterError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "u.log")
	os.WriteFile(path, []byte("a\n"), 0o644)
	if err := WriteJournal(context.Background(), path, -1, true, errWriter{}); err == nil {
		t.Error("WriteJournal into a failing writer returned nil")
	}
}
