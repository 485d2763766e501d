package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// process is a child process of the bench: a daemon or a process of agents.
// It runs in its own process group, so the terminal's Ctrl-C reaches the
// bench alone, which then stops its children in order; and it is killed
// if the bench dies (Pdeathsig).
type process struct {
	name string
	cmd  *exec.Cmd
	log  string // file holding its stdout and stderr
	done chan struct{}
	err  error // its exit status, once done is closed
	// killed is set when the bench killed it on purpose (--failover): its
	// end is no failure, and it has no more statistics.
	killed bool
}

// kill ends the process at once (SIGKILL), as a crash would, and waits
// for it.
func (p *process) kill() {
	p.killed = true
	p.cmd.Process.Kill()
	<-p.done
}

// startProcess starts bin with args, its output going to logPath.
func startProcess(name, bin string, args []string, logPath string, env ...string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...) // the last value of a key wins
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// exited returns an error describing the process's end if it has ended.
func (p *process) exited() error {
	if p.killed {
		return nil
	}
	select {
	case <-p.done:
		return fmt.Errorf("%s exited unexpectedly (%v); the end of its log:\n%s", p.name, p.err, p.tail(20))
	default:
		return nil
	}
}

// stop asks the process to shut down (SIGTERM) and waits up to grace for
// it; then it kills its whole process group.
func (p *process) stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.done
	}
}

// tail returns the last n lines of the process's log.
func (p *process) tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.ReplaceAll(string(bytes.Join(lines, []byte("\n"))), "\n", "\n  ")
}
