package execdriver

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/flotilla/flotilla/internal/driver/service"
)

// timeLayout stamps every log line, always in UTC.
const timeLayout = "2006-01-02T15:04:05.000000Z07:00"

// maxLineBytes is where a line without a newline is cut; the rest follows as
// further lines.
const maxLineBytes = 16 << 10

// copyBufBytes is the read buffer of a process's output.
const copyBufBytes = 512

// LogLimits are how much of a unit's log its machine keeps.
type LogLimits struct {
	// MaxBytes is the size at which the log is rotated.
	MaxBytes int64
	// MaxFiles is how many rotated files are kept beside the current one:
	// <unit>.log.1 (the newest) to <unit>.log.<MaxFiles>. With 0 a full log
	// is discarded and begun anew.
	MaxFiles int
}

// journalSink sends a line to the local journald; nil sends nothing.
type journalSink func(ident string, pid int, text []byte) error

// unitLog is a unit's log file, written by every process of the unit and by
// the driver's own events. Lines are written whole, one write each. When a
// write would take the file past the limits' MaxBytes the rotated files are
// shifted (path.1 to path.2 and so on, the oldest beyond MaxFiles removed),
// the file is renamed to path.1 and a new file is begun. The file is opened
// on first write and kept open until close. With a journal sink each line
// also goes to journald.
type unitLog struct {
	path string
	slog *slog.Logger

	mu       sync.Mutex
	lim      LogLimits
	journal  journalSink
	f        *os.File
	size     int64
	failing  bool // the last write failed; log the next failure only after a success
	jfailing bool // the last send to journald failed
	buf      []byte
}

func newUnitLog(path string, lim LogLimits, logger *slog.Logger) *unitLog {
	return &unitLog{path: path, lim: lim, slog: logger}
}

// set changes the limits, which the next write obeys, and the journal sink.
func (l *unitLog) set(lim LogLimits, sink journalSink) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lim, l.journal = lim, sink
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
	} else {
		l.failing = false
	}
	if l.journal != nil {
		if err := l.journal(ident, pid, text); err != nil {
			if !l.jfailing {
				l.slog.Error("cannot send unit log to journald", "err", err)
			}
			l.jfailing = true
		} else {
			l.jfailing = false
		}
	}
}

func (l *unitLog) write(b []byte) error {
	if l.f != nil && l.size > 0 && l.size+int64(len(b)) > l.lim.MaxBytes {
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
		if l.size > 0 && l.size+int64(len(b)) > l.lim.MaxBytes {
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

// rotate closes the file and moves it to path.1, after shifting the older
// ones and removing those beyond MaxFiles; the next write opens a new file.
func (l *unitLog) rotate() error {
	err := l.f.Close()
	l.f, l.size = nil, 0
	keep := l.lim.MaxFiles
	removeRotated(l.path, keep+1) // the oldest kept is overwritten below
	if keep == 0 {
		if rerr := os.Remove(l.path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return fmt.Errorf("rotate log: %w", rerr)
		}
		return err
	}
	for k := keep - 1; k >= 1; k-- {
		from := service.RotatedPath(l.path, k)
		if rerr := os.Rename(from, service.RotatedPath(l.path, k+1)); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return fmt.Errorf("rotate log: %w", rerr)
		}
	}
	if rerr := os.Rename(l.path, service.RotatedPath(l.path, 1)); rerr != nil {
		return fmt.Errorf("rotate log: %w", rerr)
	}
	return err
}

// removeRotated removes the rotated files of the log at path from the
// from-th on (limits may have shrunk, so it looks as far as any limit
// reaches).
func removeRotated(path string, from int) error {
	var first error
	for k := max(from, 1); k <= maxRotated+1; k++ {
		if err := os.Remove(service.RotatedPath(path, k)); err != nil && !errors.Is(err, fs.ErrNotExist) && first == nil {
			first = err
		}
	}
	return first
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
// longer than maxLineBytes are cut into several. When r's read fails with
// errPaused (a handover) it returns the bytes read and not yet logged, the
// start of a line, with paused set.
func (l *unitLog) copyLines(r io.Reader, ident string, pid int) (rest []byte, paused bool) {
	// A small buffer, grown only while a long line is read: an idle unit
	// costs little.
	br := bufio.NewReaderSize(r, copyBufBytes)
	var long []byte // a line longer than the buffer, so far
	for {
		chunk, err := br.ReadSlice('\n')
		if errors.Is(err, errPaused) {
			return append(long, chunk...), true
		}
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
			return nil, false
		}
	}
}
