package bench

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// progress shows what a run is doing, on stderr. On a terminal the status
// line is rewritten in place; elsewhere (a log, CI) a status line is
// printed at most every statusEvery.
type progress struct {
	mu      sync.Mutex
	w       io.Writer
	tty     bool
	prefix  string
	open    bool // a status line is shown (tty)
	last    time.Time
	pending string // last status not printed (not a tty)
}

const statusEvery = 2 * time.Second

func newProgress(w io.Writer) *progress {
	if w == nil {
		w = io.Discard
	}
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progress{w: w, tty: tty}
}

// phase prints a line announcing a step.
func (p *progress) phase(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endLocked()
	fmt.Fprintf(p.w, "%s%s\n", p.prefix, fmt.Sprintf(format, args...))
}

// status shows the state of a step that takes a while.
func (p *progress) status(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.prefix + fmt.Sprintf(format, args...)
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", s)
		p.open = true
		return
	}
	if time.Since(p.last) >= statusEvery {
		fmt.Fprintln(p.w, s)
		p.last = time.Now()
		p.pending = ""
		return
	}
	p.pending = s
}

// endLocked finishes a status line: on a terminal it moves to the next
// line; elsewhere it prints the last status if it was held back.
func (p *progress) endLocked() {
	if p.open {
		fmt.Fprintln(p.w)
		p.open = false
	}
	if p.pending != "" {
		fmt.Fprintln(p.w, p.pending)
		p.pending = ""
	}
	p.last = time.Time{}
}

// done ends the current status line.
func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endLocked()
}
