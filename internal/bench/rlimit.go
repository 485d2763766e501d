package bench

import (
	"syscall"
)

// maxOpenFiles is the open-file limit the bench asks for: the leader of
// 10,000 agents holds a stream for each, and the agents' processes as many
// again (the shipped systemd unit sets LimitNOFILE=1048576 for the same
// reason).
const maxOpenFiles = 1 << 20

// raiseFileLimit raises this process's hard and soft limits on open files
// to maxOpenFiles (or the kernel's fs.nr_open, if lower), so that the
// daemons the bench starts inherit it: a Go program raises its own soft
// limit to its hard one, but only a privileged one can raise the hard
// limit. Without the privilege, the limits stay as they are.
func raiseFileLimit() {
	n := uint64(maxOpenFiles)
	if v, err := sysctlInts("fs.nr_open"); err == nil && len(v) == 1 && v[0] >= 0 && uint64(v[0]) < n {
		n = uint64(v[0])
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Max >= n {
		return
	}
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n})
}
