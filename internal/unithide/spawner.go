package unithide

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
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
	proc  *exec.Cmd
	in    io.WriteCloser
	enc   *json.Encoder
	waits map[uint64]chan spawnReply
	next  uint64
	dead  chan struct{} // closed when the current process's replies end
	close bool
}

// Arg0Spawner is argv[0] of a Spawner's process.
const Arg0Spawner = "flotilla-unit-spawner"

func init() {
	if len(os.Args) > 0 && os.Args[0] == Arg0Spawner {
		err := serveSpawner(os.Args[1:], os.Stdin, os.Stdout)
		fmt.Fprintf(os.Stderr, "flotilla: spawner: %v\n", err)
		os.Exit(exitSetup)
	}
}

// NewSpawner returns a Spawner covering paths; its process starts at the
// first Run.
func NewSpawner(paths []string) *Spawner {
	return &Spawner{paths: append([]string(nil), paths...), waits: map[uint64]chan spawnReply{}}
}

// spawnRequest asks the spawner to start a command, or with Kill to kill
// the process group of the command ID it started (or, not started yet, to
// kill it once started).
type spawnRequest struct {
	ID     uint64   `json:"id"`
	Kill   bool     `json:"kill,omitempty"`
	Path   string   `json:"path"`
	Args   []string `json:"args"`
	Env    []string `json:"env"`
	Dir    string   `json:"dir"`
	UID    string   `json:"uid"`    // "-": unchanged
	GID    string   `json:"gid"`    // "-": unchanged
	Groups string   `json:"groups"` // ",g1,g2"; "-": unchanged
}

// spawnReply is what became of one: it ended. It is the one reply: no
// other round trip for each command.
type spawnReply struct {
	ID     uint64 `json:"id"`
	Done   bool   `json:"done,omitempty"`
	Err    string `json:"err,omitempty"`    // it could not start
	Status int    `json:"status,omitempty"` // its wait status
	Output string `json:"output,omitempty"` // the first maxSpawnOutput bytes of its stdout and stderr
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
	ch, dead, err := s.send(&req)
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
		case <-dead:
			return errors.New("the probe spawner process ended")
		case <-ctx.Done():
			// The spawner kills its process group (at once, or once
			// started), then replies that it ended.
			killed = context.Cause(ctx)
			ctx = context.Background()
			s.send(&spawnRequest{ID: req.ID, Kill: true})
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

// send hands req to the spawner process, starting one if none runs, and
// returns the channel of its reply (none for a Kill) and the current
// process's end. A Kill goes only to the process its command went to.
func (s *Spawner) send(req *spawnRequest) (chan spawnReply, chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.Kill {
		if s.waits[req.ID] != nil {
			s.enc.Encode(req)
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
	ch := make(chan spawnReply, 1)
	s.waits[req.ID] = ch
	if err := s.enc.Encode(req); err != nil {
		delete(s.waits, req.ID)
		return nil, nil, fmt.Errorf("the probe spawner: %w", err)
	}
	return ch, s.dead, nil
}

func (s *Spawner) startLocked() error {
	args := []string{Arg0Spawner, strconv.Itoa(os.Getpid()), strconv.Itoa(len(s.paths))}
	args = append(args, s.paths...)
	p := &exec.Cmd{
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
	in, err := p.StdinPipe()
	if err != nil {
		return err
	}
	out, err := p.StdoutPipe()
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return fmt.Errorf("start the probe spawner: %w", err)
	}
	dead := make(chan struct{})
	s.proc, s.in, s.enc, s.dead = p, in, json.NewEncoder(in), dead
	go s.readReplies(p, out, dead)
	return nil
}

// readReplies hands the spawner's replies to the waiting Runs until its
// output ends; then the process is forgotten, and the next Run starts
// another.
func (s *Spawner) readReplies(p *exec.Cmd, out io.Reader, dead chan struct{}) {
	dec := json.NewDecoder(bufio.NewReader(out))
	for {
		var r spawnReply
		if err := dec.Decode(&r); err != nil {
			break
		}
		s.mu.Lock()
		ch := s.waits[r.ID]
		delete(s.waits, r.ID)
		s.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
	s.mu.Lock()
	if s.proc == p {
		s.proc = nil
		s.in.Close()
	}
	clear(s.waits)
	s.mu.Unlock()
	close(dead)
	p.Process.Kill()
	p.Wait()
}

// Close ends the spawner's process; Runs under way fail.
func (s *Spawner) Close() {
	s.mu.Lock()
	s.close = true
	p := s.proc
	if p != nil {
		s.in.Close() // the spawner ends at the end of its input
	}
	dead := s.dead
	s.mu.Unlock()
	if p != nil {
		<-dead
	}
}

// serveSpawner is the spawner's process: it covers the paths in its mount
// namespace (a new one, Unshareflags), then starts each command it is
// asked to, replying when it started and when it ended, until its input
// ends. Arguments: the parent's PID, the number of paths, the paths.
func serveSpawner(a []string, in io.Reader, out io.Writer) error {
	if len(a) < 2 {
		return fmt.Errorf("%d arguments", len(a))
	}
	n, err := strconv.Atoi(a[1])
	if err != nil || n < 0 || len(a) != 2+n {
		return fmt.Errorf("bad path count %q", a[1])
	}
	if err := makeInaccessible(a[2:]); err != nil {
		return err
	}
	if strconv.Itoa(os.Getppid()) != a[0] {
		return fmt.Errorf("the daemon (PID %s) is gone", a[0])
	}
	var mu sync.Mutex
	enc := json.NewEncoder(out)
	reply := func(r spawnReply) {
		mu.Lock()
		defer mu.Unlock()
		enc.Encode(r)
	}
	var wg sync.WaitGroup
	var cmu sync.Mutex
	cancels := map[uint64]context.CancelCauseFunc{} // of the commands not yet ended
	dec := json.NewDecoder(bufio.NewReader(in))
	for {
		var req spawnRequest
		if err := dec.Decode(&req); err != nil {
			wg.Wait()
			if errors.Is(err, io.EOF) {
				os.Exit(0)
			}
			return err
		}
		cmu.Lock()
		if req.Kill {
			if cancel := cancels[req.ID]; cancel != nil {
				cancel(errKilled)
			}
			cmu.Unlock()
			continue
		}
		ctx, cancel := context.WithCancelCause(context.Background())
		cancels[req.ID] = cancel
		cmu.Unlock()
		wg.Go(func() {
			spawnOne(ctx, req, reply)
			cmu.Lock()
			delete(cancels, req.ID)
			cmu.Unlock()
			cancel(nil)
		})
	}
}

// errKilled is why a command was killed: its Run's context ended.
var errKilled = errors.New("killed")

// spawnOne starts and waits for one command; at ctx's end its process
// group is killed.
func spawnOne(ctx context.Context, req spawnRequest, reply func(spawnReply)) {
	cred, err := credential(req.UID, req.GID, req.Groups)
	var p *spawn.Proc
	if err == nil {
		p, err = spawn.Start(&spawn.Attr{Path: req.Path, Argv: req.Args, Env: req.Env, Dir: req.Dir, Cred: cred}, maxSpawnOutput)
	}
	if err != nil {
		reply(spawnReply{ID: req.ID, Done: true, Err: err.Error()})
		return
	}
	ws, out, err := p.Wait(ctx)
	if err != nil {
		reply(spawnReply{ID: req.ID, Done: true, Err: err.Error(), Output: string(out)})
		return
	}
	reply(spawnReply{ID: req.ID, Done: true, Status: int(ws), Output: string(out)})
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
