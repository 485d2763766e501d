// Package supervisor keeps a machine's units running when its daemon stops,
// crashes or is upgraded, as containerd's shims and Nomad's executors do.
//
// # The supervisor process
//
// Serve is the supervisor: a small long-lived process, one per machine
// (per state directory), started by the daemon from its own binary as the
// hidden `flotilla supervisor --dir DIR`. It becomes a child subreaper
// (orphans of the units' processes are reparented to it, and it reaps
// them) and the leader of a session of its own, so neither the daemon's
// death nor a signal to the daemon's terminal reaches it. It holds one exec
// driver (internal/driver/exec) over DIR, which runs every unit as it did
// inside the daemon: a goroutine per unit, logs in DIR/logs, restart policy,
// pid files in DIR/run. It serves that driver with gRPC
// (proto/supervisorpb) on the unix socket DIR/supervisor.sock (mode 0600)
// and writes its pid to DIR/supervisor.pid and its own log to
// DIR/supervisor.log.
//
// The driver's lock on DIR makes it one supervisor per directory: only the
// process that takes it SIGKILLs the process groups listed in the pid files
// (a dead supervisor's units), so a daemon that reconnects to a live
// supervisor never kills anything. SIGTERM (or a Shutdown call, which
// `flotilla supervisor stop` makes through Stop) stops every unit
// gracefully, as the exec driver's Close does, and ends the process. So
// does the removal of DIR (or its replacement by another directory of the
// same name), checked every 5 seconds: its units' data dir is gone. A
// supervisor that has had no unit and no client (no daemon's Watch open,
// no call) for ServeConfig.IdleExit (DefaultIdleExit, 10 minutes) ends
// too.
//
// # The client
//
// Client is the daemon's side: a driver.Driver (also a driver.Killer,
// driver.Fencer and driver.Detacher) that forwards every call to the
// supervisor, bounded by a timeout, and reads logs from DIR itself. New
// connects to the supervisor, starting one if none answers on the socket,
// and takes its list of units before it returns, so States at once reports
// the units an earlier daemon started: the daemon adopts them, with their
// PIDs and the hashes of the files they run. A server-streaming Watch call
// carries every status change to Notify; when it breaks the client
// reconnects, and if the supervisor it finds is a new one (the old one
// died, taking its units with it), it gives it again the fence, units and
// starts it had given the old one.
//
// Detach closes the connection and leaves everything running (the daemon
// does this when it stops); Close stops every unit and ends the supervisor.
//
// Unload, Kill and Shutdown are long waits made of short calls: each call
// waits a couple of seconds and says whether the unit is gone, so a
// supervisor that stops answering (frozen, wedged) turns into an error
// within the RPC timeout instead of blocking the agent.
package supervisor
