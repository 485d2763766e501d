package health

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flotilla/flotilla/internal/unit"
)

// Probe is one check of a unit. Run returns nil when it passes, or why it
// failed; it returns by ctx's deadline (the check's Timeout).
type Probe struct {
	// Name says what is checked: "exec /usr/bin/test -f /x", "http
	// http://127.0.0.1:8080/health", "tcp 127.0.0.1:5432".
	Name string
	run  func(ctx context.Context) error
}

// Run runs the probe once.
func (p Probe) Run(ctx context.Context) error { return p.run(ctx) }

// CommandFunc builds the process of an Exec= check (as the unit's
// processes are built: its environment, user and working directory). It
// is called for each run, so that EnvironmentFile= is read as it now is.
type CommandFunc func(c unit.Command) (*exec.Cmd, error)

// CommandRunner runs x, a process CommandFunc built, to its end, in place
// of x.Start and x.Wait (unithide.Spawner.Run: in a mount namespace made
// once, not one per process), with x's output to x.Stdout. When ctx ends
// first it kills x's process group. It returns x.Wait's error, or when
// ctx ended, ctx's cause.
type CommandRunner func(ctx context.Context, x *exec.Cmd) error

// Probes returns the probes of a unit's [X-Check] section c, Exec= first,
// then HTTP=, then TCP=. cmd builds the Exec= processes; nil runs them as
// the caller, with its environment; run runs them (nil: Start and Wait). A
// URL that does not parse is refused with an error naming it.
func Probes(c *unit.Check, cmd CommandFunc, run CommandRunner) ([]Probe, error) {
	var ps []Probe
	for _, x := range c.Exec {
		ps = append(ps, Exec(x, cmd, run))
	}
	for _, u := range c.HTTP {
		p, err := HTTP(u)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	for _, a := range c.TCP {
		ps = append(ps, TCP(a))
	}
	return ps, nil
}

// maxOutput is how much of a failed command's output its error quotes.
const maxOutput = 256

// Exec is a probe that runs c (built by cmd, or as the caller when nil;
// run by run, or started and waited for when nil) and passes when it exits
// with status 0. At the deadline its process group is killed.
func Exec(c unit.Command, cmd CommandFunc, run CommandRunner) Probe {
	name := "exec " + strings.Join(c.Argv, " ")
	return Probe{Name: name, run: func(ctx context.Context) error {
		var x *exec.Cmd
		if cmd != nil {
			var err error
			if x, err = cmd(c); err != nil {
				return err
			}
		} else {
			x = exec.Command(c.Argv[0], c.Argv[1:]...)
			x.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		}
		out := &capped{max: maxOutput}
		x.Stdout, x.Stderr = out, out
		if run != nil {
			err := run(ctx, x)
			switch {
			case ctx.Err() != nil:
				return fmt.Errorf("killed: %w", context.Cause(ctx))
			case err != nil:
				if msg := strings.TrimSpace(out.String()); msg != "" {
					return fmt.Errorf("%w: %s", err, msg)
				}
				return err
			}
			return nil
		}
		if err := x.Start(); err != nil {
			return err
		}
		done := make(chan error, 1)
		go func() { done <- x.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				if msg := strings.TrimSpace(out.String()); msg != "" {
					return fmt.Errorf("%w: %s", err, msg)
				}
				return err
			}
			return nil
		case <-ctx.Done():
			// The whole group: a shell's children too. Setpgid made the
			// command its group's leader.
			_ = syscall.Kill(-x.Process.Pid, syscall.SIGKILL)
			<-done
			return fmt.Errorf("killed: %w", context.Cause(ctx))
		}
	}}
}

