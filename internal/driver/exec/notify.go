package execdriver

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flotilla/flotilla/internal/driver/service"
	"github.com/flotilla/flotilla/internal/unit"
)

// The units' side of sd_notify(3), as systemd's service manager has it.
//
// The driver has one datagram socket for all its units, as systemd has
// /run/systemd/notify, bound lazily (the first run that needs it) to an
// abstract name derived from Dir: abstract, so that neither file modes
// (a unit running as another User=) nor the paths hidden from units (the
// daemon's data directory, Config.Inaccessible) keep a unit from it, and
// so that the name is the same for the next image of a supervisor that
// upgrades in place (Adopt binds it again). The sender of each datagram is
// known from its credentials (SO_PASSCRED), which the kernel fills in and
// a sender cannot forge: a message counts only when it comes from a
// process of the unit NotifyAccess= allows (main: the main process, the
// default; exec: the main or control process; all: any process in one of
// the run's process groups).
//
// Messages heeded: READY=1 (Type=notify and notify-reload units are
// activating/start until it), STATUS=… (the unit's Status.Message while
// the run has not failed), WATCHDOG=1 (resets the watchdog),
// WATCHDOG=trigger (the watchdog fires at once) and WATCHDOG_USEC=… (the
// run's watchdog limit). Others (MAINPID=, STOPPING=1, RELOADING=1,
// EXTEND_TIMEOUT_USEC=, FDSTORE=1, …) are ignored, and descriptors sent
// along are closed, which answers BARRIER=1.

// notifyMaxMessage is the largest message read, as systemd's
// NOTIFY_BUFFER_MAX; longer ones are dropped.
const notifyMaxMessage = 4096

// notifyMaxQueued bounds the messages waiting for a unit's goroutine: a
// unit that floods the socket loses the excess, not the driver memory.
const notifyMaxQueued = 128

// notifyName is the abstract socket name (NOTIFY_SOCKET's value) of the
// driver with state directory dir.
func notifyName(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return "@flotilla/notify/" + hex.EncodeToString(sum[:10])
}

// ownPIDVar is the variable a main process with WatchdogSec= gets its own
// PID in.
const ownPIDVar = "WATCHDOG_PID"

// closeNotify closes the socket and waits for its reader (Close).
func (d *Driver) closeNotify() {
	d.notifyMu.Lock()
	c, done := d.notifyConn, d.notifyDone
	d.notifyConn = nil
	d.notifyErr = ErrClosed
	d.notifyMu.Unlock()
	if c != nil {
		c.Close()
		<-done
	}
}

// notifyMsg is a datagram from process pid.
type notifyMsg struct {
	pid  int
	text string
}

// notifySocketLocked returns NOTIFY_SOCKET's value, binding the socket on
// first use. Callers hold d.notifyMu.
func (d *Driver) notifySocketLocked() (string, error) {
	if d.notifyConn != nil {
		return d.notifyAddr, nil
	}
	if d.notifyErr != nil {
		return "", d.notifyErr
	}
	name := notifyName(d.cfg.Dir)
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err == nil {
		err = setPassCred(c)
		if err != nil {
			c.Close()
		}
	}
	if err != nil {
		// Kept: a name taken by another process stays taken.
		d.notifyErr = fmt.Errorf("notify socket %s: %w", name, err)
		d.log.Error("cannot bind the sd_notify socket; Type=notify units and WatchdogSec= cannot run", "err", err)
		return "", d.notifyErr
	}
	d.notifyConn, d.notifyAddr = c, name
	d.notifyDone = make(chan struct{})
	go d.readNotify(c, d.notifyDone)
	return name, nil
}

func setPassCred(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("SO_PASSCRED: %w", serr)
	}
	return nil
}

// readNotify reads the socket until it is closed and hands each message to
// the unit it comes from.
func (d *Driver) readNotify(c *net.UnixConn, done chan struct{}) {
	defer close(done)
	buf := make([]byte, notifyMaxMessage+1)
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred)+unix.CmsgSpace(4*16))
	for {
		n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			d.log.Warn("sd_notify socket", "err", err)
			time.Sleep(10 * time.Millisecond) // not a busy loop on a persistent error
			continue
		}
		pid := 0
		if cms, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for i := range cms {
				if cred, err := unix.ParseUnixCredentials(&cms[i]); err == nil {
					pid = int(cred.Pid)
				}
				if fds, err := unix.ParseUnixRights(&cms[i]); err == nil {
					for _, fd := range fds {
						unix.Close(fd) // FDSTORE= is not supported
					}
				}
			}
		}
		if pid <= 0 || n > notifyMaxMessage || flags&unix.MSG_TRUNC != 0 {
			continue
		}
		if pid == d.pid && d.flushed(string(buf[:n])) {
			continue
		}
		if d.notifyLag > 0 {
			time.Sleep(d.notifyLag) // tests: a reader that falls behind
		}
		d.deliverNotify(notifyMsg{pid: pid, text: string(buf[:n])})
	}
}

