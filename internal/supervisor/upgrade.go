package supervisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	execdriver "github.com/flotilla/flotilla/internal/driver/exec"
	"github.com/flotilla/flotilla/proto/supervisorpb"
)

// # Upgrading in place
//
// A daemon that adopts a supervisor running another binary than its own
// (their executables' SHA-256 differ) asks it to Upgrade: the supervisor
// freezes its units (execdriver.Driver.Handover), writes their state to
// HandoverFile in its directory and calls execve with the daemon's binary
// and "--handover FILE". execve keeps the PID, the children (the units'
// processes) and the descriptors without close-on-exec: the lock of the
// directory, the units' output pipes, the listening socket (so clients
// that connect meanwhile wait in its backlog). The new image reads the
// file, adopts the units (execdriver.Adopt) and serves again.
//
// The units' processes carry SIGKILL as their parent-death signal, which
// Linux ties to the thread that started them, and execve ends every thread
// but the calling one. So a supervisor started as "... supervisor ..."
// locks its main goroutine to the main thread (init, below), starts every
// process from it (execdriver.Config.Spawn) and calls execve from it: the
// main thread is the one that survives, and it is the new image's main
// thread, which the Go runtime never ends.

// HandoverFile is the handover's file in the supervisor's directory.
const HandoverFile = "supervisor.handover"

// handoverTimeout bounds freezing the units for an upgrade: a unit that
// stays starting or stopping this long makes the upgrade fail (the
// daemon tries again when it next adopts the supervisor).
const handoverTimeout = 10 * time.Second

// mainLocked is set when this process runs as the supervisor ("supervisor"
// is its first argument): init has locked the main goroutine to the main
// thread.
var mainLocked bool

func init() {
	if len(os.Args) > 1 && os.Args[1] == "supervisor" {
		runtime.LockOSThread()
		mainLocked = true
	}
}

// mainThread runs functions on the process's main thread, for a Serve
// called on it.
type mainThread struct{ q chan func() }

// run runs f on the main thread and returns once it has.
func (m *mainThread) run(f func()) {
	done := make(chan struct{})
	m.q <- func() { f(); close(done) }
	<-done
}

// onMainThread reports whether the caller runs on the main thread, locked
// to it since init.
func onMainThread() bool { return mainLocked && unix.Gettid() == os.Getpid() }

// handover is what an image of the supervisor gives the next: the exec
// driver's state and the supervisor's own.
type handover struct {
	Driver          *execdriver.Handover `json:"driver"`
	ListenerFD      int                  `json:"listenerFD"`
	Instance        string               `json:"instance"`
	StartedUnixNano int64                `json:"startedUnixNano"`
	Previous        string               `json:"previous"` // the binary that wrote it, for the log
}

// refuseHandover, when set, makes readHandover fail with its error: the
// tests' stand-in for a binary that cannot read its predecessor's handover
// (another format).
var refuseHandover func() error

