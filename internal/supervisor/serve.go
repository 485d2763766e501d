package supervisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	execdriver "github.com/flotilla/flotilla/internal/driver/exec"
	"github.com/flotilla/flotilla/internal/monotime"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/unithide"
	"github.com/flotilla/flotilla/internal/version"
	"github.com/flotilla/flotilla/proto/supervisorpb"
)

// The files of a supervisor in its directory, beside the exec driver's
// logs/ and run/.
const (
	SocketFile = "supervisor.sock"
	PIDFile    = "supervisor.pid"
	LogFile    = "supervisor.log"
)

// ErrRunning is returned by Serve when another supervisor serves the
// directory.
var ErrRunning = errors.New("supervisor: another supervisor serves this directory")

// DefaultIdleExit is how long a supervisor with no units waits for a daemon
// to connect before it ends by itself (ServeConfig.IdleExit): a data dir
// whose daemon is gone for good leaves nothing behind.
const DefaultIdleExit = 10 * time.Minute

// reapEvery bounds how often SIGCHLD makes the supervisor reap orphans.
const reapEvery = 100 * time.Millisecond

// dirCheckEvery is how often the supervisor checks that its directory is
// still there, and whether it has been idle for IdleExit.
const dirCheckEvery = 5 * time.Second

// DefaultShutdownTimeout bounds the graceful stop of every unit when the
// supervisor is asked to end (SIGTERM) without a deadline of its own.
const DefaultShutdownTimeout = 2 * time.Minute

// maxSocketPath is the longest path a unix socket address holds.
const maxSocketPath = len(syscall.RawSockaddrUnix{}.Path) - 1

// ServeConfig configures the supervisor process.
type ServeConfig struct {
	// Dir is the state directory (required): the exec driver's logs/ and
	// run/, the socket, the pid file.
	Dir string
	// Version is reported to clients.
	Version string
	// Logger receives the supervisor's and the driver's log; nil: text to
	// stderr, which the client points at Dir/supervisor.log.
	Logger *slog.Logger
	// ShutdownTimeout bounds the graceful stop on SIGTERM (default
	// DefaultShutdownTimeout); what still runs after it is SIGKILLed.
	ShutdownTimeout time.Duration
	// Inaccessible are paths hidden from every unit (--inaccessible: the
	// daemon's data directory and key files), besides Dir itself, which
	// holds the socket that commands the supervisor (see
	// execdriver.Config.Inaccessible).
	Inaccessible []string
	// IdleExit ends the supervisor once it has had no unit and no client
	// (no daemon connected, no call) for this long (0: DefaultIdleExit;
	// negative: never).
	IdleExit time.Duration
	// Handover, if set, is the file a previous image of this process wrote
	// before it executed this binary (see HandoverFile): the supervisor
	// adopts the units it describes instead of starting afresh.
	Handover string
	// HandoverFallbackFD is the descriptor of the previous image's binary,
	// executed again should the handover not be adopted.
	HandoverFallbackFD int
}

// Serve runs the supervisor of cfg.Dir until it is asked to end (a
// Shutdown call, SIGTERM or SIGINT), which stops every unit first. It is
// what `flotilla supervisor --dir DIR` runs. It makes the process a child
// subreaper and the leader of its own session, takes the driver's lock on
// the directory (ErrRunning when another supervisor holds it) and, having
// it, SIGKILLs what a dead supervisor left running (found through the pid
// files), then serves the socket.
//
// Run on the process's main thread (a process started as "supervisor ...",
// see upgrade.go), it starts every unit's process from that thread and can
// be upgraded in place (Upgrade).
func Serve(cfg ServeConfig) error {
	if !onMainThread() {
		return serve(cfg, nil)
	}
	mt := &mainThread{q: make(chan func())}
	result := make(chan error, 1)
	go func() { result <- serve(cfg, mt) }()
	for {
		select {
		case f := <-mt.q:
			f()
		case err := <-result:
			return err
		}
	}
}

