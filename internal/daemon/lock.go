package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// LockFile is the file in a data dir that the daemon using it holds locked
// (flock) for as long as it runs, with its pid inside: a second daemon, or
// a second `flotilla dev`, on the same data dir is refused at once, naming
// the first; `flotilla supervisor stop` refuses to stop the units of a
// data dir whose daemon runs.
const LockFile = "daemon.lock"

// lockDataDir takes the data dir's lock, which is held until the returned
// file is closed (or the process ends). The file is not inherited by the
// processes the daemon starts (the supervisor): it is close-on-exec.
func lockDataDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, LockFile)
	f, err := tryLock(path, os.O_CREATE)
	if errors.Is(err, unix.EWOULDBLOCK) {
		who := ""
		if pid := lockHolder(path); pid > 0 {
			who = fmt.Sprintf(" (pid %d)", pid)
		}
		return nil, fmt.Errorf("data dir %s is in use by another flotilla daemon or dev%s: stop that one first, or give another --data-dir",
			dir, who)
	}
	if err != nil {
		return nil, fmt.Errorf("--data-dir: locking %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// tryLock opens path (with the extra open flags) and locks it without
// waiting: unix.EWOULDBLOCK when another open file holds it.
func tryLock(path string, flags int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|flags, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// lockHolder is the pid the lock file at path names (0: none).
func lockHolder(path string) int {
	b, _ := os.ReadFile(path)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return max(pid, 0)
}

// DataDirInUse reports whether a daemon runs on the data dir (holds its
// lock), and its pid if its lock file names it (0 otherwise).
func DataDirInUse(dir string) (bool, int) {
	path := filepath.Join(dir, LockFile)
	f, err := tryLock(path, 0)
	if err == nil {
		f.Close()
	}
	if !errors.Is(err, unix.EWOULDBLOCK) {
		return false, 0
	}
	return true, lockHolder(path)
}

// listenError is the error of a listener that cannot be opened: it names
// the flag and the address and, unlike the net.OpError it comes from, is
// not taken for an unreachable cluster (exit code 1, not 4; docs/cli.md).
func listenError(flag, addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s %s: address already in use: another process (another flotilla daemon or dev?) listens there; stop it, or give another %s", flag, addr, flag)
	}
	return fmt.Errorf("%s %s: %v", flag, addr, err)
}

// etcdListenError names the flag of the embedded member's address that etcd
// could not listen on, if that is why it failed to start.
func etcdListenError(m etcdMember, err error) error {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "listen" || op.Addr == nil {
		return err
	}
	switch a := op.Addr.String(); a {
	case m.ClientAddr:
		return listenError("--etcd-client-addr", a, err)
	case m.PeerAddr:
		return listenError("--etcd-peer-addr", a, err)
	}
	return err
}