// capped keeps the first max bytes written to it.
type capped struct {
	max int
	b   []byte
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - len(c.b); room > 0 {
		c.b = append(c.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (c *capped) String() string { return string(c.b) }

// HTTP is a probe that GETs rawURL and passes on a 2xx answer (after
// redirects). Each run opens a connection of its own: a server that
// stops accepting fails at once, not after an idle connection's end.
// rawURL must be an absolute http or https URL with a host; another is
// refused with an error naming it.
func HTTP(rawURL string) (Probe, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return Probe{}, fmt.Errorf("health check URL %q: %w", rawURL, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return Probe{}, fmt.Errorf("health check URL %q: want http:// or https://", rawURL)
	case u.Host == "" || u.Hostname() == "":
		return Probe{}, fmt.Errorf("health check URL %q has no host", rawURL)
	case u.User != nil:
		return Probe{}, fmt.Errorf("health check URL %q: credentials do not belong in a unit file", rawURL)
	}
	target := u.String()
	client := &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		Proxy:             nil, // a check is of the unit, not of a proxy in between
		TLSClientConfig:   &tls.Config{MinVersion: tls.VersionTLS12},
	}}
	full := func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return err
		}
		req.Header.Set("User-Agent", "flotilla-health-check")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return fmt.Errorf("GET %s: %s", target, resp.Status)
		}
		return nil
	}
	if u.Scheme != "http" {
		return Probe{Name: "http " + target, run: full}, nil
	}
	// A plain http:// GET is made by hand, on one connection and this
	// goroutine: http.Client's Transport starts three goroutines for each
	// connection it dials (their stacks grown anew every time), keeps a
	// pool, and was most of what an HTTP= check cost beyond the dial. A
	// redirect is followed by http.Client, as before.
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	request := []byte("GET " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host +
		"\r\nUser-Agent: flotilla-health-check\r\nConnection: close\r\n\r\n")
	dial := func(ctx context.Context, deadline time.Time) (io.ReadWriteCloser, error) {
		d := net.Dialer{KeepAlive: -1, Deadline: deadline}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return resetOnClose{c.(*net.TCPConn)}, nil
	}
	if ap, err := netip.ParseAddrPort(addr); err == nil && ap.Addr().Zone() == "" {
		sa, family := sockaddrOf(ap)
		dial = func(context.Context, time.Time) (io.ReadWriteCloser, error) { return connectFile(family, sa) }
	}
	return Probe{Name: "http " + target, run: func(ctx context.Context) error {
		status, err := getOnce(ctx, dial, request)
		switch {
		case err != nil:
			return fmt.Errorf("GET %s: %w", target, err)
		case status.code >= 300 && status.code <= 399:
			return full(ctx)
		case status.code < 200 || status.code > 299:
			return fmt.Errorf("GET %s: %s", target, status.text)
		}
		return nil
	}}, nil
}

// httpStatus is an answer's status: its code, and its line's text
// ("503 Service Unavailable").
type httpStatus struct {
	code int
	text string
}

// getOnce sends request (a GET with "Connection: close") on a connection
// dial makes, reads the answer (up to 64 KiB of its body) and closes the
// connection with a reset, as TCP does. It ends by ctx's deadline, and
// when the runner is stopped.
func getOnce(ctx context.Context, dial func(context.Context, time.Time) (io.ReadWriteCloser, error), request []byte) (httpStatus, error) {
	// Stopped: end at once. A deadlineCtx is watched through its parent,
	// not to make its timer: the deadline does its work.
	watch := ctx
	if dc, ok := ctx.(*deadlineCtx); ok {
		watch = dc.parent
	}
	dl, hasDeadline := ctx.Deadline()
	c, err := dial(watch, dl)
	if err != nil {
		return httpStatus{}, err
	}
	defer c.Close()
	d := c.(interface{ SetDeadline(time.Time) error })
	if hasDeadline {
		d.SetDeadline(dl)
	}
	stop := context.AfterFunc(watch, func() { d.SetDeadline(time.Now()) })
	defer stop()
	if _, err := c.Write(request); err != nil {
		return httpStatus{}, err
	}
	br := readers.Get().(*bufio.Reader)
	br.Reset(c)
	defer func() {
		br.Reset(nil)
		readers.Put(br)
	}()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		if watch.Err() != nil {
			return httpStatus{}, context.Cause(watch)
		}
		return httpStatus{}, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return httpStatus{code: resp.StatusCode, text: resp.Status}, nil
}

// resetOnClose is a connection closed with a reset (SO_LINGER 0).
type resetOnClose struct{ *net.TCPConn }

func (c resetOnClose) Close() error {
	c.SetLinger(0)
	return c.TCPConn.Close()
}

// socketFile is a connected TCP socket read and written through the
// runtime's poller as an *os.File, closed with a reset.
type socketFile struct{ *os.File }

