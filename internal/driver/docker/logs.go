package docker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/flotilla/flotilla/internal/unit"
)

// timeLayout stamps every log line, in UTC, as the exec driver does.
const timeLayout = "2006-01-02T15:04:05.000000Z07:00"

// maxLineBytes is where a line without a newline is cut.
const maxLineBytes = 16 << 10

// unitLog is a unit's log file: the container's output and the driver's own
// messages, one line each, rotated as the exec driver rotates its logs.
type unitLog struct {
	path string

	mu      sync.Mutex
	maxSize int64
	maxKept int
	f       *os.File
	size    int64
	err     error // the last write error, reported once
}

// line appends "<time> <ident>[<pid>]: <text>" to the log.
func (l *unitLog) line(at time.Time, ident string, pid int, text []byte) {
	b := make([]byte, 0, 64+len(text))
	b = at.UTC().AppendFormat(b, timeLayout)
	b = append(b, ' ')
	b = append(b, ident...)
	b = append(b, '[')
	b = strconv.AppendInt(b, int64(pid), 10)
	b = append(b, "]: "...)
	b = append(b, bytes.TrimRight(text, "\r\n")...)
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.write(b); err != nil && l.err == nil {
		l.err = err
	}
}

func (l *unitLog) write(b []byte) error {
	if l.f != nil && l.size+int64(len(b)) > l.maxSize && l.size > 0 {
		l.f.Close()
		l.f = nil
		l.rotate()
	}
	if l.f == nil {
		f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			return err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return err
		}
		l.f, l.size = f, st.Size()
		if l.size > 0 && l.size+int64(len(b)) > l.maxSize {
			l.f.Close()
			l.f = nil
			l.rotate()
			return l.write(b)
		}
	}
	n, err := l.f.Write(b)
	l.size += int64(n)
	return err
}

// rotate shifts path.N to path.N+1 (dropping those past maxKept) and path
// to path.1; with maxKept 0 the full log is dropped.
func (l *unitLog) rotate() {
	if l.maxKept <= 0 {
		os.Remove(l.path)
		return
	}
	os.Remove(l.path + "." + strconv.Itoa(l.maxKept))
	for i := l.maxKept - 1; i >= 1; i-- {
		os.Rename(l.path+"."+strconv.Itoa(i), l.path+"."+strconv.Itoa(i+1))
	}
	os.Rename(l.path, l.path+".1")
}

func (l *unitLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// limits sets the rotation limits from the driver's and the unit's
// settings.
func (l *unitLog) limits(maxBytes int64, maxFiles int, f *unit.File) {
	if f != nil && f.Fleet.LogMaxSize > 0 {
		maxBytes = f.Fleet.LogMaxSize
	}
	if f != nil && f.Fleet.LogMaxFiles != nil {
		maxFiles = *f.Fleet.LogMaxFiles
	}
	l.mu.Lock()
	l.maxSize, l.maxKept = maxBytes, maxFiles
	l.mu.Unlock()
}

// lastOutput returns the time of the last line of the container's output
// (ident name, not the driver's own messages) in the log at path, or the
// zero time: where a copy of the output that a daemon left off resumes.
func lastOutput(path, name string) time.Time {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return time.Time{}
	}
	const tail = 256 << 10
	off := max(st.Size()-tail, 0)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return time.Time{}
	}
	prefix := " " + name + "["
	for len(buf) > 0 {
		i := bytes.LastIndexByte(bytes.TrimRight(buf, "\n"), '\n')
		line := buf[i+1:]
		buf = buf[:max(i, 0)]
		ts, rest, ok := strings.Cut(string(line), " ")
		if !ok || !strings.HasPrefix(" "+rest, prefix) {
			if i < 0 {
				break
			}
			continue
		}
		if t, err := time.Parse(timeLayout, ts); err == nil {
			return t
		}
		if i < 0 {
			break
		}
	}
	return time.Time{}
}

// copyOutput copies a container's output, from after the time since, to
// the unit's log until the container stops (the engine then ends the
// stream) or ctx is done. It returns the time of the last line copied.
// Lines are stamped with the engine's time for them, so a copy resumed by
// another daemon carries on in order; a line within the same microsecond as
// since is taken for one already copied.
func copyOutput(ctx context.Context, cli *client.Client, id, name string, pid int, since time.Time, l *unitLog) (time.Time, error) {
	opts := client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Follow: true, Timestamps: true}
	if !since.IsZero() {
		opts.Since = strconv.FormatInt(since.Unix(), 10) + "." + fmt.Sprintf("%09d", since.Nanosecond())
	}
	rc, err := cli.ContainerLogs(ctx, id, opts)
	if err != nil {
		return since, err
	}
	defer rc.Close()
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, pw, rc)
		pw.CloseWithError(err)
	}()
	defer pr.Close()
	last := since.Truncate(time.Microsecond)
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 0, 4096), maxLineBytes+64)
	sc.Split(scanLinesCut)
	for sc.Scan() {
		ts, text, _ := bytes.Cut(sc.Bytes(), []byte(" "))
		at, err := time.Parse(time.RFC3339Nano, string(ts))
		if err != nil { // a continuation of a cut line has no stamp
			at, text = time.Now(), sc.Bytes()
		}
		if !since.IsZero() && !at.Truncate(time.Microsecond).After(last) {
			continue
		}
		l.line(at, name, pid, text)
		since = at
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return since, err
	}
	return since, nil
}

// scanLinesCut is bufio.ScanLines that cuts a line longer than maxLineBytes
// instead of failing.
func scanLinesCut(data []byte, atEOF bool) (int, []byte, error) {
	if adv, tok, err := bufio.ScanLines(data, atEOF); adv > 0 || tok != nil || err != nil {
		return adv, tok, err
	}
	if len(data) >= maxLineBytes {
		return maxLineBytes, data[:maxLineBytes], nil
	}
	return 0, nil, nil
}

// removeLogs removes a unit's log and its rotated files.
func removeLogs(path string) error {
	var errs []error
	for i := 0; i <= 100; i++ {
		p := path
		if i > 0 {
			p += "." + strconv.Itoa(i)
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