// flushPrefix begins the message notifyFlush sends itself.
const flushPrefix = "FLOTILLA_FLUSH="

// notifyFlush returns once every message sent to the socket before it was
// called has been queued for its unit (or a second has passed): it sends
// the socket a message of its own and waits for the reader to reach it.
// A process that sends READY=1 and exits (systemd-notify as the main
// process) is then seen ready before its exit is acted on, as systemd
// reads its notify socket before it handles a child's exit.
func (d *Driver) notifyFlush() {
	d.notifyMu.Lock()
	c, addr := d.notifyConn, d.notifyAddr
	if c == nil {
		d.notifyMu.Unlock()
		return
	}
	d.flushSeq++
	id := strconv.FormatUint(d.flushSeq, 10)
	done := make(chan struct{})
	if d.flushes == nil {
		d.flushes = map[string]chan struct{}{}
	}
	d.flushes[id] = done
	d.notifyMu.Unlock()
	defer func() {
		d.notifyMu.Lock()
		delete(d.flushes, id)
		d.notifyMu.Unlock()
	}()
	w, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return
	}
	_, err = w.Write([]byte(flushPrefix + id))
	w.Close()
	if err != nil {
		return
	}
	select {
	case <-done:
	case <-time.After(time.Second):
	}
}

// flushed takes a message the driver sent itself (notifyFlush).
func (d *Driver) flushed(text string) bool {
	id, ok := strings.CutPrefix(text, flushPrefix)
	if !ok {
		return false
	}
	d.notifyMu.Lock()
	if ch := d.flushes[id]; ch != nil {
		close(ch)
		delete(d.flushes, id)
	}
	d.notifyMu.Unlock()
	return true
}

// deliverNotify queues m for the unit whose process (or, for
// NotifyAccess=all, process group) sent it.
func (d *Driver) deliverNotify(m notifyMsg) {
	d.notifyMu.Lock()
	s := d.notifyPids[m.pid]
	d.notifyMu.Unlock()
	if s == nil {
		// A process may speak before its start has returned: wait for
		// the starts under way, then look again.
		d.spawning.Lock()
		d.spawning.Unlock()
		d.notifyMu.Lock()
		s = d.notifyPids[m.pid]
		d.notifyMu.Unlock()
	}
	if s == nil {
		pgid, err := unix.Getpgid(m.pid)
		if err != nil {
			return
		}
		d.notifyMu.Lock()
		s = d.notifyPids[pgid]
		d.notifyMu.Unlock()
		if s == nil {
			return
		}
	}
	s.notesMu.Lock()
	if len(s.notes) < notifyMaxQueued {
		s.notes = append(s.notes, m)
	}
	s.notesMu.Unlock()
	select {
	case s.noteWake <- struct{}{}:
	default:
	}
}

// notifyEnv is what a process of the run gets of sd_notify: NOTIFY_SOCKET
// for the main process unless NotifyAccess=none, for control processes
// with NotifyAccess=exec or all; WATCHDOG_USEC and WATCHDOG_PID for the
// main process with WatchdogSec=. It binds the socket on first use.
func (s *supervisor) notifyEnv(asMain bool) ([]string, error) {
	svc := &s.cur.Service
	access := unit.NotifyAccessOf(svc)
	if access == "none" || !asMain && access == "main" {
		return nil, nil
	}
	s.d.notifyMu.Lock()
	addr, err := s.d.notifySocketLocked()
	s.d.notifyMu.Unlock()
	if err != nil {
		return nil, err
	}
	env := []string{"NOTIFY_SOCKET=" + addr}
	if asMain && svc.WatchdogSec > 0 {
		// WATCHDOG_PID is filled in by the process itself (withOwnPID):
		// its PID is not known before it is started.
		env = append(env, "WATCHDOG_USEC="+strconv.FormatInt(svc.WatchdogSec.Microseconds(), 10), ownPIDVar+"=")
	}
	return env, nil
}

// watchNotify makes the messages of process pid reach the unit (if its
// NotifyAccess= is not none); unwatchNotify forgets it once reaped.
func (s *supervisor) watchNotify(pid int) {
	if s.cur == nil || unit.NotifyAccessOf(&s.cur.Service) == "none" {
		return
	}
	s.d.notifyMu.Lock()
	s.d.notifyPids[pid] = s
	s.d.notifyMu.Unlock()
}

