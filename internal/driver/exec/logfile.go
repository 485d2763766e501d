package execdriver

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"
)

// timeLayout stamps every log line, always in UTC.
const timeLayout = "2006-01-02T15:04:05.000000Z07:00"

// maxLineBytes is where a line without a newline is cut; the rest follows as
// further lines.
const maxLineBytes = 16 << 10

// copyBufBytes is the read buffer of a process's output.
const copyBufBytes = 512

// unitLog is a unit's log file, written by every process of the unit and by
// the driver's own events. Lines are written whole, one write each. When a
// write would take the file past max bytes the file is renamed to path.1
// (replacing any older one) and a new file is begun. The file is opened on
// first write and kept open until close.
type unitLog struct {
	path string
	max  int64
	slog *slog.Logger

	mu      sync.Mutex
	f       *os.File
	size    int64
	failing bool // the last write failed; log the next failure only after a success
	buf     []byte
}

func newUnitLog(path string, max int64, logger *slog.Logger) *unitLog {
	return &unitLog{path: path, max: max, slog: logger}
}

// line appends "<time> <ident>[<pid>]: <text>" to the log.
func (l *unitLog) line(ident string, pid int, text []byte) {
	now := time.Now().UTC()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := now.AppendFormat(l.buf[:0], timeLayout)
	b = append(b, ' ')
	b = append(b, ident...)
	b = append(b, '[')
	b = strconv.AppendInt(b, int64(pid), 10)
	b = append(b, "]: "...)
	b = append(b, text...)
	b = append(b, '\n')
	l.buf = b
	if err := l.write(b); err != nil {
		if !l.failing {
			l.slog.Error("cannot write unit log", "path", l.path, "err", err)
		}
		l.failing = true
		return
	}
	l.failing = false
}

func (l *unitLog) write(b []byte) error {
	if l.f != nil && l.size > 0 && l.size+int64(len(b)) > l.max {
		if err := l.rotate(); err != nil {
			return err
		}
	}
	if l.f == nil {
		f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			return err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return err
		}
		l.f, l.size = f, fi.Size()
		if l.size > 0 && l.size+int64(len(b)) > l.max {
			if err := l.rotate(); err != nil {
				return err
			}
			return l.write(b)
		}
	}
	n, err := l.f.Write(b)
	l.size += int64(n)
	return err
}

// rotate closes the file and moves it to path.1; the next write opens a new one.
func (l *unitLog) rotate() error {
	err := l.f.Close()
	l.f, l.size = nil, 0
	if rerr := os.Rename(l.path, l.path+".1"); rerr != nil {
		return fmt.Errorf("rotate log: %w", rerr)
	}
	return err
}

// close closes the file; a later write opens it again.
func (l *unitLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		l.f.Close()
		l.f, l.size = nil, 0
	}
}

// copyLines reads r until EOF and logs each line under ident[pid]. Lines
// longer than maxLineBytes are cut into several.
func (l *unitLog) copyLines(r io.Reader, ident string, pid int) {
	// A small buffer, grown only while a long line is read: an idle unit
	// costs little.
	br := bufio.NewReaderSize(r, copyBufBytes)
	var long []byte // a line longer than the buffer, so far
	for {
		chunk, err := br.ReadSlice('\n')
		full := errors.Is(err, bufio.ErrBufferFull)
		if !full && len(long) == 0 {
			if len(chunk) > 0 {
				l.line(ident, pid, bytes.TrimSuffix(chunk, []byte{'\n'}))
			}
		} else {
			long = append(long, chunk...)
			for len(long) >= maxLineBytes && (len(long) > maxLineBytes || long[maxLineBytes-1] != '\n') {
				l.line(ident, pid, long[:maxLineBytes])
				long = append(long[:0], long[maxLineBytes:]...)
			}
			if !full && len(long) > 0 {
				l.line(ident, pid, bytes.TrimSuffix(long, []byte{'\n'}))
				long = long[:0]
			}
			if len(long) == 0 && cap(long) > copyBufBytes {
				long = nil
			}
		}
		if err != nil && !full {
			return
		}
	}
}
