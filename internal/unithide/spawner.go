package unithide

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/flotilla/flotilla/internal/spawn"
)

// A Spawner starts short-lived commands (the [X-Check] Exec= probes) in one
// mount namespace where the paths are covered, made once: a process of
// this program, started through the same step as a unit's process (Arg0Spawner),
// that stays in its namespace and starts each command there on request.
// Wrap costs an execution of this program (a large binary: several
// milliseconds of CPU) for every process, which is nothing for a unit's
// process and most of the cost of a probe run every few seconds; through
// a Spawner a probe costs its own fork and exec.
//
// The spawner process dies with the process that started it (its
// parent-death signal); a Spawner whose process died starts another at
// the next Run.
type Spawner struct {
	paths []string

	mu    sync.Mutex
	proc  *spawnerProc // nil: none runs
	next  uint64
	close bool
}

// spawnerProc is one spawner process and what is under way with it.
type spawnerProc struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	waits map[uint64]chan spawnReply // under Spawner.mu
	queue []byte                     // request frames not yet written, under Spawner.mu
	wake  chan struct{}              // the writer has a queue to write
	dead  chan struct{}              // closed when its replies end
}

// Arg0Spawner is argv[0] of a Spawner's process.
const Arg0Spawner = "flotilla-unit-spawner"

func init() {
	if len(os.Args) > 0 && os.Args[0] == Arg0Spawner {
		// Not on this goroutine: during init it is locked to the main
		// thread, and a locked goroutine's every wakeup is a handoff from
		// the thread that found it runnable to its own.
		done := make(chan error)
		go func() { done <- serveSpawner(os.Args[1:], 0, 1) }()
		if err := <-done; err != nil {
			fmt.Fprintf(os.Stderr, "flotilla: spawner: %v\n", err)
			os.Exit(exitSetup)
		}
		os.Exit(0)
	}
}

// NewSpawner returns a Spawner covering paths; its process starts at the
// first Run.
func NewSpawner(paths []string) *Spawner {
	return &Spawner{paths: append([]string(nil), paths...)}
}

// spawnRequest asks the spawner to start a command, or with Kill to kill
// the process group of the command ID it started (requests are carried
// out in order: a command is started before its Kill is read). See
// spawnwire.go for how they travel.
type spawnRequest struct {
	ID     uint64
	Kill   bool
	Path   string
	Args   []string
	Env    []string
	Dir    string
	UID    string // "-": unchanged
	GID    string // "-": unchanged
	Groups string // ",g1,g2"; "-": unchanged
}

// spawnReply is what became of one: it ended. It is the one reply: no
// other round trip for each command.
type spawnReply struct {
	ID     uint64
	Err    string // it could not start
	Status int    // its wait status
	Output string // the first maxSpawnOutput bytes of its stdout and stderr
}

const maxSpawnOutput = 4096

// Run runs cmd, a command Wrap rewrote to hide this Spawner's paths, in the
// Spawner's namespace instead, with cmd's program, arguments, environment,
// working directory and credentials; its process is in a group of its own
// with SIGKILL as its parent-death signal, as Wrap's. It returns when the
// command ended, with its error as cmd.Wait's reads ("exit status 1");
// when ctx ends first the process group is SIGKILLed. What the command
// writes (its first 4 KiB) goes to cmd.Stdout. A command Wrap did not
// rewrite, or for other paths, is run with Start and Wait.
func (s *Spawner) Run(ctx context.Context, cmd *exec.Cmd) error {
	req, ok := s.unwrap(cmd)
	if !ok {
		if err := cmd.Start(); err != nil {
			return err
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			return context.Cause(ctx)
		}
	}
	ch, proc, err := s.send(&req, nil)
	if err != nil {
		return err
	}
	var killed error
	for {
		select {
		case r := <-ch:
			if cmd.Stdout != nil && r.Output != "" {
				io.WriteString(cmd.Stdout, r.Output)
			}
			if killed != nil {
				return killed
			}
			if r.Err != "" {
				return errors.New(r.Err)
			}
			return spawn.Err(syscall.WaitStatus(r.Status))
		case <-proc.dead:
			return errors.New("the probe spawner process ended")
		case <-ctx.Done():
			// The spawner kills its process group (the request that
			// started it went first), then replies once it ended.
			killed = context.Cause(ctx)
			ctx = context.Background()
			s.send(&spawnRequest{ID: req.ID, Kill: true}, proc)
		}
	}
}

// SpawnExitError is the end of a command a Spawner ran that did not exit 0.
type SpawnExitError = spawn.ExitError

// unwrap reads back what Wrap made of a command, if it was for s's paths.
func (s *Spawner) unwrap(cmd *exec.Cmd) (spawnRequest, bool) {
	a := cmd.Args
	if cmd.Path != "/proc/self/exe" || len(a) < 8 || a[0] != Arg0 {
		return spawnRequest{}, false
	}
	n, err := strconv.Atoi(a[6])
	if err != nil || n != len(s.paths) || len(a) < 7+n+2 {
		return spawnRequest{}, false
	}
	for i, p := range a[7 : 7+n] {
		if p != s.paths[i] {
			return spawnRequest{}, false
		}
	}
	return spawnRequest{UID: a[2], GID: a[3], Groups: a[4], Dir: a[5], Path: a[7+n], Args: a[8+n:], Env: cmd.Env}, true
}

