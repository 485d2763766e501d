package supervisor

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flotilla/flotilla/proto/supervisorpb"
)

// ErrNotRunning is returned by Stop when no supervisor serves the
// directory.
var ErrNotRunning = errors.New("no supervisor serves this directory")

// Stopped is what Stop stopped.
type Stopped struct {
	PID     int // the supervisor's
	Units   int // units it had loaded
	Running int // of which running
}

// Stop ends the supervisor serving dir (a data dir's units/) and every
// unit it runs, as `flotilla supervisor stop` does: each unit stopped
// gracefully (its ExecStop=, then SIGTERM) until ctx's deadline (default
// DefaultShutdownTimeout), what still runs then SIGKILLed; it returns once
// the supervisor has exited. It never starts a supervisor: ErrNotRunning
// when none answers on the socket.
func Stop(ctx context.Context, dir string) (Stopped, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return Stopped{}, err
	}
	c := &Client{cfg: Config{Dir: dir}, sock: filepath.Join(dir, SocketFile)}
	conn, h, err := c.hello(DefaultRPCTimeout)
	if status.Code(err) == codes.Unavailable {
		return Stopped{}, fmt.Errorf("%w: %s (nothing answers on %s)", ErrNotRunning, dir, c.sock)
	}
	if err != nil {
		return Stopped{}, fmt.Errorf("supervisor %s does not answer: %w", c.sock, err)
	}
	defer conn.Close()
	rpc := supervisorpb.NewSupervisorClient(conn)
	out := Stopped{PID: int(h.GetPid())}
	sctx, cancel := context.WithTimeout(ctx, DefaultRPCTimeout)
	sts, err := rpc.States(sctx, &supervisorpb.Empty{})
	cancel()
	if err != nil {
		return out, fmt.Errorf("supervisor %s: states: %w", c.sock, fromStatus("states", err))
	}
	for _, u := range sts.GetUnits() {
		out.Units++
		if fromPB(u, "").Running() {
			out.Running++
		}
	}
	return out, shutdown(ctx, rpc, out.PID, nil, DefaultRPCTimeout)
}

// PID is the supervisor's process ID, as it said when the client last
// connected.
func (c *Client) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int(c.sess.hello.GetPid())
}