func (s *supervisor) unwatchNotify(pid int) {
	s.d.notifyMu.Lock()
	if s.d.notifyPids[pid] == s {
		delete(s.d.notifyPids, pid)
	}
	s.d.notifyMu.Unlock()
}

// takeNotes acts on the messages queued for the unit.
func (s *supervisor) takeNotes() {
	s.notesMu.Lock()
	notes := s.notes
	s.notes = nil
	s.notesMu.Unlock()
	for _, m := range notes {
		s.onNotify(m)
	}
}

// notifyType reports whether f's main process says when it is ready.
func notifyType(f *unit.File) bool {
	return f != nil && (f.Service.Type == "notify" || f.Service.Type == "notify-reload")
}

// onNotify acts on a message, if the unit's NotifyAccess= lets its sender
// speak.
func (s *supervisor) onNotify(m notifyMsg) {
	if s.cur == nil {
		return
	}
	isMain := s.main != nil && m.pid == s.main.pid
	var ok bool
	switch unit.NotifyAccessOf(&s.cur.Service) {
	case "main":
		ok = isMain
	case "exec":
		ok = isMain || s.control != nil && m.pid == s.control.pid
	case "all":
		ok = true // found through one of the run's process groups
	}
	if !ok {
		s.slog.Debug("sd_notify message refused by NotifyAccess=", "pid", m.pid, "access", unit.NotifyAccessOf(&s.cur.Service))
		return
	}
	for line := range strings.SplitSeq(m.text, "\n") {
		k, v, found := strings.Cut(line, "=")
		if !found {
			continue
		}
		switch k {
		case "READY":
			if v == "1" {
				s.onReady()
			}
		case "STATUS":
			s.statusText = v
		case "WATCHDOG":
			switch v {
			case "1":
				s.petWatchdog()
			case "trigger":
				if s.watchdogOn() {
					s.watchdogTimeout()
				}
			}
		case "WATCHDOG_USEC":
			if us, err := strconv.ParseUint(v, 10, 63); err == nil && us > 0 && s.wdLimit > 0 {
				s.wdLimit = time.Duration(min(us, uint64(unit.Infinity/time.Microsecond))) * time.Microsecond
				s.petWatchdog()
			}
		}
	}
}

// onReady takes READY=1: a Type=notify unit waiting in start goes on to
// ExecStartPost= and running.
func (s *supervisor) onReady() {
	if s.ready {
		return
	}
	s.ready = true
	if s.ph == phaseStart && notifyType(s.cur) && s.main != nil {
		s.ph, s.cmds = phaseStartPost, refs(s.cur.Service.ExecStartPost, "ExecStartPost")
		s.advance()
	}
}

// armWatchdog starts the run's watchdog, with WatchdogSec=, as its main
// process starts.
func (s *supervisor) armWatchdog() {
	s.wdLimit = s.cur.Service.WatchdogSec
	if s.wdLimit > 0 {
		s.wdTimer.Reset(s.wdLimit)
	}
}

// watchdogOn reports whether the watchdog watches the run now: it has
// one, and its main process runs, starting or started.
func (s *supervisor) watchdogOn() bool {
	if s.wdLimit <= 0 || s.main == nil || s.watchdogKill {
		return false
	}
	switch s.ph {
	case phaseStart, phaseStartPost, phaseRunning:
		return true
	}
	return false
}

// petWatchdog takes WATCHDOG=1.
func (s *supervisor) petWatchdog() {
	if s.watchdogOn() {
		s.wdTimer.Reset(s.wdLimit)
	}
}

// onWatchdogTimer handles the watchdog's timer.
func (s *supervisor) onWatchdogTimer() {
	if s.watchdogOn() {
		s.watchdogTimeout()
	}
}

// watchdogTimeout kills the run as systemd does when its watchdog fires:
// with SIGABRT (to the processes KillMode= says), then as any stop; the
// run's result is watchdog, which Restart= on-failure, on-abnormal,
// on-watchdog and always restart.
func (s *supervisor) watchdogTimeout() {
	s.wdTimer.Stop()
	s.event("%s: Watchdog timeout (limit %s)!", s.name, s.wdLimit)
	s.slog.Warn("watchdog timeout; killing the unit with SIGABRT", "limit", s.wdLimit)
	s.fail(service.ResultWatchdog, fmt.Sprintf("watchdog timeout: no WATCHDOG=1 within %s; killed with SIGABRT", s.wdLimit))
	s.watchdogKill = true
	s.enterStopSigterm()
}

// stopSignal is the first signal of the run's stop: SIGABRT after a
// watchdog timeout, KillSignal= otherwise.
func (s *supervisor) stopSignal() syscall.Signal {
	if s.watchdogKill {
		return syscall.SIGABRT
	}
	sig, _ := service.ParseSignal(s.cur.Service.KillSignal)
	return sig
}
