package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"strconv"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
)

// apiListeners are where the HTTP API is served: tcp on --api-addr (TLS
// when the cluster has credentials), and unix on --api-socket (plain HTTP:
// the socket file's mode, 0600, or 0660 for --api-socket-group, is its
// guard; tokens still apply with --acl). Sockets that systemd passes (socket activation: LISTEN_FDS)
// take the place of --api-addr when one of them is TCP, and of
// --api-socket when one is a unix socket; the daemon listens itself for
// what systemd does not pass, as the cluster needs a TCP address to
// forward requests to its leader.
type apiListeners struct {
	tcp       []net.Listener
	unix      []net.Listener
	activated int
	// socket is the path this daemon created (and removes on exit).
	socket string
}

func (l *apiListeners) close() {
	for _, ln := range append(append([]net.Listener(nil), l.tcp...), l.unix...) {
		ln.Close()
	}
	if l.socket != "" {
		os.Remove(l.socket)
	}
}

// listenAPI opens the API's listeners for cfg.
func listenAPI(cfg *Config) (*apiListeners, error) {
	l := &apiListeners{}
	passed, err := activation.Listeners()
	if err != nil {
		return nil, fmt.Errorf("systemd socket activation (LISTEN_FDS): %w", err)
	}
	for _, ln := range passed {
		if ln == nil {
			continue // not a stream socket
		}
		l.activated++
		if ln.Addr().Network() == "unix" {
			l.unix = append(l.unix, ln)
		} else {
			l.tcp = append(l.tcp, ln)
		}
	}
	if len(l.tcp) > 0 {
		// What systemd passed is what --api-addr would have been: the
		// checks of a listener beyond loopback apply to it.
		cfg.APIAddr = l.tcp[0].Addr().String()
	} else {
		ln, err := net.Listen("tcp", cfg.APIAddr)
		if err != nil {
			l.close()
			return nil, listenError("--api-addr", cfg.APIAddr, err)
		}
		l.tcp = append(l.tcp, ln)
	}
	if len(l.unix) == 0 && cfg.APISocket != "" {
		ln, err := listenUnix(cfg.APISocket, cfg.APISocketGroup)
		if err != nil {
			l.close()
			return nil, fmt.Errorf("--api-socket: %w", err) // names the path
		}
		l.unix = append(l.unix, ln)
		l.socket = cfg.APISocket
	}
	return l, nil
}

// listenUnix listens on a unix socket at path with mode 0600, only the
// daemon's user may connect, or, given a group, 0660 with that group. A
// socket file left by a daemon that died is replaced; one a live process
// listens on is refused, as is any other kind of file.
func listenUnix(path, group string) (net.Listener, error) {
	gid := -1
	if group != "" {
		g, err := user.LookupGroup(group)
		if err != nil {
			if _, nerr := strconv.Atoi(group); nerr == nil {
				g, err = user.LookupGroupId(group)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("--api-socket-group %s: no such group", group)
		}
		gid, _ = strconv.Atoi(g.Gid)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("%s is in use: another process listens on it", path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ENOENT) {
			return nil, fmt.Errorf("%s: checking whether it is in use: %w", path, err)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("removing the stale socket %s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	// Connecting needs write permission, which the usual umask (022)
	// already withholds from others until the chmod.
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	mode := os.FileMode(0o600)
	if gid >= 0 {
		mode = 0o660
		err = os.Chown(path, -1, gid)
	}
	if err == nil {
		err = os.Chmod(path, mode)
	}
	if err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}
