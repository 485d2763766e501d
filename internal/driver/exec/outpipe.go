package execdriver

import (
	"errors"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// outPipe is the read end of an output pipe of a unit's processes, read by
// its copier (copyLines). It tells when what the pipe held at some moment
// is logged: a process's exit is acted on, and a unit forgotten, only once
// all the output written before is in the log, however far behind the
// copier is (a full pipe, a log rotating at every few lines, a loaded
// machine), and without waiting for the end of the pipe, which children or
// escaped processes may hold open.
type outPipe struct {
	f *os.File

	mu      sync.Mutex
	asked   []chan struct{} // drain requests not yet measured
	waiting []drainWait     // measured, not yet reached
	ended   bool            // the copier is done: every request is answered at once
	pausing bool            // pause asked: the copier stops reading (a handover)
	rest    chan []byte     // the copier's unlogged bytes once it has paused
	closed  chan struct{}   // closed once the copier has ended with the pipe

	n int64 // bytes read so far; the copier's alone
}

// drainWait is a drain request: done is closed once n reaches target.
type drainWait struct {
	target int64
	done   chan struct{}
}

func newOutPipe(f *os.File) *outPipe {
	return &outPipe{f: f, rest: make(chan []byte, 1), closed: make(chan struct{})}
}

// errPaused ends the copier's reads when the pipe is paused for a
// handover; the pipe stays open.
var errPaused = errors.New("output pipe paused for a handover")

// pause makes the copier stop reading, at once if it waits for more: its
// Read returns errPaused, and the copier hands the bytes it read but did not
// log (a line not yet ended) to rest. The pipe stays open for the next
// process image.
func (p *outPipe) pause() {
	p.mu.Lock()
	p.pausing = true
	p.mu.Unlock()
	p.f.SetReadDeadline(time.Unix(1, 0))
}

// resume undoes pause (a handover that did not happen): the copier is
// started again by the caller.
func (p *outPipe) resume() {
	p.mu.Lock()
	p.pausing = false
	p.mu.Unlock()
	p.f.SetReadDeadline(time.Time{})
}

func (p *outPipe) paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pausing
}

// drain returns a channel closed once every line the pipe holds now is
// logged (or the copier has ended). It interrupts a read that waits for
// more, so that the copier measures what is in the pipe.
func (p *outPipe) drain() <-chan struct{} {
	ch := make(chan struct{})
	p.mu.Lock()
	if p.ended {
		close(ch)
	} else {
		p.asked = append(p.asked, ch)
	}
	p.mu.Unlock()
	p.f.SetReadDeadline(time.Unix(1, 0)) // in the past: the read returns at once
	return ch
}

// Read is the copier's read of the pipe. bufio calls it only once the lines
// read before are all handed out, and copyLines logs each before it asks for
// the next: so when n reaches a request's target, the lines that were in the
// pipe at the request are logged.
func (p *outPipe) Read(b []byte) (int, error) {
	for {
		if p.paused() {
			return 0, errPaused
		}
		p.settle()
		n, err := p.f.Read(b)
		p.n += int64(n)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// Woken by drain: clear the deadline before measuring (a drain
			// after this sets it anew, and is measured at the top).
			p.f.SetReadDeadline(time.Time{})
			if n == 0 {
				continue
			}
			err = nil
		}
		if err != nil {
			p.end()
		}
		return n, err
	}
}

// settle measures the new drain requests and answers those whose lines are
// all read (and so logged).
func (p *outPipe) settle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ch := range p.asked {
		p.waiting = append(p.waiting, drainWait{target: p.n + p.pending(), done: ch})
	}
	p.asked = p.asked[:0]
	keep := p.waiting[:0]
	for _, w := range p.waiting {
		if p.n >= w.target {
			close(w.done)
		} else {
			keep = append(keep, w)
		}
	}
	p.waiting = keep
}

// pending is how many bytes the pipe holds (FIONREAD, which x/sys/unix
// names TIOCINQ on Linux); 0 when it cannot tell (then a drain waits for
// nothing more, as if the pipe were empty).
func (p *outPipe) pending() int64 {
	rc, err := p.f.SyscallConn()
	if err != nil {
		return 0
	}
	var n int
	var ierr error
	if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCINQ) }); err != nil || ierr != nil {
		return 0
	}
	return int64(n)
}

// end answers every request: the copier is done.
func (p *outPipe) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = true
	for _, ch := range p.asked {
		close(ch)
	}
	for _, w := range p.waiting {
		close(w.done)
	}
	p.asked, p.waiting = nil, nil
}

// Close cuts the pipe off: the copier's read ends.
func (p *outPipe) Close() error { return p.f.Close() }
