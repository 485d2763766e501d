package daemon

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// errNoSocket is diagUID's answer when the kernel has no such socket.
var errNoSocket = errors.New("no such socket")

// diagUID asks the kernel for the owner of the TCP socket whose own
// address is local and whose peer is remote, by those exact addresses,
// through sock_diag (NETLINK_SOCK_DIAG, as ss asks): one lookup in the
// kernel's hash of connections, where reading /proc/net/tcp walks every
// socket of the host, which at ten thousand agents connecting to a leader
// is ten thousand walks of tens of thousands of lines. family is AF_INET
// or AF_INET6 (an IPv4 peer may be an AF_INET6 socket with v4-mapped
// addresses). The request is written by hand: x/sys has the constants but
// not the structures, and vishvananda/netlink's SocketGet asks for a dump
// of every socket.
func diagUID(family int, local, remote *net.TCPAddr) (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return 0, fmt.Errorf("sock_diag: %w", err)
	}
	defer unix.Close(fd)
	ne := binary.NativeEndian
	// struct nlmsghdr (16 bytes), then struct inet_diag_req_v2 (56).
	req := make([]byte, 16+56)
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(req[8:], 1) // sequence
	r := req[16:]
	r[0], r[1] = byte(family), unix.IPPROTO_TCP
	ne.PutUint32(r[4:], 0xffffffff) // every state
	// struct inet_diag_sockid: ports and addresses in network order.
	id := r[8:]
	binary.BigEndian.PutUint16(id[0:], uint16(local.Port))
	binary.BigEndian.PutUint16(id[2:], uint16(remote.Port))
	if err := putDiagAddr(id[4:20], family, local.IP); err != nil {
		return 0, err
	}
	if err := putDiagAddr(id[20:36], family, remote.IP); err != nil {
		return 0, err
	}
	ne.PutUint32(id[40:], 0xffffffff) // INET_DIAG_NOCOOKIE
	ne.PutUint32(id[44:], 0xffffffff)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("sock_diag: %w", err)
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return 0, fmt.Errorf("sock_diag: %w", err)
	}
	if n < 16 {
		return 0, fmt.Errorf("sock_diag: a short answer of %d bytes", n)
	}
	switch typ := ne.Uint16(buf[4:]); {
	case typ == unix.NLMSG_ERROR && n >= 20:
		errno := unix.Errno(-int32(ne.Uint32(buf[16:])))
		if errno == unix.ENOENT {
			return 0, errNoSocket
		}
		return 0, fmt.Errorf("sock_diag: %w", errno)
	case typ == unix.SOCK_DIAG_BY_FAMILY && n >= 16+72:
		// struct inet_diag_msg: idiag_uid at 64.
		return int(ne.Uint32(buf[16+64:])), nil
	default:
		return 0, fmt.Errorf("sock_diag: an answer of type %d and %d bytes", typ, n)
	}
}

// putDiagAddr writes ip into an inet_diag_sockid address field: the four
// bytes of an IPv4 address first for AF_INET, all sixteen (v4-mapped for
// an IPv4 address) for AF_INET6.
func putDiagAddr(dst []byte, family int, ip net.IP) error {
	if family == unix.AF_INET {
		v4 := ip.To4()
		if v4 == nil {
			return fmt.Errorf("sock_diag: %s is not an IPv4 address", ip)
		}
		copy(dst, v4)
		return nil
	}
	copy(dst, ip.To16())
	return nil
}
