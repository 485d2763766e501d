// Package systemddriver runs units as the machine's own systemd units, over
// D-Bus, the way fleet did. It implements driver.Driver, driver.BatchLoader,
// driver.Killer, driver.Fencer, driver.Detacher and driver.StartRecorder.
//
// # Using it
//
//  1. Make one Driver per machine with New. It connects to systemd (the
//     system bus, or systemd's private socket when root and no bus runs),
//     subscribes to systemd's signals and adopts the units an earlier
//     driver wrote (see "Adoption").
//  2. Load writes the unit file, exactly as submitted (File.Raw) below a
//     two-line header, to Config.UnitDir (/run/systemd/system, where
//     systemd reads runtime units: they vanish at reboot, as the agent's
//     assignments do). systemd loads a new unit from its file when asked
//     for it, so Load reloads systemd only for a unit systemd holds from an
//     older file (or as not found); reloads are batched (callers that
//     arrive while one runs share the next). LoadBatch (the agent's
//     loads of one pass) writes every file of the batch before systemd
//     reads any: systemd rebuilds its map of unit files (a scan of every
//     file in its unit directories) when it finds a directory changed,
//     so files written one at a time cost a scan each. The new units are
//     then loaded with one ListUnitsByNames call per 512, and each
//     unit's FragmentPath read; units systemd already held are checked
//     as Load does, with one reload for all. Load is LoadBatch of one.
//     An instance of a template
//     (web@1.service) is written as an instance file holding the
//     template's text, as fleet wrote them; systemd resolves %i from the
//     file's name.
//  3. Start and Stop queue systemd jobs (StartUnit, StopUnit with mode
//     "replace") and return; the outcome arrives through Config.Notify.
//     At most 64 of the driver's jobs are queued at once (a Start waits
//     for a place): on the system bus systemd adds a match rule per
//     queued job to watch its client, dbus-daemon allows it 512, and past
//     them systemd is cut off the bus.
//     Start records that the agent started the unit (a file under
//     Config.StateDir, removed by Stop), which Started reports
//     (driver.StartRecorder): systemd also starts units by itself (a
//     socket's service), and an adopting agent must not take those as
//     launched.
//  4. Unload stops the unit, waits for the stop job, removes its file and
//     reloads. Kill queues the stop and SIGKILLs every process of the unit
//     at once (systemctl kill --signal=SIGKILL), so no ExecStop= or stop
//     timeout delays it, then unloads.
//  5. Journal runs journalctl on the unit (see "Journal").
//  6. Detach closes the D-Bus connection and leaves every unit to systemd;
//     Close stops and removes them.
//
// # States
//
// A unit's status is systemd's own: Load, Active and Sub are the unit's
// LoadState, ActiveState and SubState; PID is a service's MainPID; Result
// is the unit's Result (for units that were started at least once: a unit
// that never left inactive shows none). The driver follows them through one
// subscription to systemd's PropertiesChanged signals; nothing polls. On
// the system bus the signals come over a connection of the driver's own
// whose match rule takes only those of units' org.freedesktop.systemd1.Unit
// interface (go-systemd's subscription, used without a system bus, takes
// every interface's and reads the unit of each ended job). A signal only
// marks its unit dirty; 10 ms after the first, the current states of the
// dirty units are read with one ListUnitsByNames call, and MainPID and
// Result of those whose state changed (an inactive or active unit's
// Result is success, not read: systemd resets it when the unit starts and
// puts a unit with any other in failed, or activating to restart it). Reading the state, rather than taking it from the
// signal, matters: godbus hands signals over from goroutines of its own
// once its buffer is full, so they may arrive out of order. When the
// subscription's buffer overflows, every loaded unit is read once, so a
// lost signal costs a read, never a stale state.
//
// # Adoption
//
// systemd holds the units, so they outlive the daemon. The header Load
// writes marks a file as the driver's and carries the unit's hash:
//
//	# Written by flotilla's systemd driver; removed when the unit is unloaded.
//	# X-Flotilla-Hash=<hash>
//
// New reads every such file in UnitDir and reports the unit as systemd has
// it (running units keep their MainPID: nothing is started or restarted),
// so the agent adopts them.
//
// # Fencing
//
// A Singleton=true unit must stop at its deadline even when the daemon is
// frozen. Fence hands the deadline to systemd itself: a transient timer,
// flotilla-fence-N.timer, with OnStartupSec= set so that it elapses at the
// deadline on CLOCK_MONOTONIC (systemd counts OnStartupSec= from its
// userspace start, read from the manager's UserspaceTimestampMonotonic, so
// the deadline is absolute and a daemon frozen between computing it and
// arming the timer cannot delay it), with AccuracySec=1us. It triggers a
// transient oneshot service that runs "systemctl stop --no-block" and
// "systemctl kill --signal=SIGKILL" on the fenced units. Each Fence arms a
// new timer (N+1) before stopping the old one, so some timer is armed at
// every moment. The units are then reported inactive with Result "fenced"
// and a Message saying why, and Start refuses them (ErrFenced) until a
// later Fence moves the deadline on. A new driver leaves the timers it
// finds armed: the deadline an earlier daemon set stands until the next
// Fence replaces it.
//
// # Journal
//
// Journal runs "journalctl -u NAME -o cat -n N [-f]". The sdjournal package
// would read the journal in process, but it needs cgo and libsystemd, and
// flotilla is a static binary; journalctl is on every systemd machine. A
// unit's journal is journald's, with journald's retention: the driver does
// not implement driver.LogRemover (journald cannot remove one unit's
// entries).
package systemddriver