func serve(cfg ServeConfig, mt *mainThread) error {
	if cfg.Dir == "" {
		return errors.New("supervisor: --dir is required")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return fmt.Errorf("supervisor: --dir %q: %w", cfg.Dir, err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	log = log.With("component", "supervisor", "pid", os.Getpid())
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.IdleExit == 0 {
		cfg.IdleExit = DefaultIdleExit
	}
	sock := filepath.Join(dir, SocketFile)
	if len(sock) > maxSocketPath {
		return fmt.Errorf("supervisor: socket path %s is %d bytes, over the %d a unix socket allows: use a shorter --data-dir", sock, len(sock), maxSocketPath)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("supervisor: %w", err)
	}
	dirInfo, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("supervisor: %w", err)
	}

	// Orphans of the units' processes come to us, not to init; and neither
	// the daemon's death nor a signal to its terminal's process group
	// reaches us.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		log.Warn("cannot become a child subreaper; orphans of units go to init", "err", err)
	}
	if sid, _ := unix.Getsid(0); sid != os.Getpid() {
		if _, err := unix.Setsid(); err != nil {
			log.Warn("cannot start a session of its own; signals to the starter's process group reach the supervisor", "err", err)
		}
	}
	signal.Ignore(syscall.SIGHUP)
	stopSig := make(chan os.Signal, 1)
	signal.Notify(stopSig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(stopSig)
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	defer signal.Stop(chld)

	cfg.Dir = dir
	var ho *handover
	if cfg.Handover != "" {
		if ho, err = readHandover(cfg.Handover); err != nil {
			return adoptFailed(cfg, log, mt, err)
		}
	}
	h := newHub()
	dcfg := execdriver.Config{Dir: dir, Notify: h.notify, Unloaded: h.unloaded, Logger: log,
		Inaccessible: append([]string{dir}, cfg.Inaccessible...)}
	if mt != nil {
		dcfg.Spawn = mt.run
	}
	// The units' [X-Check] run here, so that they go on without a daemon;
	// as root their Exec= probes start from one spawner process that holds
	// a mount namespace with dcfg.Inaccessible covered, made once.
	dcfg.Checks = true
	if os.Geteuid() == 0 {
		sp := unithide.NewSpawner(dcfg.Inaccessible)
		defer sp.Close()
		dcfg.ProbeRunner = sp.Run
	}
	var d *execdriver.Driver
	if ho != nil {
		if d, err = execdriver.Adopt(dcfg, ho.Driver); err != nil {
			return adoptFailed(cfg, log, mt, err)
		}
	} else {
		d, err = execdriver.New(dcfg)
	}
	if errors.Is(err, execdriver.ErrInUse) {
		pid, _ := readPIDFile(filepath.Join(dir, PIDFile))
		return fmt.Errorf("%w: %s (pid %d)", ErrRunning, dir, pid)
	}
	if err != nil {
		return fmt.Errorf("supervisor: %w", err)
	}

	var ln net.Listener
	if ho != nil {
		// The previous image's listening socket, whose backlog held the
		// clients that connected during the execve.
		f := os.NewFile(uintptr(ho.ListenerFD), sock)
		ln, err = net.FileListener(f)
		f.Close()
		if err != nil {
			log.Error("cannot take over the listening socket; listening anew", "err", err)
		}
	}
	if ln == nil {
		// We hold the driver's lock: a socket or pid file here is a dead
		// supervisor's.
		os.Remove(sock)
		old := syscall.Umask(0o177)
		ln, err = net.Listen("unix", sock)
		syscall.Umask(old)
		if err != nil {
			d.Close(context.Background())
			return fmt.Errorf("supervisor: %w", err)
		}
		if err := os.Chmod(sock, 0o600); err != nil {
			ln.Close()
			d.Close(context.Background())
			return fmt.Errorf("supervisor: %w", err)
		}
	}

	s := &server{d: d, hub: h, log: log, pid: os.Getpid(), instance: newInstance(), version: cfg.Version,
		started: time.Now(), closed: make(chan struct{}), shutdown: make(chan time.Duration, 1), idle: newIdleClock(),
		main: mt, upgrades: make(chan upgradeReq), binary: make(chan struct{})}
	go s.hashBinary()
	if ho != nil {
		s.instance, s.started = ho.Instance, time.Unix(0, ho.StartedUnixNano)
		os.Remove(cfg.Handover)
		if cfg.HandoverFallbackFD > 0 {
			syscall.Close(cfg.HandoverFallbackFD)
		}
		exe, _ := os.Executable()
		log.Info("upgraded in place: adopted the units of the previous binary", "previous", ho.Previous, "binary", exe, "units", len(ho.Driver.Units))
	}
	gs := grpc.NewServer(
		grpc.ChainUnaryInterceptor(s.idle.unary), grpc.ChainStreamInterceptor(s.idle.stream),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
	)
	supervisorpb.RegisterSupervisorServer(gs, s)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(ln) }()

	pidPath := filepath.Join(dir, PIDFile)
	if err := writePIDFile(pidPath, s.pid); err != nil {
		log.Error("cannot write the pid file", "path", pidPath, "err", err)
	}
	log.Info("supervisor serving", "dir", dir, "socket", sock, "version", cfg.Version)

	reapTick := time.NewTicker(30 * time.Second)
	defer reapTick.Stop()
	// A SIGCHLD reaps orphans at most every reapEvery: the exits of
	// Exec= probes (children of the supervisor when it does not run as
	// root) would otherwise each cost a listing of every child.
	var lastReap time.Time
	reapSoon := time.NewTimer(time.Hour)
	reapSoon.Stop()
	defer reapSoon.Stop()
	armed := false
	reap := func() {
		lastReap = time.Now()
		d.ReapOrphans()
	}
	checkTick := time.NewTicker(dirCheckEvery)
	defer checkTick.Stop()
	var timeout time.Duration
wait:
	for {
		select {
		case <-chld:
			if wait := reapEvery - time.Since(lastReap); wait <= 0 {
				reap()
			} else if !armed {
				armed = true
				reapSoon.Reset(wait)
			}
		case <-reapSoon.C:
			armed = false
			reap()
		case <-reapTick.C:
			reap()
		case <-checkTick.C:
			if why := dirGone(dir, dirInfo); why != "" {
				log.Warn("the state directory is gone; stopping every unit and exiting", "dir", dir, "why", why)
				timeout = cfg.ShutdownTimeout
				break wait
			}
			if idle := s.idle.since(); cfg.IdleExit > 0 && idle >= cfg.IdleExit && len(d.States()) == 0 {
				log.Info("no units and no daemon connected; exiting", "idle", idle.Round(time.Second), "idle_exit", cfg.IdleExit)
				timeout = cfg.ShutdownTimeout
				break wait
			}
		case sig := <-stopSig:
			log.Info("signalled; stopping every unit", "signal", sig.String(), "timeout", cfg.ShutdownTimeout)
			timeout = cfg.ShutdownTimeout
			break wait
		case timeout = <-s.shutdown:
			log.Info("asked to shut down; stopping every unit", "timeout", timeout)
			break wait
		case err := <-served:
			log.Error("serving the socket failed; stopping every unit", "err", err)
			timeout = cfg.ShutdownTimeout
			break wait
		case u := <-s.upgrades:
			err := s.reexec(cfg, ln, u) // returns only when it did not happen
			log.Warn("upgrade in place failed; going on with this binary and every unit as they were", "binary", u.binary, "err", err)
			u.reply <- err
		}
	}

	// Stop the units (reaping orphans meanwhile), then end the calls.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	done := make(chan error, 1)
	go func() { done <- d.Close(ctx) }()
	var cerr error
closing:
	for {
		select {
		case cerr = <-done:
			break closing
		case <-chld:
			d.ReapOrphans()
		}
	}
	cancel()
	d.ReapOrphans()
	close(s.closed)
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		gs.Stop()
	}
	if pid, err := readPIDFile(pidPath); err == nil && pid == s.pid {
		os.Remove(pidPath)
	}
	os.Remove(sock)
	if cerr != nil {
		log.Warn("units were SIGKILLed after the shutdown timeout", "err", cerr)
	}
	log.Info("supervisor exiting")
	return nil
}

