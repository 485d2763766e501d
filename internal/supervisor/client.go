package supervisor

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/flotilla/flotilla/internal/driver"
	execdriver "github.com/flotilla/flotilla/internal/driver/exec"
	"github.com/flotilla/flotilla/internal/driver/service"
	"github.com/flotilla/flotilla/internal/monotime"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/version"
	"github.com/flotilla/flotilla/proto/supervisorpb"
	"github.com/prometheus/procfs"
)

// Defaults of Config.
const (
	DefaultRPCTimeout   = 5 * time.Second
	DefaultStartTimeout = 15 * time.Second
)

// waitPoll is how long one Unload, Kill or Shutdown call waits before the
// client asks again.
const waitPoll = 2 * time.Second

// maxLogBytes is the size at which a fresh supervisor's log is rotated.
const maxLogBytes = 8 << 20

// Config configures a Client.
type Config struct {
	// Dir is the supervisor's state directory (required).
	Dir string
	// Machine is the machine ID reported in every unit.Status.
	Machine string
	// Notify receives every change of a unit's status; nil drops them.
	Notify driver.Notify
	// Logger receives the client's log; nil discards it.
	Logger *slog.Logger
	// Binary is the program started as `Binary supervisor --dir Dir` when
	// no supervisor serves Dir (default: this process's executable).
	Binary string
	// Env is added to the started supervisor's environment.
	Env []string
	// Version is this daemon's version, compared with the supervisor's.
	Version string
	// RPCTimeout bounds every call to the supervisor (default
	// DefaultRPCTimeout).
	RPCTimeout time.Duration
	// StartTimeout bounds starting a supervisor until it serves (default
	// DefaultStartTimeout).
	StartTimeout time.Duration
	// Inaccessible are paths hidden from every unit (the daemon's data
	// directory and key files), given to a supervisor this client starts
	// (--inaccessible); one that is already running keeps its own.
	Inaccessible []string
	// Logs, if set, are the machine's log settings, sent to the supervisor
	// each time the client connects: a supervisor that outlived a daemon
	// with other settings takes these. Nil leaves the supervisor's as they
	// are (the exec driver's defaults for a new one).
	Logs *execdriver.LogConfig

	// beforeApply, if set, sees each event of the stream before the client
	// applies it (tests slow the stream with it).
	beforeApply func(*supervisorpb.Event)
}

// Client runs units through the machine's supervisor process: a
// driver.Driver whose units outlive the daemon. See the package
// documentation.
type Client struct {
	cfg  Config
	log  *slog.Logger
	sock string

	mu      sync.Mutex
	sess    *session
	closed  bool
	cache   map[string]unit.Status     // from the event stream: States' fallback
	files   map[string]*unit.File      // loaded through this client, for a replay
	started map[string]bool            // started (and not stopped) through this client
	gone    map[string][]chan struct{} // per unit, closed when the stream tells of its removal
	fence   *supervisorpb.FenceRequest
	watch   chan struct{} // closed when the watch loop has ended

	childMu sync.Mutex
	child   *child // the supervisor this client started, if any

	// checks: the supervisor connected to runs the units' [X-Check]
	// (HelloReply.runs_checks); an atomic, as the agent asks under its
	// lock, which Notify takes.
	checks atomic.Bool
}

var (
	_ driver.Driver     = (*Client)(nil)
	_ driver.Killer     = (*Client)(nil)
	_ driver.Fencer     = (*Client)(nil)
	_ driver.Detacher   = (*Client)(nil)
	_ driver.LogRemover = (*Client)(nil)
	_ driver.Checker    = (*Client)(nil)
)

// RunsChecks reports whether the supervisor runs the units' [X-Check]
// health checks and OnUnhealthy=restart, reporting their outcome with
// each unit's status (driver.Checker): one whose binary predates this
// does not, and the agent runs them.
func (c *Client) RunsChecks(string) bool { return c.checks.Load() }

// session is one connection to one supervisor process, with its event
// stream.
type session struct {
	conn   *grpc.ClientConn
	rpc    supervisorpb.SupervisorClient
	hello  *supervisorpb.HelloReply
	stream grpc.ServerStreamingClient[supervisorpb.Event]
	cancel context.CancelFunc // ends the stream
}

func (s *session) close() {
	s.cancel()
	s.conn.Close()
}

