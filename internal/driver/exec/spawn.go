package execdriver

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/flotilla/flotilla/internal/driver/service"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/unithide"
)

// proc is a process the supervisor started.
type proc struct {
	pid    int
	label  string        // the option it comes from: "ExecStartPre", "ExecStart", ...
	cmd    unit.Command  // as written
	argv   []string      // as executed
	os     *os.Process   // waited for by supervisor.wait
	out    *outPipe      // its output pipe, shared with its children
	copied chan struct{} // closed once its output pipe is drained
}

// execEnv is what all processes of one run share: who they run as, where,
// and the base of their environment.
type execEnv struct {
	cred *syscall.Credential // nil: as the driver's own user
	dir  string
	base []string
}

// prepare works out how the processes of a run of svc are started.
func (d *Driver) prepare(svc *unit.Service) (*execEnv, error) {
	id, err := lookupIdentity(svc.User, svc.Group, d.euid, os.Getegid())
	if err != nil {
		return nil, err
	}
	home := d.home
	base := []string{"PATH=" + service.DefaultPath}
	if svc.User != "" {
		home = id.home
		base = append(base, "HOME="+home, "USER="+id.name, "LOGNAME="+id.name)
	} else {
		base = append(base, "HOME="+home)
	}
	dir, err := workingDir(svc.WorkingDirectory, home)
	if err != nil {
		return nil, err
	}
	return &execEnv{cred: id.cred, dir: dir, base: base}, nil
}

// identity is who a unit's processes run as.
type identity struct {
	cred *syscall.Credential // nil: as the driver's own user
	name string              // user name, when User= is set
	home string
}

// lookupIdentity resolves User= and Group= (names or numeric IDs). Running as
// root (euid 0), the processes get that user, its groups, and Group= (or
// the user's primary group). Otherwise only the driver's own user and groups
// can be asked for, since changing identity needs root.
func lookupIdentity(userName, groupName string, euid, egid int) (identity, error) {
	if userName == "" && groupName == "" {
		return identity{}, nil
	}
	id := identity{home: "/"}
	uid, gid := uint32(euid), uint32(egid)
	var groups []uint32
	if userName != "" {
		u, err := user.Lookup(userName)
		if err != nil {
			if _, nerr := strconv.Atoi(userName); nerr == nil {
				u, err = user.LookupId(userName)
			}
		}
		if err != nil {
			return identity{}, fmt.Errorf("User=%s: unknown user", userName)
		}
		uid, gid = parseID(u.Uid), parseID(u.Gid)
		id.name = u.Username
		if u.HomeDir != "" {
			id.home = u.HomeDir
		}
		if gids, err := u.GroupIds(); err == nil {
			for _, g := range gids {
				groups = append(groups, parseID(g))
			}
		}
	}
	if groupName != "" {
		g, err := user.LookupGroup(groupName)
		if err != nil {
			if _, nerr := strconv.Atoi(groupName); nerr == nil {
				g, err = user.LookupGroupId(groupName)
			}
		}
		if err != nil {
			return identity{}, fmt.Errorf("Group=%s: unknown group", groupName)
		}
		gid = parseID(g.Gid)
	}
	if euid != 0 {
		if userName != "" && int(uid) != euid {
			return identity{}, fmt.Errorf("User=%s needs flotilla to run as root (it runs as uid %d)", userName, euid)
		}
		if groupName != "" && int(gid) != egid {
			own, _ := os.Getgroups()
			if !slices.Contains(own, int(gid)) {
				return identity{}, fmt.Errorf("Group=%s needs flotilla to run as root or in that group", groupName)
			}
		}
		return id, nil
	}
	cred := &syscall.Credential{Uid: uid, Gid: gid}
	if userName != "" {
		cred.Groups = groups
	} else {
		cred.NoSetGroups = true // Group= alone: keep the driver's supplementary groups
	}
	id.cred = cred
	return id, nil
}

func parseID(s string) uint32 {
	n, _ := strconv.ParseUint(s, 10, 32)
	return uint32(n)
}

