// Package execdriver runs units as supervised processes on the local machine,
// the way systemd runs services, without systemd. It implements
// driver.Driver.
//
// # Using it
//
//  1. Make one Driver per state directory with New. New takes a lock on the
//     directory and SIGKILLs whatever an earlier driver on it left running
//     (see "Crash safety"). The daemon does not make one itself: the
//     machine's supervisor process (internal/supervisor) does, so that units
//     outlive the daemon, and serves it to the daemon over a unix socket.
//  2. Load each unit file (parsed, with systemd's defaults applied), then
//     Start and Stop it. Start and Stop return once the action is under way;
//     every change of the unit's status is handed to Config.Notify, in order
//     for each unit, from the unit's own goroutine.
//  3. Unload a unit to stop it and forget it; Journal reads its log.
//  4. Close stops everything and releases the directory.
//  5. Fence sets a deadline at which named units are killed (see "Fencing");
//     ReapOrphans reaps the orphans a child subreaper inherits.
//
// # The supervisor
//
// Each loaded unit has one goroutine, its supervisor, which owns the unit's
// state. Driver methods send it requests; a goroutine per process reaps the
// process and sends it the exit; timers bound each phase. The supervisor
// never blocks on a process, so it always answers. The phases, with the
// status each shows as Active/Sub, are:
//
//	dead (inactive/dead, or failed/failed after a failure)
//	  │ Start (refused with ErrStartLimitHit: more than StartLimitBurst
//	  │ starts within StartLimitInterval, which ends failed/start-limit-hit)
//	  ▼
//	start-pre (activating/start-pre)      ExecStartPre=, one after another
//	  ▼
//	start (activating/start)              Type=oneshot: ExecStart=, one after another
//	  ▼
//	start-post (activating/start-post)    simple: main process started; ExecStartPost=
//	  ▼
//	running (active/running, PID)         or, Type=oneshot with RemainAfterExit=,
//	  │                                   exited (active/exited)
//	  │ Stop                  │ the main process exits on its own
//	  ▼                       │
//	stop (deactivating/stop)  │           ExecStop=, with $MAINPID
//	  ▼                       ▼
//	stop-sigterm (deactivating/stop-sigterm)   KillSignal= (then SIGCONT)
//	  ▼ TimeoutStopSec= passes
//	stop-sigkill (deactivating/stop-sigkill)   SIGKILL
//	  ▼
//	stop-post (deactivating/stop-post)    ExecStopPost=
//	  ▼
//	dead, or auto-restart (activating/auto-restart) for RestartSec=, then start-pre
//
// A command that fails during start-pre, start or start-post (a non-zero
// exit or a signal, unless its line has the "-" prefix, or a command that
// cannot be started), a main process that fails during start-post, or
// TimeoutStartSec= passing, fails the run: it goes to stop-sigterm with the
// run's result set. Phases with nothing to do are passed through at once,
// and a status is notified once per event, so they are not seen: a unit
// without ExecStartPre= goes from inactive/dead to active/running, and a
// main process that exits leaving nothing behind goes from running straight
// to dead or auto-restart. A Stop during start-pre, start or
// start-post goes straight to stop-sigterm; a Stop during auto-restart ends
// it; a Start while stopping starts again once dead.
//
// When the run ends, its result is the first failure: exit-code, signal,
// core-dump, timeout or oom-kill (as systemd's Result=), or success. A main
// process killed by SIGHUP, SIGINT, SIGTERM or SIGPIPE exited cleanly, as in
// systemd.
// The Restart= policy decides from the result whether to restart, following
// the table in systemd.service(5) (watchdog and protocol included). Without a restart the unit ends inactive/dead after
// success and failed/failed otherwise. A stop that was asked for (Stop,
// Unload, Close) always ends inactive/dead, even when SIGKILL was needed;
// Status.Message then says so. Status.Message also says what failed a run
// ("ExecStartPre=/bin/false: code=exited, status=1/FAILURE") and why resource
// limits are not enforced.
//
// TimeoutStartSec= bounds start-pre, start and start-post together;
// TimeoutStopSec= bounds stop, stop-sigterm, stop-sigkill and stop-post each.
// A timeout of unit.Infinity (or zero or less) is no timeout.
//
// Status.Since is when Active last changed. Status.Hash is the hash of the
// definition the current run uses: a unit loaded anew while it runs keeps the
// old definition, and its hash, until the run ends; the next start, including
// an automatic restart, uses the newest definition.
//
// # sd_notify: readiness and the watchdog
//
// Type=notify and notify-reload units stay in start (activating/start)
// after their main process is started, until it sends READY=1 over
// NOTIFY_SOCKET; then ExecStartPost= runs. TimeoutStartSec= bounds the
// wait; a main process that exits first fails the run (result protocol
// when it exited cleanly). With WatchdogSec= the main process gets
// WATCHDOG_USEC and WATCHDOG_PID (its own PID, which a step of this
// program, unithide.WithOwnPID, fills in as it executes the command) and
// must send WATCHDOG=1 within the limit, from its start on; otherwise the
// run fails with result watchdog: SIGABRT (to what KillMode= names) in
// stop-sigterm, shown as deactivating/stop-watchdog, then as any stop.
// STATUS= becomes Status.Message while the run has not failed. The socket
// (one per driver, abstract, bound at first use and again by Adopt) and
// NotifyAccess= are described in notify.go.
//
// Differences from systemd: ExecStop= runs only on a stop that was asked
// for, not after the main process exited on its own (its commands usually
// address $MAINPID). Type=forking is refused at Load (run the daemon in the
// foreground); dbus, idle and exec are run as simple. MAINPID=, STOPPING=1,
// RELOADING=1, EXTEND_TIMEOUT_USEC= and FDSTORE=1 are ignored, and
// WatchdogSignal= is not honoured. A stop timeout
// ends inactive, not failed. KillMode=none is treated as KillMode=process.
//
// # Processes
//
// Each process is started in its own process group, with SIGKILL as its
// parent-death signal, so that the processes a SIGKILLed driver's process
// (the supervisor) started directly die with it. (The signal is tied to the
// OS thread that started the process; the Go runtime does not end its
// threads unless a goroutine exits while locked to one, but execve ends
// every thread but the caller's: Config.Spawn runs every start on one
// thread, the supervisor's main thread, the one that calls execve.) A process's exit is
// awaited on a pidfd through the Go runtime's poller before it is reaped, so
// a thousand running processes do not hold a thousand threads. Stopping with KillMode=control-group (the default)
// signals every process group the run started; KillMode=process signals only
// the main and control processes and leaves the rest running; KillMode=mixed
// sends KillSignal= to those two and SIGKILL to the rest. A process that left
// its process group (setsid) escapes all of this unless the unit has a
// cgroup.
//
// The environment is PATH (systemd's default), HOME (the User='s home, or
// the driver's), USER and LOGNAME when User= is set, then Environment=, then
// each EnvironmentFile= (read anew for every process, so an ExecStartPre=
// can write one; opened non-blocking and refused unless it is a regular file
// of at most 1 MiB, so a FIFO or /dev/zero fails the start instead of
// wedging the unit), the later assignment winning; ExecStop= and ExecStopPost=
// get $MAINPID while the main process runs. References in the arguments are
// expanded as systemd does: "${VAR}" within a word, "$VAR" as a whole word
// split at whitespace, "$$" for "$". The program is looked up in that PATH
// when it has no slash. The working directory is WorkingDirectory=, or "/"
// as for systemd's system services ("~" is the home directory; a "-" prefix
// makes a missing directory fall back to "/"). User= and Group= need the
// driver to run as root, unless they name its own user and group.
//
// # Logs and the journal
//
// The stdout and stderr of every process of a unit go, line by line, to
// <Dir>/logs/<unit>.log as
//
//	2006-01-02T15:04:05.000000Z <unit>[<pid>]: <line>
//
// in UTC, together with the driver's own messages about the unit
// ("flotilla[<pid>]: Started web.", with the driver's process's pid),
// worded as systemd's. When a line would take the log past its size limit
// the rotated files shift (<unit>.log.1 to .2 and so on, the oldest beyond
// the count limit removed), the log becomes <unit>.log.1 and a new file is
// begun. The limits are Config.MaxLogBytes and Config.MaxLogFiles, changed
// at run time by SetLogConfig, unless the unit's [X-Fleet] LogMaxSize= and
// LogMaxFiles= set its own. A process's exit is acted on only once all it
// wrote is in the log, so the unit's end follows its last line, and Unload
// and Kill return only once all the unit's processes wrote is in it, after
// which nothing more is written (the output of processes still running
// then, left by KillMode=process or escaped, is cut off). Journal reads the last lines across every kept
// file and then follows the log by polling, across rotations. Logs outlive
// their unit: Journal reads the log of a unit that was unloaded, so an
// operator can see why it stopped; RemoveLog removes it (the agent calls it
// for a unit that was destroyed).
//
// With Config.Journald (or SetLogConfig), each line also goes to the local
// journald, with SYSLOG_IDENTIFIER the ident (the unit, or "flotilla"),
// SYSLOG_PID, FLOTILLA_UNIT and FLOTILLA_MACHINE.
//
// # Crash safety
//
// While a unit has processes, <Dir>/run/<unit>.pid lists its process groups,
// one "<pgid> <start time>" line each (the start time of the group's first
// process, /proc/<pid>/stat field 22). New kills the groups listed in the pid
// files left by a driver that did not stop its units, unless the pid now
// belongs to another process: so when the process holding the driver (the
// supervisor) crashed and another was started, no unit runs twice. New also
// empties and removes unit cgroups left behind. Only New does this, having
// taken the directory's lock: a daemon that reconnects to a live supervisor
// kills nothing.
//
// # Handover
//
// Handover and Adopt pass a driver from one image of its process to the
// next, across an execve (the supervisor's upgrade in place): Handover
// waits until no unit is starting or stopping (those are ErrBusy until its
// context ends), freezes every unit (no request, timer or process exit is
// acted on, no process is reaped, Load is refused with ErrHandingOver),
// pauses the copiers of the output pipes and describes each unit (phase,
// main process, process groups, the pipes' descriptors and the start of a
// line read but not logged, restart counter, start limit, what is left of
// RestartSec=), the fence and the log settings, clearing close-on-exec on
// the lock and the pipes. Its resume undoes all that when the execve
// failed. Adopt, in the new image, takes the lock from its descriptor
// (killing nothing), waits for the main processes, which are still the
// process's children, and reads the pipes on. A unit with a cgroup of its
// own is not handed over (Handover fails, naming it).
//
// # Fencing
//
// Fence (driver.Fencer) sets one deadline, a reading of CLOCK_MONOTONIC, for
// a set of units. When it passes, on the driver's own timer, every process
// group of each of them is SIGKILLed (whatever its KillMode=, without
// ExecStop= or ExecStopPost=) and the unit stays loaded, inactive/dead, with
// Result "fenced" and a Status.Message saying so; it is not restarted, and
// Start refuses it with ErrFenced until a later Fence leaves it out or moves
// the deadline on. Each Fence replaces the set and the deadline; one already
// passed kills at once.
//
// # Resource limits
//
// A unit with CPUQuota= or MemoryMax= gets a cgroup of its own for each run,
// <CgroupParent>/<unit> within the host's hierarchies, removed when the run
// ends. New looks at Config.CgroupRoot (/sys/fs/cgroup) once:
//
//   - cgroup v2 there (a unified host): the cgroup is
//     <CgroupRoot><CgroupParent>/<unit> with cpu.max and memory.max set
//     (cgroup2.go, by hand). Processes are started straight into it (clone3
//     with CLONE_INTO_CGROUP). The driver must be allowed to create
//     CgroupParent and enable the cpu and memory controllers down to it: the
//     host's /sys/fs/cgroup as root, or a subtree delegated to flotilla.
//   - cgroup v1 cpu or memory hierarchies there (a legacy host, or a hybrid
//     one, whose controllers are on v1): the cgroup is the same path in each
//     of the cpu, cpuacct and memory hierarchies that are mounted, with
//     cpu.cfs_quota_us (over a 100 ms cpu.cfs_period_us) and
//     memory.limit_in_bytes set, through containerd's cgroups/v3/cgroup1
//     (cgroup1.go). A process is started from an OS thread moved into the
//     cgroup for the start (v1 places threads one by one), so it begins its
//     life there; the thread is then moved back.
//   - neither: the unit runs without limits.
//
// Where limits cannot be set (no hierarchy, a controller missing or not
// enabled, the cgroup cannot be made or a process not placed in it) the unit
// runs without them and its Status.Message says why; cgroups never stop a
// unit from starting. A stop also signals everything in the cgroup. When a
// process of the run fails and the cgroup's OOM kill count (memory.events
// oom_kill on v2, memory.oom_control oom_kill on v1) is not zero, the run's
// result is oom-kill and its message says the unit ran out of memory.
//
// The cgroups, like the processes, belong to the process holding the driver
// (the machine's supervisor), so they outlive a daemon; New empties and
// removes those an earlier driver left in CgroupParent, and Close removes
// CgroupParent (and the default's flotilla.slice when it is left empty).
package execdriver
