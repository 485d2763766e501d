// Package docker runs container units (services with an [X-Container]
// section) as containers of the machine's Docker engine, through the Engine
// API and Docker's Go client (github.com/moby/moby/client, which negotiates
// the API version down to the engine's, 1.40 at the oldest). It implements
// driver.Driver, driver.Killer, driver.Fencer, driver.Detacher and
// driver.LogRemover.
//
// # Containers
//
// Each start of a unit makes a new container from the unit's current
// definition (removing the previous one): [X-Container] Image=, Command=,
// Ports=, Volumes= and Network=, and from [Service] Environment= and
// EnvironmentFile= (read at start, as the exec driver reads them), User= and
// Group=, WorkingDirectory=, CPUQuota= (CpuPeriod 100ms, CpuQuota the
// share: 50% is 50ms), MemoryMax= (Memory, and MemorySwap the same: no swap
// beyond it), KillSignal= (StopSignal) and TimeoutStopSec= (StopTimeout,
// rounded up to whole seconds). The engine's restart policy is "no": the
// driver applies Restart=. The container is named
// flotilla-<unit>-<hash of machine and unit> and labelled with its machine
// (LabelMachine), unit (LabelUnit), the unit file's hash (LabelHash) and
// text (LabelFile), plus Config.Labels.
//
// An image that is not on the machine is pulled (bounded by
// Config.PullTimeout); when that fails, as it does at once where no registry
// is reachable, the run fails with Result "resources" and a Status.Message
// naming the image and the engine's reason, and Restart= applies as to any
// failed start.
//
// # States
//
// One goroutine per unit owns its state; the statuses are the exec
// driver's (systemd's):
//
//	inactive/dead, failed/failed
//	activating/start         pulling the image, creating, starting
//	active/running           PID is the container's main process, on the host
//	deactivating/stop-sigterm  KillSignal= sent (a Stop)
//	deactivating/stop-sigkill  TimeoutStopSec= passed: SIGKILL sent
//	activating/auto-restart  waiting RestartSec= before Restart= starts it again
//
// The driver follows the engine's event stream, one subscription for the
// machine's containers (start, die and destroy), and inspects a unit's
// container when it hears of it. When the stream breaks it subscribes again
// from the last event and looks at every unit. An exit code above 128 is
// taken for death by signal (code-128), as the engine reports it; a main
// process ending by SIGTERM, SIGINT, SIGHUP or SIGPIPE, or exit 0, is a
// clean exit. An out-of-memory kill is Result "oom-kill". Restart=,
// RestartSec= and StartLimitBurst=/StartLimitIntervalSec= follow
// systemd.service(5) as in the exec driver: both use package service's
// rules (service.ShouldRestart, service.StartLimiter). A stop that was asked
// for ends inactive/dead, even when SIGKILL was needed. The driver sends the
// signals itself (a short kill call each) rather than hold a "docker stop"
// call open for TimeoutStopSec=; a driver that adopts a container whose
// stop an earlier one began carries the stop on. At most
// Config.ParallelStarts starts (16) and 32 other calls ask the engine at
// once: a thousand units started or stopped together queue in the driver,
// not in the engine.
//
// # Logs
//
// The container's output (stdout and stderr, from the engine's log stream)
// is copied to <Dir>/logs/<unit>.log in the exec driver's format,
//
//	2006-01-02T15:04:05.000000Z <unit>[<pid>]: <line>
//
// stamped with the engine's time for each line, together with the driver's
// own messages ("flotilla[<pid>]: Started web."), rotated at
// Config.MaxLogBytes keeping Config.MaxLogFiles (or the unit's
// LogMaxSize=/LogMaxFiles=). Journal reads it, and follows it; it outlives
// the unit and its containers, until RemoveLog. The engine keeps its own copy
// (the "local" log driver, 2 files of 8 MiB), which bridges the time no
// driver copies: a driver that adopts a container resumes the copy after the
// last line in the unit's log (a line stamped within the same microsecond as
// that one would be taken as copied).
//
// # Adoption
//
// Containers outlive the daemon. Detach leaves them as they are; New lists
// the containers labelled with its machine and makes each a loaded unit
// again, from the unit file in its labels, before it returns: a running one
// is reported active/running with its PID and hash, untouched; one that
// exited while no driver watched ends its run now (Restart= applies), unless
// it had been stopped on request (the driver leaves <Dir>/run/<unit>.stopped
// for that). Unload and Kill remove the container; Close stops and removes
// them all. One driver at a time may use Dir (a lock in <Dir>/run).
//
// # Fencing
//
// Fence (driver.Fencer) sets the deadline, on the machine's CLOCK_MONOTONIC,
// of the named (Singleton=true) units. The driver's own timer kills their
// containers (SIGKILL) when it passes, leaving the units loaded,
// inactive/dead, Result "fenced"; Start refuses them with ErrFenced until a
// later Fence moves the deadline on. So that the deadline holds when the
// daemon's process is frozen (SIGSTOP, a stalled VM, a debugger) or dead,
// Fence also writes it to <Dir>/fence.json before it returns, and a watchdog
// process of its own, `flotilla docker-fence --dir <Dir>` (started by the
// driver in a new session when none holds <Dir>/run/fence.lock), reads that
// file every 100ms and SIGKILLs the units' running containers through the
// engine once the deadline has passed, and again every second while it
// stays passed. The watchdog exits after 10s without a fence. What it cannot
// cover: the watchdog frozen or killed while the daemon is frozen too (a
// daemon that runs starts a new one at its next Fence), or an engine that
// does not answer (the kill goes through it). A new driver reads fence.json
// at New, so it does not restart a container the watchdog killed.
package docker
