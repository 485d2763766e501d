package execdriver

import (
	"os"
	"os/exec"
	"os/user"
	"syscall"

	"github.com/flotilla/flotilla/internal/driver/service"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/unithide"
)

// ProbeCommand returns c, a command of f's [X-Check] Exec=, ready to run as
// the unit's own processes are: with its environment (the base of PATH and
// HOME, USER and LOGNAME for User=, then Environment= and
// EnvironmentFile=), its variables expanded, as User=/Group=, in
// WorkingDirectory=, in a process group of its own that is killed with
// the caller. hidden are the paths units may not see (Config.Inaccessible).
// Its output is discarded; the caller starts and waits for it.
func ProbeCommand(f *unit.File, c unit.Command, hidden ...string) (*exec.Cmd, error) {
	d := &Driver{euid: os.Geteuid(), home: "/"}
	if u, err := user.Current(); err == nil && u.HomeDir != "" {
		d.home = u.HomeDir
	}
	svc := &f.Service
	ee, err := d.prepare(svc)
	if err != nil {
		return nil, err
	}
	env, err := service.UnitEnviron(ee.base, svc, hidden...)
	if err != nil {
		return nil, err
	}
	argv := service.ExpandArgv(c.Argv, env)
	pathVar, _ := env.Get("PATH")
	path, err := service.LookPath(argv[0], pathVar)
	if err != nil {
		return nil, err
	}
	return d.probeCmd(path, argv, env.List(), ee, hidden), nil
}

// probeCmd is a probe's process: path run with argv and vars as the unit's
// processes are (ee: in its directory, as its user), in a process group of
// its own killed with the caller, with hidden hidden from it.
func (d *Driver) probeCmd(path string, argv, vars []string, ee *execEnv, hidden []string) *exec.Cmd {
	cmd := &exec.Cmd{
		Path: path,
		Args: argv,
		Env:  vars,
		Dir:  ee.dir,
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:    true,
			Pdeathsig:  syscall.SIGKILL,
			Credential: ee.cred,
		},
	}
	if len(hidden) > 0 && d.euid == 0 {
		unithide.Wrap(cmd, hidden)
	}
	return cmd
}
