// Package unithide starts a unit's process with paths made inaccessible
// to it, as systemd's InaccessiblePaths= does, for the exec driver run as
// root. A process Wrap rewrote starts as this program again, under the name
// Arg0, in a mount namespace of its own; this package's init, which runs
// before the other packages of the program (it imports only the standard
// library and x/sys), covers the paths there, takes the unit's user and
// group, and executes the unit's command in its place (same PID).
package unithide

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Arg0 is argv[0] of the step a unit's process passes through.
const Arg0 = "flotilla-unit-hide"

func init() {
	if len(os.Args) > 0 && os.Args[0] == Arg0 {
		err := hideAndExec(os.Args[1:])
		fmt.Fprintf(os.Stderr, "flotilla: %v\n", err)
		os.Exit(exitSetup)
	}
}

// exitSetup is the exit status of a unit process whose namespace or
// identity could not be set up (systemd's 226/NAMESPACE).
const exitSetup = 226

// Wrap rewrites cmd, whose SysProcAttr is set, to start through the hiding
// step with paths covered: in a new mount namespace (private, so nothing
// leaks back), with the unit's credentials applied after the mounts instead
// of by the fork. The program must link this package.
func Wrap(cmd *exec.Cmd, paths []string) {
	args := []string{Arg0, strconv.Itoa(os.Getpid())}
	cred := cmd.SysProcAttr.Credential
	switch {
	case cred == nil:
		args = append(args, "-", "-", "-")
	case cred.NoSetGroups:
		args = append(args, fmt.Sprint(cred.Uid), fmt.Sprint(cred.Gid), "-")
	default:
		gs := make([]string, 0, len(cred.Groups)+1)
		for _, g := range cred.Groups {
			gs = append(gs, fmt.Sprint(g))
		}
		args = append(args, fmt.Sprint(cred.Uid), fmt.Sprint(cred.Gid), ","+strings.Join(gs, ","))
	}
	args = append(args, cmd.Dir, strconv.Itoa(len(paths)))
	args = append(args, paths...)
	args = append(args, cmd.Path)
	args = append(args, cmd.Args...)
	cmd.Path, cmd.Args = "/proc/self/exe", args
	cmd.SysProcAttr.Credential = nil
	cmd.SysProcAttr.Unshareflags |= syscall.CLONE_NEWNS // Go makes / private in it
}

// hideAndExec is the hiding step; it returns only on failure. Its
// arguments: the supervisor's PID, uid, gid, groups (",g1,g2"; "-" for
// unchanged), working directory, the number of paths, the paths, the
// program, argv.
func hideAndExec(a []string) error {
	if len(a) < 7 {
		return fmt.Errorf("%s: %d arguments", Arg0, len(a))
	}
	parent, uid, gid, groups, dir := a[0], a[1], a[2], a[3], a[4]
	n, err := strconv.Atoi(a[5])
	if err != nil || n < 0 || len(a) < 6+n+2 {
		return fmt.Errorf("%s: bad path count %q", Arg0, a[5])
	}
	paths, prog, argv := a[6:6+n], a[6+n], a[7+n:]
	if err := makeInaccessible(paths); err != nil {
		return err
	}
	if groups != "-" {
		var gs []int
		for g := range strings.SplitSeq(strings.TrimPrefix(groups, ","), ",") {
			if g == "" {
				continue
			}
			v, err := strconv.Atoi(g)
			if err != nil {
				return fmt.Errorf("group %q: %w", g, err)
			}
			gs = append(gs, v)
		}
		if err := syscall.Setgroups(gs); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
	}
	if gid != "-" {
		g, _ := strconv.Atoi(gid)
		if err := syscall.Setresgid(g, g, g); err != nil {
			return fmt.Errorf("setgid %d: %w", g, err)
		}
	}
	if uid != "-" {
		u, _ := strconv.Atoi(uid)
		if err := syscall.Setresuid(u, u, u); err != nil {
			return fmt.Errorf("setuid %d: %w", u, err)
		}
	}
	// Changing credentials clears the parent-death signal.
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0); e != 0 {
		return fmt.Errorf("prctl: %w", e)
	}
	if strconv.Itoa(os.Getppid()) != parent {
		return fmt.Errorf("the supervisor (PID %s) is gone", parent)
	}
	// The directory again, now that the mounts may cover it.
	if err := os.Chdir(dir); err != nil {
		return fmt.Errorf("WorkingDirectory=%s: %w", dir, err)
	}
	return fmt.Errorf("exec %s: %w", prog, syscall.Exec(prog, argv, os.Environ()))
}

// makeInaccessible covers each path that exists, as systemd's
// InaccessiblePaths= does: a directory with an empty read-only tmpfs of
// mode 000, a file (or anything else) with a character device that cannot
// be opened (0:0, mode 000, on a read-only nodev mount). Symbolic links
// are followed. It must run in a mount namespace of its own.
func makeInaccessible(paths []string) error {
	const ro = syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC
	// Each path is held open first and mounted on through /proc/self/fd,
	// so that the tmpfs lent for the node (over /tmp) hides none of them.
	var dirs, files []string
	for _, p := range paths {
		fd, err := syscall.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // nothing there to hide
		}
		defer syscall.Close(fd)
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			return fmt.Errorf("make %s inaccessible: %w", p, err)
		}
		at := "/proc/self/fd/" + strconv.Itoa(fd)
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			dirs = append(dirs, at)
		} else {
			files = append(files, at)
		}
	}
	if len(files) > 0 {
		const tmp = "/tmp"
		node := filepath.Join(tmp, "inaccessible")
		if err := syscall.Mount("tmpfs", tmp, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "mode=700,size=4k"); err != nil {
			return fmt.Errorf("a tmpfs for the inaccessible node: %w", err)
		}
		if err := syscall.Mknod(node, syscall.S_IFCHR, 0); err != nil {
			return fmt.Errorf("the inaccessible node: %w", err)
		}
		// Bind mounts of it take its mount's flags.
		if err := syscall.Mount("", tmp, "", syscall.MS_REMOUNT|ro, "mode=700,size=4k"); err != nil {
			return fmt.Errorf("the inaccessible node: %w", err)
		}
		for _, at := range files {
			if err := syscall.Mount(node, at, "", syscall.MS_BIND, ""); err != nil {
				return fmt.Errorf("make %s inaccessible: %w", at, err)
			}
		}
		// The tmpfs goes; the bind mounts of its node stay.
		if err := syscall.Unmount(tmp, syscall.MNT_DETACH); err != nil {
			return fmt.Errorf("the inaccessible node: %w", err)
		}
	}
	for _, at := range dirs {
		if err := syscall.Mount("tmpfs", at, "tmpfs", ro, "mode=000,size=4k"); err != nil {
			return fmt.Errorf("make %s inaccessible: %w", at, err)
		}
	}
	return nil
}