// connectFile starts a connection to sa and returns the socket as a
// file: a write waits for the connection (on loopback made within the
// connect call) and fails as the connection does. It spares what
// net.Dialer does beside connect (waiting in the poller for the
// connection, TCP_NODELAY, getsockname and getpeername, a goroutine's
// park and wake), which was as much again as the connect itself.
func connectFile(family int, sa unix.Sockaddr) (io.ReadWriteCloser, error) {
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	if err := unix.Connect(fd, sa); err != nil && err != unix.EINPROGRESS {
		unix.Close(fd)
		return nil, os.NewSyscallError("connect", err)
	}
	return socketFile{os.NewFile(uintptr(fd), "http check")}, nil
}

func (f socketFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = os.NewSyscallError("connect", pe.Err) // refused, reset: the connection failed
	}
	return n, err
}

func (f socketFile) Read(p []byte) (int, error) {
	n, err := f.File.Read(p)
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = os.NewSyscallError("read", pe.Err)
	}
	return n, err
}

func (f socketFile) Close() error {
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			unix.SetsockoptLinger(int(fd), unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
		})
	}
	return f.File.Close()
}

// readers are the buffers getOnce reads answers with.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}

// TCP is a probe that passes when addr (host:port) accepts a connection.
// The connection is closed at once, with a reset (SO_LINGER 0, as
// Kubernetes' TCP probes do): no FIN exchange, and no socket left in
// TIME_WAIT for a minute, whose thousands (1,000 units checked every 5
// s) slow every connect's search for a local port. It has no keep-alives
// (they cost system calls). An address with an IP is parsed once, not at
// every run, and dialled by hand (dialAddrPort): a loopback connection is
// made within the connect call, so the runtime's poller, with its two
// epoll_ctl calls, is used only for one that is not.
func TCP(addr string) Probe {
	if ap, err := netip.ParseAddrPort(addr); err == nil && ap.Addr().Zone() == "" {
		sa, family := sockaddrOf(ap)
		taddr := net.TCPAddrFromAddrPort(ap)
		return Probe{Name: "tcp " + addr, run: func(ctx context.Context) error {
			if err := dialAddrPort(ctx, family, sa); err != nil {
				return &net.OpError{Op: "dial", Net: "tcp", Addr: taddr, Err: err}
			}
			return nil
		}}
	}
	d := net.Dialer{KeepAlive: -1}
	return Probe{Name: "tcp " + addr, run: func(ctx context.Context) error {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		return c.Close()
	}}
}

// sockaddrOf is ap as a socket address, and its family.
func sockaddrOf(ap netip.AddrPort) (unix.Sockaddr, int) {
	if a := ap.Addr().Unmap(); a.Is4() {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: a.As4()}, unix.AF_INET
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}, unix.AF_INET6
}

// dialAddrPort connects a TCP socket to sa and closes it with a reset. A
// connection the connect call did not finish (not on loopback) is waited
// for through the runtime's poller, until ctx ends.
func dialAddrPort(ctx context.Context, family int, sa unix.Sockaddr) error {
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return os.NewSyscallError("socket", err)
	}
	reset := func(fd int) {
		unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
	}
	switch err := unix.Connect(fd, sa); err {
	case nil:
		reset(fd)
		unix.Close(fd)
		return nil
	case unix.EINPROGRESS:
	default:
		unix.Close(fd)
		return os.NewSyscallError("connect", err)
	}
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	if n, _ := unix.Poll(pfd, 0); n > 0 { // done already: loopback
		err := soError(fd)
		if err == nil {
			reset(fd)
		}
		unix.Close(fd)
		return err
	}
	f := os.NewFile(uintptr(fd), "tcp check") // pollable: the socket is non-blocking
	defer f.Close()
	if dl, ok := ctx.Deadline(); ok {
		f.SetWriteDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { f.SetWriteDeadline(time.Now()) })
	defer stop()
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	waited := false
	if err := rc.Write(func(uintptr) bool {
		if !waited { // the connect is under way: wait for the socket to be writable
			waited = true
			return false
		}
		return true
	}); err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return err
	}
	var serr error
	rc.Control(func(fd uintptr) {
		if serr = soError(int(fd)); serr == nil {
			reset(int(fd))
		}
	})
	return serr
}

// soError is the outcome of a non-blocking connect on fd.
func soError(fd int) error {
	n, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		return os.NewSyscallError("getsockopt", err)
	}
	if n != 0 {
		return os.NewSyscallError("connect", unix.Errno(n))
	}
	return nil
}

// errNoProbes is returned by a run of no probes: a section without any is
// refused by the unit's parser, so this is a caller's mistake.
var errNoProbes = errors.New("health: no probes to run")