// workingDir resolves WorkingDirectory=: "/" when unset (as systemd does for
// system services), "~" for the user's home, and a "-" prefix makes a
// missing directory fall back to "/" instead of failing the start.
func workingDir(wd, home string) (string, error) {
	optional := strings.HasPrefix(wd, "-")
	wd = strings.TrimPrefix(wd, "-")
	switch {
	case wd == "":
		return "/", nil
	case wd == "~":
		wd = home
	case !filepath.IsAbs(wd):
		return "", fmt.Errorf("WorkingDirectory=%s is not an absolute path", wd)
	}
	fi, err := os.Stat(wd)
	switch {
	case optional && errors.Is(err, fs.ErrNotExist):
		return "/", nil
	case err != nil:
		return "", fmt.Errorf("WorkingDirectory=: %w", err)
	case !fi.IsDir():
		return "", fmt.Errorf("WorkingDirectory=%s is not a directory", wd)
	}
	return wd, nil
}

// startProcess starts c in its own process group, with SIGKILL as its
// parent-death signal, in cg when not nil; its stdout and stderr go, line by
// line, to the unit's log. It returns the process and its group.
func (s *supervisor) startProcess(c cmdRef, extra []string, cg unitCgroup) (*proc, pgroup, error) {
	svc := &s.cur.Service
	env, err := service.UnitEnviron(s.env.base, svc, s.d.cfg.Inaccessible...)
	if err != nil {
		return nil, pgroup{}, err
	}
	env.Add(extra)
	argv := service.ExpandArgv(c.cmd.Argv, env)
	pathVar, _ := env.Get("PATH")
	path, err := service.LookPath(argv[0], pathVar)
	if err != nil {
		return nil, pgroup{}, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, pgroup{}, err
	}
	cmd := &exec.Cmd{
		Path:   path,
		Args:   argv,
		Env:    env.List(),
		Dir:    s.env.dir,
		Stdout: w,
		Stderr: w,
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:    true,
			Pdeathsig:  syscall.SIGKILL,
			Credential: s.env.cred,
		},
	}
	if len(s.d.cfg.Inaccessible) > 0 && s.d.euid == 0 {
		unithide.Wrap(cmd, s.d.cfg.Inaccessible)
	}
	if slices.Contains(extra, ownPIDVar+"=") {
		unithide.WithOwnPID(cmd, ownPIDVar)
	}
	s.d.kids.lock.RLock()
	s.d.spawn(func() {
		if cg != nil {
			err = cg.start(cmd)
		} else {
			err = cmd.Start()
		}
	})
	if err == nil {
		s.d.kids.add(cmd.Process.Pid)
	}
	s.d.kids.lock.RUnlock()
	w.Close()
	if err != nil {
		r.Close()
		return nil, pgroup{}, err
	}
	out := newOutPipe(r)
	p := &proc{pid: cmd.Process.Pid, label: c.label, cmd: c.cmd, argv: argv, os: cmd.Process, out: out, copied: make(chan struct{})}
	g := pgroup{pgid: p.pid}
	if st, err := readProcStat(p.pid); err == nil {
		g.start = st.start
	}
	s.copyPipe(out, p.pid, p.copied, nil)
	return p, g, nil
}

// spawn runs f, which starts a process, on the driver's spawning thread
// (Config.Spawn), or on the caller's when there is none.
func (d *Driver) spawn(f func()) {
	if d.cfg.Spawn != nil {
		d.cfg.Spawn(f)
		return
	}
	f()
}

// copyPipe starts the copier of a process's output pipe: rest (bytes a
// previous process image read and did not log) first, then the pipe, line
// by line into the unit's log. copied, if not nil, is closed once the pipe
// has ended and all of it is logged. A copier paused for a handover leaves
// the pipe open and hands what it did not log to out.rest.
func (s *supervisor) copyPipe(out *outPipe, pid int, copied chan struct{}, rest []byte) {
	s.readers.Add(1)
	s.trackPipe(out, pid, true)
	go func() {
		defer s.readers.Done()
		var r io.Reader = out
		if len(rest) > 0 {
			r = io.MultiReader(bytes.NewReader(rest), out)
		}
		left, paused := s.log.copyLines(r, s.name, pid)
		if paused {
			out.rest <- left
			return
		}
		if copied != nil {
			close(copied)
		}
		s.trackPipe(out, pid, false)
		out.Close()
		close(out.closed)
	}()
}