// server serves a Driver over the supervisor protocol.
type server struct {
	supervisorpb.UnimplementedSupervisorServer
	d        *execdriver.Driver
	hub      *hub
	log      *slog.Logger
	pid      int
	instance string
	version  string
	started  time.Time

	once     sync.Once
	shutdown chan time.Duration // the first Shutdown's deadline
	closed   chan struct{}      // closed once every unit has stopped
	idle     *idleClock

	main     *mainThread     // nil when Serve does not run on the main thread
	upgrades chan upgradeReq // Upgrade calls, to Serve's loop
	binary   chan struct{}   // closed once exe and exeSHA256 are set
	exe      string
	exeSHA   string
}

// hashBinary finds the running binary and its SHA-256, for Hello.
func (s *server) hashBinary() {
	defer close(s.binary)
	s.exe, _ = os.Executable()
	sum, err := fileSHA256("/proc/self/exe")
	if err != nil {
		s.log.Warn("cannot hash the running binary; daemons cannot tell whether it is theirs", "err", err)
		return
	}
	s.exeSHA = sum
}

// Upgrade re-executes the supervisor into another binary: see upgrade.go.
func (s *server) Upgrade(ctx context.Context, r *supervisorpb.UpgradeRequest) (*supervisorpb.Empty, error) {
	u := upgradeReq{binary: r.GetBinary(), sha256: r.GetSha256(), reply: make(chan error, 1)}
	s.log.Info("asked to upgrade in place", "binary", u.binary)
	select {
	case s.upgrades <- u:
	case <-s.closed:
		return nil, status.Error(codes.Aborted, "supervisor: upgrade: shutting down")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	err := <-u.reply
	return nil, status.Error(codes.FailedPrecondition, "supervisor: upgrade: "+err.Error())
}

// idleClock tells how long the supervisor has had no client: no stream
// open (a daemon keeps its Watch open while it is connected) and no call.
type idleClock struct {
	mu      sync.Mutex
	streams int
	last    time.Time // when the last call or stream ended
}

func newIdleClock() *idleClock { return &idleClock{last: time.Now()} }

func (c *idleClock) busy(n int) {
	c.mu.Lock()
	c.streams += n
	c.last = time.Now()
	c.mu.Unlock()
}

// since is how long no client has been connected (0 while one is).
func (c *idleClock) since() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.streams > 0 {
		return 0
	}
	return time.Since(c.last)
}