// child is a supervisor process this client started.
type child struct {
	pid  int
	done chan struct{} // closed once it has exited and been reaped
	err  error
}

// New connects to the supervisor serving cfg.Dir, starting one when none
// does, and returns once it has the supervisor's list of units: States
// then reports the units the supervisor already runs (started by an
// earlier daemon), with their PIDs and the hashes of the files they were
// started with. Their later changes, like every unit's, go to cfg.Notify.
func New(cfg Config) (*Client, error) {
	if cfg.Dir == "" {
		return nil, errors.New("supervisor: config: Dir is required")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("supervisor: config: Dir %q: %w", cfg.Dir, err)
	}
	cfg.Dir = dir
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Notify == nil {
		cfg.Notify = func(unit.Status) {}
	}
	if cfg.Binary == "" {
		if cfg.Binary, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("supervisor: cannot find this program to start a supervisor: %w", err)
		}
	}
	if cfg.RPCTimeout <= 0 {
		cfg.RPCTimeout = DefaultRPCTimeout
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	c := &Client{
		cfg: cfg, log: cfg.Logger.With("component", "supervisor-client", "machine", cfg.Machine),
		sock:  filepath.Join(dir, SocketFile),
		cache: map[string]unit.Status{}, files: map[string]*unit.File{}, started: map[string]bool{},
		gone:  map[string][]chan struct{}{},
		watch: make(chan struct{}),
	}
	if len(c.sock) > maxSocketPath {
		return nil, fmt.Errorf("supervisor: socket path %s is %d bytes, over the %d a unix socket allows: use a shorter --data-dir", c.sock, len(c.sock), maxSocketPath)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	sess, snap, err := c.open()
	if err != nil {
		return nil, err
	}
	if sess, snap, err = c.upgrade(sess, snap); err != nil {
		return nil, err
	}
	c.sess = sess
	c.checks.Store(sess.hello.GetRunsChecks())
	if err := c.sendLogConfig(); err != nil {
		sess.close()
		return nil, err
	}
	c.apply(snap)
	c.log.Info("connected to the supervisor", "pid", sess.hello.GetPid(), "version", sess.hello.GetVersion(),
		"started", time.Unix(0, sess.hello.GetStartedUnixNano()).Format(time.RFC3339), "units", len(snap.GetUnits()))
	go c.watchLoop(sess)
	return c, nil
}

// open connects to the supervisor (starting one if none serves) and opens
// its event stream, returning the first event, a snapshot.
func (c *Client) open() (*session, *supervisorpb.Event, error) {
	conn, hello, err := c.connect()
	if err != nil {
		return nil, nil, err
	}
	if err := c.checkProtocol(hello); err != nil {
		conn.Close()
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	sess := &session{conn: conn, rpc: supervisorpb.NewSupervisorClient(conn), hello: hello, cancel: cancel}
	// The snapshot must come within the timeout; the stream lives on.
	timer := time.AfterFunc(c.cfg.RPCTimeout, cancel)
	stream, err := sess.rpc.Watch(ctx, &supervisorpb.Empty{})
	var snap *supervisorpb.Event
	if err == nil {
		snap, err = stream.Recv()
	}
	if !timer.Stop() && err != nil {
		err = fmt.Errorf("no answer within %s: %w", c.cfg.RPCTimeout, err)
	}
	if err == nil && !snap.GetSnapshot() {
		err = errors.New("the first event is not a snapshot")
	}
	if err != nil {
		sess.close()
		return nil, nil, fmt.Errorf("supervisor %s: watch: %w", c.sock, err)
	}
	sess.stream = stream
	return sess, snap, nil
}

// checkProtocol refuses a supervisor whose protocol is outside this
// daemon's window (version.ProtocolWindow), naming both ends' releases and
// protocols: a supervisor outlives daemons, so an upgraded daemon may find
// one a release or more behind (or ahead, after a downgrade).
func (c *Client) checkProtocol(h *supervisorpb.HelloReply) error {
	self := version.Peer{What: "this daemon", Release: version.Get().Short(), Protocol: version.ProtocolVersion}
	peer := version.Peer{What: fmt.Sprintf("supervisor %d on %s", h.GetPid(), c.sock), Release: h.GetVersion(),
		Protocol: version.PeerProtocol(h.GetProtocol())}
	if err := version.CheckProtocol(self, version.ProtocolWindow(), peer); err != nil {
		return fmt.Errorf("supervisor: %w", err)
	}
	return nil
}

func (c *Client) dial() (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+c.sock,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 5 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
	)
}

// hello dials the socket and asks who serves it.
func (c *Client) hello(timeout time.Duration) (*grpc.ClientConn, *supervisorpb.HelloReply, error) {
	conn, err := c.dial()
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	h, err := supervisorpb.NewSupervisorClient(conn).Hello(ctx, &supervisorpb.HelloRequest{})
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, h, nil
}

// connect returns a connection to the supervisor serving the directory,
// starting one when nothing listens on its socket. A supervisor that
// listens but does not answer (frozen, overloaded) is an error: starting
// another would only find the directory locked.
func (c *Client) connect() (*grpc.ClientConn, *supervisorpb.HelloReply, error) {
	conn, h, err := c.hello(c.cfg.RPCTimeout)
	if err == nil {
		return conn, h, nil
	}
	if status.Code(err) != codes.Unavailable {
		return nil, nil, fmt.Errorf("supervisor %s does not answer: %w", c.sock, err)
	}
	ch, err := c.startSupervisor()
	if err != nil {
		return nil, nil, err
	}
	deadline := time.Now().Add(c.cfg.StartTimeout)
	var exitedAt time.Time
	for {
		conn, h, err := c.hello(time.Second)
		if err == nil {
			if int(h.GetPid()) == ch.pid {
				c.childMu.Lock()
				c.child = ch
				c.childMu.Unlock()
			}
			return conn, h, nil
		}
		select {
		case <-ch.done:
			// It may have lost the race to another one: give that one a
			// moment to answer.
			if exitedAt.IsZero() {
				exitedAt = time.Now()
			}
			if time.Since(exitedAt) > time.Second {
				return nil, nil, fmt.Errorf("supervisor %s exited at once (%v); the end of %s:\n%s", c.cfg.Binary, ch.err, filepath.Join(c.cfg.Dir, LogFile), logTail(filepath.Join(c.cfg.Dir, LogFile), 10))
			}
		default:
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("supervisor started from %s does not answer on %s after %s: %w", c.cfg.Binary, c.sock, c.cfg.StartTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startSupervisor starts `Binary supervisor --dir Dir [--inaccessible
// PATH]...` in a session of its own, its output going to Dir/supervisor.log.
func (c *Client) startSupervisor() (*child, error) {
	logPath := filepath.Join(c.cfg.Dir, LogFile)
	if fi, err := os.Stat(logPath); err == nil && fi.Size() > maxLogBytes {
		os.Rename(logPath, logPath+".1")
	}
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	defer logf.Close() // the child holds its own descriptor
	args := []string{"supervisor", "--dir", c.cfg.Dir}
	for _, p := range c.cfg.Inaccessible {
		args = append(args, "--inaccessible", p)
	}
	cmd := exec.Command(c.cfg.Binary, args...)
	cmd.Env = append(os.Environ(), c.cfg.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("supervisor: start %s: %w", c.cfg.Binary, err)
	}
	ch := &child{pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() { ch.err = cmd.Wait(); close(ch.done) }()
	c.log.Info("started a supervisor", "pid", ch.pid, "binary", c.cfg.Binary, "dir", c.cfg.Dir)
	return ch, nil
}

// logTail returns the last n lines of the file at path.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// apply records an event in the cache and hands its statuses to Notify.
func (c *Client) apply(ev *supervisorpb.Event) {
	sts := make([]unit.Status, len(ev.GetUnits()))
	for i, p := range ev.GetUnits() {
		sts[i] = fromPB(p, c.cfg.Machine)
	}
	c.mu.Lock()
	if ev.GetSnapshot() {
		clear(c.cache)
	}
	for _, st := range sts {
		c.cache[st.Name] = st
	}
	for _, name := range ev.GetRemoved() {
		delete(c.cache, name)
		c.removed(name)
	}
	if ev.GetSnapshot() {
		for name := range c.gone {
			if _, ok := c.cache[name]; !ok {
				c.removed(name) // removed while the stream was down
			}
		}
	}
	c.mu.Unlock()
	for _, st := range sts {
		c.cfg.Notify(st)
	}
}

// removed wakes the waiters for the removal of the unit; c.mu is held.
func (c *Client) removed(name string) {
	for _, ch := range c.gone[name] {
		close(ch)
	}
	delete(c.gone, name)
}

// awaitRemoval returns a channel closed once the event stream tells of the
// unit's removal, and a function to call when no longer waiting.
func (c *Client) awaitRemoval(name string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	c.mu.Lock()
	c.gone[name] = append(c.gone[name], ch)
	c.mu.Unlock()
	return ch, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.gone[name] = slices.DeleteFunc(c.gone[name], func(w chan struct{}) bool { return w == ch })
		if len(c.gone[name]) == 0 {
			delete(c.gone, name)
		}
	}
}

// watchLoop reads the event stream; when it breaks, it reconnects (starting
// a supervisor if the old one died) until the client is closed or
// detached.
func (c *Client) watchLoop(sess *session) {
	defer close(c.watch)
	for {
		var err error
		for {
			var ev *supervisorpb.Event
			if ev, err = sess.stream.Recv(); err != nil {
				break
			}
			if c.cfg.beforeApply != nil {
				c.cfg.beforeApply(ev)
			}
			c.apply(ev)
		}
		if c.isClosed() {
			return
		}
		c.log.Warn("lost the supervisor's event stream; reconnecting", "err", err)
		sess.close()
		wait := 50 * time.Millisecond
		for {
			if c.isClosed() {
				return
			}
			ns, snap, err := c.open()
			if err == nil {
				replaced := ns.hello.GetInstance() != sess.hello.GetInstance()
				c.mu.Lock()
				if c.closed {
					c.mu.Unlock()
					ns.close()
					return
				}
				c.sess = ns
				c.checks.Store(ns.hello.GetRunsChecks())
				c.mu.Unlock()
				if err := c.sendLogConfig(); err != nil {
					c.log.Error("cannot set the supervisor's log settings", "err", err)
				}
				c.apply(snap)
				if replaced {
					c.replay(ns)
				} else {
					c.log.Info("reconnected to the supervisor", "pid", ns.hello.GetPid())
				}
				sess = ns
				break
			}
			c.log.Warn("cannot reconnect to the supervisor", "err", err, "retry_in", wait)
			time.Sleep(wait)
			wait = min(2*wait, 2*time.Second)
		}
	}
}

// replay gives a supervisor that replaced a dead one what this client had
// given the dead one: the fence, the units, the starts. Its units died with
// it (the new one killed what was left), so they start again, with new
// PIDs, as after a reboot.
func (c *Client) replay(sess *session) {
	c.mu.Lock()
	fence := c.fence
	files := slices.Collect(maps.Values(c.files))
	started := slices.Sorted(maps.Keys(c.started))
	c.mu.Unlock()
	c.log.Warn("the supervisor was replaced (the old one died with its units); loading and starting them again",
		"pid", sess.hello.GetPid(), "units", len(files), "started", len(started))
	if fence != nil {
		if _, err := call(c, "fence", func(ctx context.Context, r supervisorpb.SupervisorClient) (*supervisorpb.Empty, error) {
			return r.Fence(ctx, fence)
		}); err != nil {
			c.log.Error("replay: fence failed", "err", err)
		}
	}
	for _, f := range files {
		if err := c.load(f); err != nil {
			c.log.Error("replay: load failed", "unit", f.Name, "err", err)
		}
	}
	for _, name := range started {
		if err := c.Start(name); err != nil {
			c.log.Error("replay: start failed", "unit", name, "err", err)
		}
	}
}

// sendLogConfig gives the supervisor the machine's log settings, if any. A
// supervisor of an older version, which has no such call, keeps its own
// until it is restarted: that is logged, not an error.
func (c *Client) sendLogConfig() error {
	lc := c.cfg.Logs
	if lc == nil {
		return nil
	}
	req := &supervisorpb.LogConfig{MaxBytes: lc.Limits.MaxBytes, MaxFiles: int32(lc.Limits.MaxFiles), Journald: lc.Journald, Machine: cmp.Or(lc.Machine, c.cfg.Machine)}
	_, err := call(c, "set log config", func(ctx context.Context, r supervisorpb.SupervisorClient) (*supervisorpb.Empty, error) {
		return r.SetLogConfig(ctx, req)
	})
	if status.Code(errors.Unwrap(err)) == codes.Unimplemented || status.Code(err) == codes.Unimplemented {
		c.log.Warn("the supervisor predates log settings; it keeps its own until it is restarted", "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("supervisor: %w", err)
	}
	return nil
}

// RemoveLog removes the log of a unit the supervisor does not have loaded
// (driver.LogRemover).
func (c *Client) RemoveLog(name string) error {
	_, err := call(c, "remove log of "+name, func(ctx context.Context, r supervisorpb.SupervisorClient) (*supervisorpb.Empty, error) {
		return r.RemoveLog(ctx, &supervisorpb.UnitRequest{Name: name})
	})
	return err
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// call makes one call to the supervisor, bounded by the RPC timeout. A
// call whose connection broke is made again on the next one (sessionLost).
func call[T any](c *Client, op string, f func(context.Context, supervisorpb.SupervisorClient) (T, error)) (T, error) {
	var zero T
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RPCTimeout)
	defer cancel()
	var sess *session
	for {
		var err error
		if sess, err = c.session(ctx, sess); err != nil {
			return zero, fmt.Errorf("%s: %w", op, err)
		}
		r, err := f(ctx, sess.rpc)
		if err == nil {
			return r, nil
		}
		if !sessionLost(ctx, err) {
			return zero, fromStatus(op, err)
		}
	}
}

// sessionLost reports whether a call failed because its connection to the
// supervisor broke (closed, or closing as the watch loop replaces it)
// rather than with the supervisor's answer. The supervisor's keepalive
// ends the connection of a daemon frozen for 15 s (SIGSTOP, a stalled
// VM): the calls the daemon makes as it wakes, on the connection it still
// holds, failed so, and the agent took a unit's kill as done (the unit
// ran on, unknown) or its load as failed for good (it never ran). Every
// call is safe to make again: a load replaces, starting a running unit
// or stopping a stopped one does nothing, and a kill or unload that finds
// the unit gone says so (NotFound).
func sessionLost(ctx context.Context, err error) bool {
	// Canceled with the caller's context alive: the connection's doing.
	c := status.Code(err)
	return (c == codes.Unavailable || c == codes.Canceled) && ctx.Err() == nil
}

// session returns the client's session: the current one, or, after a call
// on failed broke (sessionLost), the next one the watch loop makes, waiting
// for it within ctx.
func (c *Client) session(ctx context.Context, failed *session) (*session, error) {
	for {
		c.mu.Lock()
		closed, sess := c.closed, c.sess
		c.mu.Unlock()
		switch {
		case closed:
			return nil, execdriver.ErrClosed
		case sess != failed:
			return sess, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the connection to the supervisor broke and no new one came: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Load makes the unit known to the supervisor, or replaces its definition
// (driver.Driver).
func (c *Client) Load(f *unit.File) error {
	if f == nil {
		return errors.New("supervisor: load: nil unit file")
	}
	if err := c.load(f); err != nil {
		return err
	}
	c.mu.Lock()
	c.files[f.Name] = f
	c.mu.Unlock()
	return nil
}

func (c *Client) load(f *unit.File) error {
	data, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("load %s: %w", f.Name, err)
	}
	_, err = call(c, "load "+f.Name, func(ctx context.Context, r supervisorpb.SupervisorClient) (*supervisorpb.Empty, error) {
		return r.Load(ctx, &supervisorpb.LoadRequest{Unit: data})
	})
	return err
}

// Start begins starting the unit (driver.Driver).
func (c *Client) Start(name string) error {
	_, err := call(c, "start "+name, func(ctx context.Context, r supervisorpb.SupervisorClient) (*supervisorpb.Empty, error) {
		return r.Start(ctx, &supervisorpb.UnitRequest{Name: name})
	})
	if err == nil {
		c.mu.Lock()
		c.started[name] = true
		c.mu.Unlock()
	}
	return err
}

// Stop begins stopping the unit (driver.Driver).
func (c *Client) Stop(name string) error {
	_, err := call(c, "stop "+name, func(ctx context.Context, r supervisorpb.SupervisorClient) (*supervisorpb.Empty, error) {
		return r.Stop(ctx, &supervisorpb.UnitRequest{Name: name})
	})
	if err == nil {
		c.mu.Lock()
		delete(c.started, name)
		c.mu.Unlock()
	}
	return err
}

// Unload stops the unit, waits for it to stop, and forgets it
// (driver.Driver). It asks the supervisor every couple of seconds whether
// the unit is gone, so a supervisor that stops answering ends it with an
// error after the RPC timeout.
func (c *Client) Unload(ctx context.Context, name string) error {
	return c.waitGone(ctx, "unload", name, func(ctx context.Context, r supervisorpb.SupervisorClient, req *supervisorpb.WaitRequest) (*supervisorpb.WaitReply, error) {
		return r.Unload(ctx, req)
	})
}

// Kill ends the unit at once, waits for it to end, and forgets it
// (driver.Killer).
func (c *Client) Kill(ctx context.Context, name string) error {
	return c.waitGone(ctx, "kill", name, func(ctx context.Context, r supervisorpb.SupervisorClient, req *supervisorpb.WaitRequest) (*supervisorpb.WaitReply, error) {
		return r.Kill(ctx, req)
	})
}

// waitGone calls f until the supervisor says the unit is gone. The unit's
// last statuses and its removal come on the event stream, which may lag
// behind that reply (under load, by a lot): waitGone returns once the stream
// has told of the removal too (or the RPC timeout passed), so that, as with
// the exec driver, no status of the unit is notified after Unload or Kill
// returns and Journal no longer counts the unit as loaded (which would make
// a removed log read as empty rather than as an unknown unit).
func (c *Client) waitGone(ctx context.Context, op, name string, f func(context.Context, supervisorpb.SupervisorClient, *supervisorpb.WaitRequest) (*supervisorpb.WaitReply, error)) error {
	removal, stopWaiting := c.awaitRemoval(name)
	defer stopWaiting()
	forget := func() {
		c.mu.Lock()
		delete(c.files, name)
		delete(c.started, name)
		delete(c.cache, name)
		c.mu.Unlock()
	}
	gone := func() {
		select {
		case <-removal:
		case <-c.watch:
		case <-ctx.Done():
		case <-time.After(c.cfg.RPCTimeout):
			c.log.Warn("the event stream did not tell of the unit's removal", "unit", name, "op", op)
		}
		forget()
	}
	var sess, failed *session
	for first := true; ; first = false {
		wait := waitPoll
		if dl, ok := ctx.Deadline(); ok {
			wait = max(min(wait, time.Until(dl)), time.Millisecond)
		}
		cctx, cancel := context.WithTimeout(ctx, wait+c.cfg.RPCTimeout)
		var err error
		if sess, err = c.session(cctx, failed); err != nil {
			cancel()
			return fmt.Errorf("%s %s: %w", op, name, err)
		}
		reply, err := f(cctx, sess.rpc, &supervisorpb.WaitRequest{Name: name, WaitMs: wait.Milliseconds()})
		lost := err != nil && sessionLost(cctx, err)
		cancel()
		switch {
		case err == nil && reply.GetDone():
			gone()
			return nil
		case err == nil:
		case lost:
			failed = sess // again, on the next connection (call)
		case !first && status.Code(err) == codes.NotFound:
			gone() // since the last call
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("%s %s: %w", op, name, ctx.Err())
		default:
			if status.Code(err) == codes.NotFound {
				forget()
			}
			return fromStatus(op+" "+name, err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s %s: %w", op, name, ctx.Err())
		}
	}
}

// States returns the status of every loaded unit, sorted by name
// (driver.Driver). When the supervisor does not answer within the RPC
// timeout it returns the statuses last heard on the event stream.
func (c *Client) States() []unit.Status {
	reply, err := call(c, "states", func(ctx context.Context, r supervisorpb.SupervisorClient) (*supervisorpb.StatesReply, error) {
		return r.States(ctx, &supervisorpb.Empty{})
	})
	if err == nil {
		out := make([]unit.Status, len(reply.GetUnits()))
		for i, p := range reply.GetUnits() {
			out[i] = fromPB(p, c.cfg.Machine)
		}
		return out
	}
	c.log.Warn("the supervisor did not list its units; reporting the last statuses heard", "err", err)
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.SortedFunc(maps.Values(c.cache), func(a, b unit.Status) int { return strings.Compare(a.Name, b.Name) })
}

// Journal reads the unit's log from the supervisor's directory
// (driver.Driver); it needs no call to the supervisor.
func (c *Client) Journal(ctx context.Context, name string, lines int, follow bool, w io.Writer) error {
	c.mu.Lock()
	_, loaded := c.cache[name]
	if !loaded {
		_, loaded = c.files[name]
	}
	c.mu.Unlock()
	return service.ReadJournal(ctx, c.cfg.Dir, name, lines, follow, w, loaded)
}

// Fence sets the deadline at which the supervisor kills the named units,
// on its own clock and timer (driver.Fencer): a frozen daemon does not
// delay it.
func (c *Client) Fence(deadline monotime.Time, names []string) error {
	req := &supervisorpb.FenceRequest{Deadline: int64(deadline), Names: slices.Clone(names)}
	_, err := call(c, "fence", func(ctx context.Context, r supervisorpb.SupervisorClient) (*supervisorpb.Empty, error) {
		return r.Fence(ctx, req)
	})
	if err == nil {
		c.mu.Lock()
		c.fence = req
		c.mu.Unlock()
	}
	return err
}

// end marks the client closed and ends its event stream; false if it was
// already.
func (c *Client) end(ctx context.Context) (*session, bool) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, false
	}
	c.closed = true
	sess := c.sess
	c.mu.Unlock()
	sess.cancel()
	select {
	case <-c.watch:
	case <-ctx.Done():
	}
	return sess, true
}

// Detach closes the connection and leaves the supervisor and every unit
// running, for the next daemon on the directory to adopt
// (driver.Detacher).
func (c *Client) Detach(ctx context.Context) error {
	sess, ok := c.end(ctx)
	if !ok {
		return nil
	}
	sess.conn.Close()
	return nil
}

// Close stops every unit (as the exec driver's Close does: gracefully,
// SIGKILLing what still runs when ctx is done) and ends the supervisor
// (driver.Driver).
func (c *Client) Close(ctx context.Context) error {
	sess, ok := c.end(ctx)
	if !ok {
		return nil
	}
	defer sess.conn.Close()
	c.childMu.Lock()
	ch := c.child
	c.childMu.Unlock()
	return shutdown(ctx, sess.rpc, int(sess.hello.GetPid()), ch, c.cfg.RPCTimeout)
}

// shutdown asks the supervisor pid behind rpc to stop every unit (each
// gracefully until ctx's deadline, or DefaultShutdownTimeout; then
// SIGKILLed) and end, and waits until the process has ended, so that its
// directory is free. ch is the process, when this process started it.
func shutdown(ctx context.Context, rpc supervisorpb.SupervisorClient, pid int, ch *child, rpcTimeout time.Duration) error {
	grace := DefaultShutdownTimeout
	if dl, ok := ctx.Deadline(); ok {
		grace = time.Until(dl)
	}
	for {
		cctx, cancel := context.WithTimeout(context.Background(), waitPoll+rpcTimeout)
		reply, err := rpc.Shutdown(cctx, &supervisorpb.WaitRequest{WaitMs: waitPoll.Milliseconds(), DeadlineMs: max(grace.Milliseconds(), 1)})
		cancel()
		if err != nil {
			return fmt.Errorf("supervisor: shutdown: %w", fromStatus("shutdown", err))
		}
		if reply.GetDone() {
			break
		}
		// The supervisor SIGKILLs what runs at the deadline; keep asking
		// until it is done, a little past it.
		if dl, ok := ctx.Deadline(); ok && time.Now().After(dl.Add(10*time.Second)) {
			return fmt.Errorf("supervisor: shutdown: units still stopping 10s past the deadline: %w", ctx.Err())
		}
	}
	deadline := time.After(10 * time.Second)
	for {
		if ch != nil && ch.pid == pid {
			select {
			case <-ch.done:
				return nil
			case <-deadline:
				return fmt.Errorf("supervisor: pid %d still runs 10s after its units stopped", pid)
			}
		}
		if processGone(pid) {
			return nil
		}
		select {
		case <-deadline:
			return fmt.Errorf("supervisor: pid %d still runs 10s after its units stopped", pid)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// processGone reports whether pid has ended (a zombie has).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	return procGone(pid)
}

// procGone reports whether /proc says pid has ended: it has no
// /proc/<pid>/stat or is a zombie. A stat procfs cannot parse does not say
// the process has ended.
func procGone(pid int) bool {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return true
	}
	st, err := p.Stat()
	if err != nil {
		var pe *fs.PathError
		return errors.As(err, &pe)
	}
	return st.State == "Z"
}
