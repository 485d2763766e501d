package unithide

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// Arg0OwnPID is argv[0] of the step that tells a unit's process its own
// PID, which the driver starting it cannot know beforehand: systemd's
// WATCHDOG_PID is the PID of the main process itself.
const Arg0OwnPID = "flotilla-unit-pid"

func init() {
	if len(os.Args) > 0 && os.Args[0] == Arg0OwnPID {
		err := ownPIDAndExec(os.Args[1:])
		fmt.Fprintf(os.Stderr, "flotilla: %v\n", err)
		os.Exit(exitSetup)
	}
}

// WithOwnPID rewrites cmd to start through a step of this program (which
// must link this package) that sets the environment variable name to its
// own PID and executes cmd's program in its place: the same process, so
// the PID is the program's. It may wrap a command Wrap rewrote.
func WithOwnPID(cmd *exec.Cmd, name string) {
	args := append([]string{Arg0OwnPID, name, cmd.Path}, cmd.Args...)
	cmd.Path, cmd.Args = "/proc/self/exe", args
}

// ownPIDAndExec is the step; its arguments: the variable's name, the
// program, argv. It returns only on failure.
func ownPIDAndExec(a []string) error {
	if len(a) < 3 {
		return fmt.Errorf("%s: %d arguments", Arg0OwnPID, len(a))
	}
	name, prog, argv := a[0], a[1], a[2:]
	env := os.Environ()
	kv := name + "=" + strconv.Itoa(os.Getpid())
	set := false
	for i, e := range env {
		if len(e) > len(name) && e[:len(name)+1] == name+"=" {
			env[i], set = kv, true
		}
	}
	if !set {
		env = append(env, kv)
	}
	return fmt.Errorf("exec %s: %w", prog, syscall.Exec(prog, argv, env))
}