// readHandover reads and checks a handover file.
func readHandover(path string) (*handover, error) {
	if refuseHandover != nil {
		if err := refuseHandover(); err != nil {
			return nil, err
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var h handover
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if h.Driver == nil {
		return nil, fmt.Errorf("%s: no driver state", path)
	}
	if err := h.Driver.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if h.ListenerFD < 0 || h.Instance == "" {
		return nil, fmt.Errorf("%s: no listening socket or instance", path)
	}
	return &h, nil
}

// execArgs are in, the arguments this image was started with (the
// supervisor's: "supervisor --dir DIR ..." and whatever flags it was
// given), without the handover flags of an earlier upgrade, then extra.
func execArgs(in []string, extra ...string) []string {
	var args []string
	for i := 0; i < len(in); i++ {
		a := in[i]
		switch {
		case a == "--handover" || a == "--handover-fallback-fd":
			i++ // and its value
			continue
		case strings.HasPrefix(a, "--handover=") || strings.HasPrefix(a, "--handover-fallback-fd="):
			continue
		}
		args = append(args, a)
	}
	return append(args, extra...)
}

// hashes caches the SHA-256 of executables by path, size and time.
var hashes sync.Map

// fileSHA256 returns the hex SHA-256 of the file at path.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	key := fmt.Sprintf("%s\x00%d\x00%d\x00%d", path, fi.Size(), fi.ModTime().UnixNano(), fi.Sys().(*syscall.Stat_t).Ino)
	if v, ok := hashes.Load(key); ok {
		return v.(string), nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	hashes.Store(key, sum)
	return sum, nil
}

// checkBinary says why binary cannot be executed as the supervisor, or
// returns its SHA-256.
func checkBinary(binary, want string) (string, error) {
	if !filepath.IsAbs(binary) {
		return "", fmt.Errorf("binary %q is not an absolute path", binary)
	}
	fi, err := os.Stat(binary)
	if err != nil {
		return "", fmt.Errorf("binary %s: %w", binary, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("binary %s is not a regular file (%s)", binary, fi.Mode().Type())
	}
	if err := unix.Access(binary, unix.X_OK); err != nil {
		return "", fmt.Errorf("binary %s is not executable: %w", binary, err)
	}
	sum, err := fileSHA256(binary)
	if err != nil {
		return "", fmt.Errorf("binary %s: %w", binary, err)
	}
	if want != "" && sum != want {
		return "", fmt.Errorf("binary %s has SHA-256 %.12s, not the %.12s asked for (replaced meanwhile?)", binary, sum, want)
	}
	return sum, nil
}

// upgradeReq is an Upgrade call handed to Serve's loop.
type upgradeReq struct {
	binary, sha256 string
	reply          chan error // gets the reason the upgrade did not happen
}

// reexec hands the driver over and executes binary in place of this
// image. It returns only when that did not happen, having resumed
// everything, with the reason.
func (s *server) reexec(cfg ServeConfig, ln net.Listener, u upgradeReq) error {
	if s.main == nil {
		return errors.New("this supervisor does not run on its process's main thread (it was not started as \"supervisor\"), so execve would kill its units")
	}
	if _, err := checkBinary(u.binary, u.sha256); err != nil {
		return err
	}
	lnFD, err := listenerFD(ln)
	if err != nil {
		return fmt.Errorf("listening socket: %w", err)
	}
	// The running binary, kept open so that a new image that cannot adopt
	// the units can go back to it even if its file was replaced.
	old, err := os.Open("/proc/self/exe")
	if err != nil {
		return fmt.Errorf("cannot open the running binary to go back to: %w", err)
	}
	defer old.Close()
	oldFD, err := execdriver.FdOf(old)
	if err != nil {
		return err
	}
	prev, _ := os.Executable()

	ctx, cancel := context.WithTimeout(context.Background(), handoverTimeout)
	defer cancel()
	dh, resume, err := s.d.Handover(ctx)
	if err != nil {
		return err
	}
	path := filepath.Join(cfg.Dir, HandoverFile)
	undo := func() {
		execdriver.SetCloexec(lnFD, true)
		execdriver.SetCloexec(oldFD, true)
		os.Remove(path)
		resume()
	}
	b, err := json.Marshal(handover{Driver: dh, ListenerFD: lnFD, Instance: s.instance, StartedUnixNano: s.started.UnixNano(), Previous: prev})
	if err == nil {
		err = writeFileSync(path, b)
	}
	if err == nil {
		err = execdriver.SetCloexec(lnFD, false)
	}
	if err == nil {
		err = execdriver.SetCloexec(oldFD, false)
	}
	if err != nil {
		undo()
		return fmt.Errorf("cannot write the handover: %w", err)
	}
	args := execArgs(os.Args[1:], "--handover", path, "--handover-fallback-fd", strconv.Itoa(oldFD))
	s.log.Info("re-executing into a new binary; the units are handed over", "binary", u.binary, "units", len(dh.Units), "handover", path)
	s.main.run(func() { err = syscall.Exec(u.binary, append([]string{u.binary}, args...), os.Environ()) })
	undo()
	return fmt.Errorf("execve %s: %w", u.binary, err)
}

// listenerFD is the listening socket's descriptor.
func listenerFD(ln net.Listener) (int, error) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return -1, fmt.Errorf("%T has no descriptor", ln)
	}
	return execdriver.FdOf(sc)
}

// writeFileSync writes a file and syncs it before it is read by the
// next image.
func writeFileSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// adoptFailed is the new image's way out when it cannot adopt what the
// previous one handed over: it never kills the units. It executes the
// previous binary (kept open by the previous image, descriptor fd) with
// the same handover, which that binary wrote and so can read; when that is
// impossible too it logs why and sleeps: the units keep running with no
// supervisor serving, and the directory stays locked, until an operator
// ends this process (which ends them).
func adoptFailed(cfg ServeConfig, log *slog.Logger, mt *mainThread, why error) error {
	log.Error("cannot adopt the units the previous binary handed over; going back to it", "err", why, "handover", cfg.Handover)
	err := errors.New("no previous binary to go back to (--handover-fallback-fd not given)")
	if cfg.HandoverFallbackFD > 0 && mt != nil {
		fd := cfg.HandoverFallbackFD
		path := "/proc/self/fd/" + strconv.Itoa(fd)
		execdriver.SetCloexec(fd, true) // an ELF binary is executed before close-on-exec closes it
		args := execArgs(os.Args[1:], "--handover", cfg.Handover)
		mt.run(func() { err = syscall.Exec(path, append([]string{path}, args...), os.Environ()) })
	}
	log.Error("cannot go back to the previous binary either: the units keep running unsupervised; this process only holds them (ending it kills them)",
		"err", err, "pid", os.Getpid())
	for {
		time.Sleep(time.Hour)
	}
}

// upgradeTimeout bounds an Upgrade call: the handover, then the execve.
const upgradeTimeout = handoverTimeout + 20*time.Second

// upgrade asks the supervisor behind sess, when it runs another binary
// than the client's, to re-execute itself into the client's (Upgrade), and
// returns the session and snapshot to go on with: a new one after an
// upgrade, sess and snap otherwise. A supervisor that cannot (it predates
// upgrades in place, the binary cannot be executed, a unit stayed busy)
// goes on as it was, with its units; the client logs why, and the next
// client to adopt it tries again.
func (c *Client) upgrade(sess *session, snap *supervisorpb.Event) (*session, *supervisorpb.Event, error) {
	h := sess.hello
	c.childMu.Lock()
	mine := c.child != nil && c.child.pid == int(h.GetPid())
	c.childMu.Unlock()
	if mine {
		return sess, snap, nil // started just now from c.cfg.Binary
	}
	if h.GetBinarySha256() == "" {
		c.log.Warn("the supervisor does not say which binary it runs (it predates upgrades in place, or cannot read its executable): it runs it until it is restarted",
			"pid", h.GetPid(), "supervisor_version", h.GetVersion(), "version", c.cfg.Version)
		return sess, snap, nil
	}
	own, err := fileSHA256(c.cfg.Binary)
	if err != nil {
		c.log.Warn("cannot hash this binary to compare it with the supervisor's; not upgrading it", "binary", c.cfg.Binary, "err", err)
		return sess, snap, nil
	}
	if own == h.GetBinarySha256() {
		return sess, snap, nil
	}
	pid := h.GetPid()
	c.log.Info("the supervisor runs another binary; asking it to re-execute itself into this one", "pid", pid,
		"supervisor_binary", h.GetBinary(), "supervisor_version", h.GetVersion(), "binary", c.cfg.Binary, "version", c.cfg.Version)
	ctx, cancel := context.WithTimeout(context.Background(), upgradeTimeout)
	_, err = sess.rpc.Upgrade(ctx, &supervisorpb.UpgradeRequest{Binary: c.cfg.Binary, Sha256: own})
	cancel()
	switch status.Code(err) {
	case codes.Unimplemented:
		c.log.Warn("the supervisor predates upgrades in place: it runs its own binary until it is restarted", "pid", pid, "supervisor_version", h.GetVersion())
		return sess, snap, nil
	case codes.FailedPrecondition, codes.Aborted, codes.Unknown, codes.DeadlineExceeded, codes.OK:
		c.log.Warn("the supervisor could not upgrade in place; it goes on with its binary and units, and the next daemon start tries again",
			"pid", pid, "binary", c.cfg.Binary, "why", status.Convert(err).Message())
		return sess, snap, nil
	}
	// The connection ended: the supervisor executed the new binary (or
	// went back to its own). Connect again: the listening socket was kept,
	// so this waits for the new image to serve.
	sess.close()
	deadline := time.Now().Add(c.cfg.StartTimeout)
	ns, nsnap, err := c.open()
	for err != nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		ns, nsnap, err = c.open()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("supervisor: no answer after asking it to upgrade in place to %s: %w", c.cfg.Binary, err)
	}
	nh := ns.hello
	switch {
	case int(nh.GetPid()) != int(pid) || nh.GetInstance() != h.GetInstance():
		c.log.Error("after the upgrade another supervisor answers: the old one ended, with its units", "old_pid", pid, "pid", nh.GetPid())
	case nh.GetBinarySha256() == own:
		c.log.Info("the supervisor upgraded in place: same pid, this binary, its units kept running", "pid", pid,
			"binary", nh.GetBinary(), "units", len(nsnap.GetUnits()))
	default:
		c.log.Warn("the supervisor could not adopt its units with this binary and went back to its own; see its log", "pid", pid,
			"binary", nh.GetBinary(), "log", filepath.Join(c.cfg.Dir, LogFile))
	}
	return ns, nsnap, nil
}
