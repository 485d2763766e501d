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
// # Health checks
//
// The supervisor runs its units' [X-Check] health checks itself (the exec
// driver's Config.Checks; see internal/driver/exec/checks.go) and acts on
// OnUnhealthy=restart, so that they go on while no daemon is connected,
// and reports each unit's health with its status (UnitStatus.health). Its
// HelloReply says so (runs_checks): the client's RunsChecks
// (driver.Checker) tells the agent to leave those units' checks to it and
// report the health it is given, which a new daemon has with the units'
// first statuses, so it never falls back to "unknown". As root, the Exec=
// probes start from one unithide.Spawner, a child of the supervisor. An
// upgrade in place hands each unit's health over with it, and the new
// image resumes its checks from there.
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
// # Upgrading in place
//
// A supervisor runs the binary that started it until it re-executes
// itself: New compares the SHA-256 of the supervisor's executable
// (HelloReply) with its Config.Binary's and, when they differ, calls
// Upgrade with that binary. The supervisor hands its driver over
// (execdriver.Driver.Handover), writes HandoverFile and calls execve with
// "--handover": same PID, same children, the lock, pipes and listening
// socket inherited; the new image adopts the units (execdriver.Adopt) and
// serves. To survive execve the units' processes are started from the
// process's main thread, to which init locks the main goroutine of a
// process run as "supervisor" (see upgrade.go). A binary that cannot be
// executed leaves the old image running, every unit untouched, and the
// call's error says why (New logs it and goes on; the next New tries
// again). A new image that cannot read the handover executes the previous
// binary again, through a descriptor to it the previous image left open,
// with the same handover; if that fails too it logs why and holds the
// units without serving, never killing them.
//
// Unload, Kill and Shutdown are long waits made of short calls: each call
// waits a couple of seconds and says whether the unit is gone, so a
// supervisor that stops answering (frozen, wedged) turns into an error
// within the RPC timeout instead of blocking the agent.
package supervisor