// send queues req for the spawner process, starting one if none runs,
// and returns the channel of its reply and the process's end. A Kill
// (proc: the process its command went to) has no reply, and goes nowhere
// when that process is gone or has replied.
func (s *Spawner) send(req *spawnRequest, proc *spawnerProc) (chan spawnReply, *spawnerProc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.Kill {
		if s.proc == proc && proc.waits[req.ID] != nil {
			proc.enqueue(req) // a kill's frame is a few bytes
		}
		return nil, nil, nil
	}
	if s.close {
		return nil, nil, errors.New("the probe spawner is closed")
	}
	if s.proc == nil {
		if err := s.startLocked(); err != nil {
			return nil, nil, err
		}
	}
	s.next++
	req.ID = s.next
	if err := s.proc.enqueue(req); err != nil {
		return nil, nil, err
	}
	ch := make(chan spawnReply, 1)
	s.proc.waits[req.ID] = ch
	return ch, s.proc, nil
}

// enqueue adds req's frame to the queue, and wakes the writer for the
// first of a batch. Under Spawner.mu.
func (p *spawnerProc) enqueue(req *spawnRequest) error {
	at := len(p.queue)
	p.queue = appendRequest(p.queue, req)
	if n := len(p.queue) - at - 4; n > maxFrame {
		p.queue = p.queue[:at]
		return fmt.Errorf("the command's arguments and environment take %d bytes: %w", n, syscall.E2BIG)
	}
	if at == 0 {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

func (s *Spawner) startLocked() error {
	args := []string{Arg0Spawner, strconv.Itoa(os.Getpid()), strconv.Itoa(len(s.paths))}
	args = append(args, s.paths...)
	cmd := &exec.Cmd{
		Path:   "/proc/self/exe",
		Args:   args,
		Env:    []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
		Dir:    "/",
		Stderr: os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:      true,
			Pdeathsig:    syscall.SIGKILL,
			Unshareflags: syscall.CLONE_NEWNS,
		},
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the probe spawner: %w", err)
	}
	p := &spawnerProc{cmd: cmd, in: in, waits: map[uint64]chan spawnReply{}, wake: make(chan struct{}, 1), dead: make(chan struct{})}
	s.proc = p
	go s.readReplies(p, out)
	go s.writeRequests(p)
	return nil
}

// writeRequests writes p's queued requests until p's end. Woken by the
// first request of a batch, it lets the other goroutines that are ready
// run first (the probes that fell due in the same grid slot of the
// health runners' clock), so that their requests go in the same write.
func (s *Spawner) writeRequests(p *spawnerProc) {
	var buf []byte
	for {
		select {
		case <-p.wake:
		case <-p.dead:
			return
		}
		runtime.Gosched()
		s.mu.Lock()
		buf, p.queue = p.queue, buf[:0]
		s.mu.Unlock()
		if len(buf) == 0 {
			continue
		}
		if _, err := p.in.Write(buf); err != nil {
			return // the process is ending: readReplies sees it
		}
	}
}

// readReplies hands the spawner's replies to the waiting Runs until its
// output ends; then the process is forgotten, and the next Run starts
// another.
func (s *Spawner) readReplies(p *spawnerProc, out io.Reader) {
	var buf []byte
	chunk := make([]byte, 64<<10)
	for {
		n, err := out.Read(chunk)
		buf = append(buf, chunk[:n]...)
		b := buf
		var bad error
		for {
			body, rest, ok, ferr := nextFrame(b)
			if !ok {
				bad = ferr
				break
			}
			b = rest
			r, derr := decodeReply(body)
			if derr != nil {
				bad = derr
				break
			}
			s.mu.Lock()
			ch := p.waits[r.ID]
			delete(p.waits, r.ID)
			s.mu.Unlock()
			if ch != nil {
				ch <- r
			}
		}
		buf = append(buf[:0], b...)
		if err != nil || bad != nil {
			if bad != nil {
				fmt.Fprintf(os.Stderr, "flotilla: the probe spawner's reply: %v\n", bad)
			}
			break
		}
	}
	s.mu.Lock()
	if s.proc == p {
		s.proc = nil
	}
	p.in.Close()
	clear(p.waits)
	s.mu.Unlock()
	close(p.dead)
	p.cmd.Process.Kill()
	p.cmd.Wait()
}

// Close ends the spawner's process; Runs under way fail.
func (s *Spawner) Close() {
	s.mu.Lock()
	s.close = true
	p := s.proc
	if p != nil {
		p.in.Close() // the spawner ends at the end of its input
	}
	s.mu.Unlock()
	if p != nil {
		<-p.dead
	}
}

// credential is Wrap's uid, gid and groups arguments as a Credential; nil
// when all are unchanged.
func credential(uid, gid, groups string) (*syscall.Credential, error) {
	if uid == "-" && gid == "-" && groups == "-" {
		return nil, nil
	}
	c := &syscall.Credential{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid()), NoSetGroups: groups == "-"}
	if uid != "-" {
		v, err := strconv.ParseUint(uid, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("uid %q: %w", uid, err)
		}
		c.Uid = uint32(v)
	}
	if gid != "-" {
		v, err := strconv.ParseUint(gid, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("gid %q: %w", gid, err)
		}
		c.Gid = uint32(v)
	}
	if groups != "-" {
		for g := range strings.SplitSeq(strings.TrimPrefix(groups, ","), ",") {
			if g == "" {
				continue
			}
			v, err := strconv.ParseUint(g, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("group %q: %w", g, err)
			}
			c.Groups = append(c.Groups, uint32(v))
		}
	}
	return c, nil
}