func (c *idleClock) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	c.busy(0)
	return h(ctx, req)
}

func (c *idleClock) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	c.busy(1)
	defer c.busy(-1)
	return h(srv, ss)
}

// dirGone says why the directory the supervisor serves is no longer there
// (removed, or replaced by another of the same name), or "" if it is.
func dirGone(dir string, was os.FileInfo) string {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "removed"
	case err != nil:
		return "" // cannot tell: keep running
	case !os.SameFile(fi, was):
		return "replaced by another directory"
	}
	return ""
}

func (s *server) Hello(ctx context.Context, _ *supervisorpb.HelloRequest) (*supervisorpb.HelloReply, error) {
	select {
	case <-s.binary:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &supervisorpb.HelloReply{Pid: int32(s.pid), Instance: s.instance, Version: s.version, StartedUnixNano: s.started.UnixNano(),
		BinarySha256: s.exeSHA, Binary: s.exe, Protocol: int32(version.ProtocolVersion), RunsChecks: true}, nil
}

func (s *server) Load(_ context.Context, r *supervisorpb.LoadRequest) (*supervisorpb.Empty, error) {
	var f unit.File
	if err := json.Unmarshal(r.GetUnit(), &f); err != nil {
		return nil, toStatus(fmt.Errorf("load: unit is not a unit file as JSON: %w", err))
	}
	return &supervisorpb.Empty{}, toStatus(s.d.Load(&f))
}

func (s *server) Start(_ context.Context, r *supervisorpb.UnitRequest) (*supervisorpb.Empty, error) {
	return &supervisorpb.Empty{}, toStatus(s.d.Start(r.GetName()))
}

func (s *server) Stop(_ context.Context, r *supervisorpb.UnitRequest) (*supervisorpb.Empty, error) {
	return &supervisorpb.Empty{}, toStatus(s.d.Stop(r.GetName()))
}

func (s *server) Unload(ctx context.Context, r *supervisorpb.WaitRequest) (*supervisorpb.WaitReply, error) {
	return s.wait(ctx, r, s.d.Unload)
}

func (s *server) Kill(ctx context.Context, r *supervisorpb.WaitRequest) (*supervisorpb.WaitReply, error) {
	return s.wait(ctx, r, s.d.Kill)
}

// wait runs an action that waits for the unit to be gone, for at most the
// request's wait_ms: done is false when the unit is still going.
func (s *server) wait(ctx context.Context, r *supervisorpb.WaitRequest, act func(context.Context, string) error) (*supervisorpb.WaitReply, error) {
	wctx, cancel := context.WithTimeout(ctx, time.Duration(r.GetWaitMs())*time.Millisecond)
	defer cancel()
	err := act(wctx, r.GetName())
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return &supervisorpb.WaitReply{Done: false}, nil
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return &supervisorpb.WaitReply{Done: true}, nil
}

func (s *server) States(context.Context, *supervisorpb.Empty) (*supervisorpb.StatesReply, error) {
	sts := s.d.States()
	out := &supervisorpb.StatesReply{Units: make([]*supervisorpb.UnitStatus, len(sts))}
	for i, st := range sts {
		out.Units[i] = toPB(st)
	}
	return out, nil
}

func (s *server) Fence(_ context.Context, r *supervisorpb.FenceRequest) (*supervisorpb.Empty, error) {
	return &supervisorpb.Empty{}, toStatus(s.d.Fence(monotime.Time(r.GetDeadline()), r.GetNames()))
}

// watchBatch is the most changes sent in one Event.
const watchBatch = 512

func (s *server) Watch(_ *supervisorpb.Empty, stream grpc.ServerStreamingServer[supervisorpb.Event]) error {
	snap, w := s.hub.subscribe()
	defer s.hub.unsubscribe(w)
	ev := &supervisorpb.Event{Snapshot: true, Units: make([]*supervisorpb.UnitStatus, len(snap))}
	for i, st := range snap {
		ev.Units[i] = toPB(st)
	}
	if err := stream.Send(ev); err != nil {
		return err
	}
	for {
		select {
		case he := <-w.ch:
			ev := &supervisorpb.Event{}
			add := func(he hubEvent) {
				if he.st != nil {
					ev.Units = append(ev.Units, toPB(*he.st))
				} else {
					ev.Removed = append(ev.Removed, he.removed)
				}
			}
			add(he)
		batch:
			for len(ev.Units)+len(ev.Removed) < watchBatch {
				select {
				case he := <-w.ch:
					add(he)
				default:
					break batch
				}
			}
			if err := stream.Send(ev); err != nil {
				return err
			}
		case <-w.cut:
			return toStatus(errors.New("supervisor: watcher fell behind; watch again"))
		case <-s.closed:
			return nil
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

func (s *server) Shutdown(ctx context.Context, r *supervisorpb.WaitRequest) (*supervisorpb.WaitReply, error) {
	s.once.Do(func() {
		d := time.Duration(r.GetDeadlineMs()) * time.Millisecond
		if d <= 0 {
			d = DefaultShutdownTimeout
		}
		s.shutdown <- d
	})
	select {
	case <-s.closed:
		return &supervisorpb.WaitReply{Done: true}, nil
	case <-time.After(time.Duration(r.GetWaitMs()) * time.Millisecond):
		return &supervisorpb.WaitReply{Done: false}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *server) SetLogConfig(_ context.Context, r *supervisorpb.LogConfig) (*supervisorpb.Empty, error) {
	c := execdriver.LogConfig{
		Limits:   execdriver.LogLimits{MaxBytes: r.GetMaxBytes(), MaxFiles: int(r.GetMaxFiles())},
		Journald: r.GetJournald(),
		Machine:  r.GetMachine(),
	}
	if err := s.d.SetLogConfig(c); err != nil {
		return nil, toStatus(err)
	}
	s.log.Info("log settings", "max_bytes", c.Limits.MaxBytes, "max_files", c.Limits.MaxFiles, "journald", c.Journald)
	return &supervisorpb.Empty{}, nil
}

func (s *server) RemoveLog(_ context.Context, r *supervisorpb.UnitRequest) (*supervisorpb.Empty, error) {
	return &supervisorpb.Empty{}, toStatus(s.d.RemoveLog(r.GetName()))
}

func newInstance() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// writePIDFile writes pid to path atomically.
func writePIDFile(path string, pid int) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// readPIDFile reads a pid written by writePIDFile.
func readPIDFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("%s: not a pid: %q", path, b)
	}
	return pid, nil
}

// ServeArgs serves as the supervisor a client starts with the arguments it
// gives it ("supervisor --dir DIR [--inaccessible PATH]... [--idle-exit
// DURATION]", see Client), and returns the process's exit code. Test
// binaries that stand in for the flotilla binary call it.
func ServeArgs(args []string, version string, log *slog.Logger) int {
	var dir, handover string
	var hidden []string
	var idle time.Duration
	var fallback int
	for i, a := range args {
		if i+1 >= len(args) {
			break
		}
		switch a {
		case "--dir":
			dir = args[i+1]
		case "--inaccessible":
			hidden = append(hidden, args[i+1])
		case "--idle-exit":
			var err error
			if idle, err = time.ParseDuration(args[i+1]); err != nil {
				fmt.Fprintf(os.Stderr, "supervisor: --idle-exit: %v\n", err)
				return 2
			}
			if idle == 0 {
				idle = -1 // never, as for flotilla supervisor
			}
		case "--handover":
			handover = args[i+1]
		case "--handover-fallback-fd":
			var err error
			if fallback, err = strconv.Atoi(args[i+1]); err != nil {
				fmt.Fprintf(os.Stderr, "supervisor: --handover-fallback-fd: %v\n", err)
				return 2
			}
		}
	}
	if len(args) == 0 || args[0] != "supervisor" || dir == "" {
		fmt.Fprintf(os.Stderr, "supervisor: want arguments supervisor --dir DIR, got %q\n", args)
		return 2
	}
	if err := Serve(ServeConfig{Dir: dir, Version: version, Logger: log, Inaccessible: hidden, IdleExit: idle, Handover: handover, HandoverFallbackFD: fallback}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
