package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/flotilla/flotilla/internal/driver"
	"github.com/flotilla/flotilla/internal/unit"
)

// DefaultMaxLogBytes is the size at which a driver rotates a unit's log by
// default.
const DefaultMaxLogBytes = 16 << 20

// DefaultMaxLogFiles is how many rotated files of a unit's log a driver
// keeps by default.
const DefaultMaxLogFiles = 1

// CheckName rejects a unit name that cannot be used as a file name, which a
// driver makes of it.
func CheckName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || len(name) > 240 {
		return fmt.Errorf("unit name %q cannot be used as a file name", name)
	}
	return nil
}

// LogPath is the log of the unit name in the driver state directory dir;
// its rotated files are RotatedPath of it.
func LogPath(dir, name string) string {
	return filepath.Join(dir, "logs", name+".log")
}

// RotatedPath is the k-th newest rotated file of the log at path.
func RotatedPath(path string, k int) string {
	return path + "." + strconv.Itoa(k)
}

// ReadJournal writes the journal of the unit name from the log a driver
// keeps in its state directory dir, as WriteJournal does; the driver may
// run in another process. loaded tells whether that driver has the unit
// loaded: a unit that is not and has no log is driver.ErrUnknownUnit.
func ReadJournal(ctx context.Context, dir, name string, lines int, follow bool, w io.Writer, loaded bool) error {
	if err := CheckName(name); err != nil {
		return fmt.Errorf("journal %s: %w", name, err)
	}
	path := LogPath(dir, name)
	if !loaded {
		_, err1 := os.Stat(path)
		_, err2 := os.Stat(RotatedPath(path, 1))
		if errors.Is(err1, fs.ErrNotExist) && errors.Is(err2, fs.ErrNotExist) {
			return fmt.Errorf("journal %s: %w", name, driver.ErrUnknownUnit)
		}
	}
	if err := WriteJournal(ctx, path, lines, follow, w); err != nil {
		return fmt.Errorf("journal %s: %w", name, err)
	}
	return nil
}

// JournalPoll is how often a followed journal looks for new lines.
const JournalPoll = 150 * time.Millisecond

// WriteJournal writes the last n complete lines of the log at path (all of
// them when n < 0), reaching into the rotated path.1, path.2 and so on when
// the current file holds fewer; with follow it then writes lines as they are appended, across
// rotations, until ctx is done. A line is written only once it is complete.
// Errors writing to w end it.
func WriteJournal(ctx context.Context, path string, n int, follow bool, w io.Writer) error {
	t := &tailer{w: w}
	defer t.close()
	f, err := os.Open(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := writeRotated(path, 1, n, w); err != nil {
			return err
		}
	case err != nil:
		return err
	default:
		t.f = f
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		start, end, found, err := lastLines(f, fi.Size(), n)
		if err != nil {
			return err
		}
		if n < 0 || found < n {
			if err := writeRotated(path, 1, rest(n, found), w); err != nil {
				return err
			}
		}
		if _, err := io.Copy(w, io.NewSectionReader(f, start, end-start)); err != nil {
			return err
		}
		t.off = end
	}
	if !follow {
		return nil
	}
	tick := time.NewTicker(JournalPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if err := t.poll(path); err != nil {
			return err
		}
	}
}

// rest is how many lines are still wanted of n (-1: all) when found were.
func rest(n, found int) int {
	if n < 0 {
		return -1
	}
	return n - found
}

// writeRotated writes the last n lines (all when n < 0) of the rotated files
// of the log at path from the k-th newest on, the oldest first: the older
// files are read only when path.k holds fewer than n.
func writeRotated(path string, k, n int, w io.Writer) error {
	if n == 0 || k > unit.MaxLogMaxFiles+1 {
		return nil
	}
	f, err := os.Open(RotatedPath(path, k))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	start, end, found, err := lastLines(f, fi.Size(), n)
	if err != nil {
		return err
	}
	if n < 0 || found < n {
		if err := writeRotated(path, k+1, rest(n, found), w); err != nil {
			return err
		}
	}
	_, err = io.Copy(w, io.NewSectionReader(f, start, end-start))
	return err
}

// lastLines finds the last n complete lines of the first size bytes of f
// (all complete lines when n < 0): they span [start, end), where end is just
// after the last newline. found is how many lines that is (at most n).
func lastLines(f io.ReaderAt, size int64, n int) (start, end int64, found int, err error) {
	const chunk = 32 << 10
	buf := make([]byte, chunk)
	end = -1
	for pos := size; pos > 0; {
		size := min(chunk, pos)
		pos -= size
		if _, err := f.ReadAt(buf[:size], pos); err != nil && err != io.EOF {
			return 0, 0, 0, err
		}
		for i := size - 1; i >= 0; i-- {
			if buf[i] != '\n' {
				continue
			}
			if end < 0 {
				end = pos + i + 1
				if n < 0 {
					return 0, end, -1, nil
				}
				if n == 0 {
					return end, end, 0, nil
				}
				continue
			}
			found++
			if found == n {
				return pos + i + 1, end, found, nil
			}
		}
	}
	if end < 0 {
		return 0, 0, 0, nil // no complete line
	}
	return 0, end, found + 1, nil
}

// tailer follows a log file by polling, in complete lines.
type tailer struct {
	w       io.Writer
	f       *os.File // nil until the file exists
	off     int64    // next byte of f to read
	pending []byte   // an incomplete last line
	buf     []byte
}

// poll writes what was appended since the last poll. When the file at path is
// no longer the open one (the log was rotated), the rest of the old file is
// written and the new one is followed from its start.
func (t *tailer) poll(path string) error {
	if t.f == nil {
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		t.f, t.off = f, 0
	}
	if err := t.drain(); err != nil {
		return err
	}
	fi, err := os.Stat(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	open, err := t.f.Stat()
	if err != nil {
		return err
	}
	switch {
	case fi != nil && !os.SameFile(fi, open):
		// Rotated: finish the old file, then follow the new one.
		if err := t.drain(); err != nil {
			return err
		}
		if err := t.flush(); err != nil {
			return err
		}
		t.f.Close()
		t.f, t.off = nil, 0
		return t.poll(path)
	case open.Size() < t.off:
		// Truncated in place: start over.
		t.off, t.pending = 0, t.pending[:0]
	}
	return nil
}

// drain writes the complete lines appended to f since off.
func (t *tailer) drain() error {
	if t.buf == nil {
		t.buf = make([]byte, 32<<10)
	}
	for {
		n, err := t.f.ReadAt(t.buf, t.off)
		if n > 0 {
			t.off += int64(n)
			t.pending = append(t.pending, t.buf[:n]...)
			if i := bytes.LastIndexByte(t.pending, '\n'); i >= 0 {
				if _, werr := t.w.Write(t.pending[:i+1]); werr != nil {
					return werr
				}
				t.pending = append(t.pending[:0], t.pending[i+1:]...)
			}
		}
		if err == io.EOF || n == 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (t *tailer) close() {
	if t.f != nil {
		t.f.Close()
	}
}

// flush writes an incomplete last line as a line of its own.
func (t *tailer) flush() error {
	if len(t.pending) == 0 {
		return nil
	}
	_, err := t.w.Write(append(t.pending, '\n'))
	t.pending = t.pending[:0]
	return err
}
