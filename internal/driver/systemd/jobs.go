package systemddriver

import (
	"context"
	"fmt"
	"time"
)

// maxJobs bounds the start and stop jobs the driver has queued in systemd
// and not yet seen end. systemd watches the client that queued each job
// on the system bus with a match rule of its own, one per job, and the bus
// allows it 512 (dbus-daemon's max_match_rules_per_connection): with
// more, systemd was cut off the bus ("Got disconnect on API bus") and
// every call in flight failed. A thousand starts queued from several
// goroutines, or the stops of Close, outrun the jobs systemd runs; 64
// keep it busy.
const maxJobs = 64

// jobHold is how long a job keeps its place among maxJobs when its end is
// not heard (a stop that waits for TimeoutStopSec=): it still runs, but
// no longer counts.
const jobHold = 2 * callTimeout

// queueJob queues a start or stop job for the unit, once fewer than
// maxJobs of the driver's jobs are queued, and returns a channel that
// receives the job's result when it ends.
func (d *Driver) queueJob(ctx context.Context, op, name string) (<-chan string, error) {
	select {
	case d.jobs <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for one of systemd's jobs to end: %w", ctx.Err())
	}
	done := make(chan string, 1)
	var err error
	switch op {
	case "start":
		_, err = d.conn.StartUnitContext(ctx, name, "replace", done)
	case "stop":
		_, err = d.conn.StopUnitContext(ctx, name, "replace", done)
	default:
		err = fmt.Errorf("no job %q", op)
	}
	if err != nil {
		<-d.jobs
		return nil, err
	}
	out := make(chan string, 1)
	go func() {
		t := time.NewTimer(jobHold)
		defer t.Stop()
		select {
		case r := <-done:
			<-d.jobs
			out <- r
			return
		case <-t.C:
			<-d.jobs
		}
		out <- <-done
	}()
	return out, nil
}
