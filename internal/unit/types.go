package unit

import "time"

// DesiredState is what a user asked for a unit, in fleet's vocabulary.
//
//	inactive: the unit file is known to the cluster but not scheduled anywhere
//	loaded:   the unit is scheduled to a machine, whose agent has loaded it but not started it
//	launched: the unit is scheduled and running
type DesiredState string

const (
	Inactive DesiredState = "inactive"
	Loaded   DesiredState = "loaded"
	Launched DesiredState = "launched"
)

// ParseDesiredState returns the state named s, or an error naming s.
func ParseDesiredState(s string) (DesiredState, error) {
	switch DesiredState(s) {
	case Inactive, Loaded, Launched:
		return DesiredState(s), nil
	}
	return "", &Error{Field: "desiredState", Msg: "unknown desired state " + quote(s) + " (want inactive, loaded or launched)"}
}

// File is a parsed and validated unit file.
type File struct {
	// Name is the unit's full name, e.g. "web@1.service".
	Name string
	// Raw is the unit file exactly as submitted.
	Raw string
	// Hash is the hex SHA-1 of the canonical serialization of the options
	// (what fleet showed in list-unit-files' HASH column, 40 hex digits).
	Hash string
	// Description is [Unit] Description=, or "".
	Description string
	// Service holds the [Service] options the drivers act on.
	Service Service
	// Fleet holds the [X-Fleet] placement options.
	Fleet Fleet
	// Container is the [X-Container] section of a service the docker
	// driver runs, or nil.
	Container *Container `json:",omitempty"`
	// Check is the [X-Check] section of a service: how its health is
	// judged beyond running, or nil.
	Check *Check `json:",omitempty"`
	// Update is the [X-Update] section: how a change of the file is
	// rolled onto its instances (nil: DefaultUpdate).
	Update *Update `json:",omitempty"`
	// Triggers is the unit a .socket, .timer or .path unit activates (its
	// Service= or Unit=, by default the service of the same name; for a
	// socket with Accept=yes, the template "prefix@.service"), or "". Such a
	// unit is placed where the unit it triggers is (an implicit MachineOf=).
	Triggers string `json:",omitempty"`
	// Warnings are non-fatal notes about the file (deprecated spellings, options
	// accepted but not acted on by the exec driver).
	Warnings []string
}

// Service is the [Service] section, reduced to what drivers act on.
// Durations are zero when the option is absent; Defaults() fills systemd's defaults.
type Service struct {
	Type             string    // simple (default), exec, oneshot, notify, notify-reload, forking (systemd driver only), dbus and idle (run as simple by exec)
	ExecStartPre     []Command // run in order before ExecStart; a failing one fails the start unless IgnoreFailure
	ExecStart        []Command // exactly one unless Type=oneshot
	ExecStartPost    []Command
	ExecStop         []Command // run on stop, before the stop signal
	ExecStopPost     []Command
	Environment      []string  // "K=V", in file order (later wins)
	EnvironmentFiles []EnvFile // read at start time by the driver
	WorkingDirectory string    // "" means the driver's default
	User             string
	Group            string
	Restart          string        // no (default), always, on-success, on-failure, on-abnormal, on-abort, on-watchdog
	RestartSec       time.Duration // default 100ms
	TimeoutStartSec  time.Duration // default 90s
	TimeoutStopSec   time.Duration // default 90s
	RemainAfterExit  bool
	KillMode         string // control-group (default), mixed, process, none
	KillSignal       string // default SIGTERM
	// StartLimitBurst / StartLimitInterval come from [Unit]: more than Burst
	// starts within Interval make the unit failed (systemd: 5 in 10s).
	StartLimitBurst    int
	StartLimitInterval time.Duration
	// CPUQuota in percent of one CPU (200 = two CPUs); 0 means unlimited.
	CPUQuotaPercent int
	// MemoryMax in bytes; 0 means unlimited.
	MemoryMax int64
	// WatchdogSec is how long the main process may go without sending
	// WATCHDOG=1 (sd_notify) before it is killed with SIGABRT; 0 (also
	// for "0" and "infinity") means no watchdog.
	WatchdogSec time.Duration `json:",omitempty"`
	// NotifyAccess is whose sd_notify messages are heeded: none, main,
	// exec or all; "" means systemd's default (main for Type=notify and
	// notify-reload or with WatchdogSec=, none otherwise). See
	// NotifyAccessOf.
	NotifyAccess string `json:",omitempty"`
}

// NotifyAccessOf is whose sd_notify messages a run of svc heeds, with
// systemd's default filled in: "none", "main", "exec" or "all".
func NotifyAccessOf(svc *Service) string {
	if svc.NotifyAccess != "" {
		return svc.NotifyAccess
	}
	if svc.Type == "notify" || svc.Type == "notify-reload" || svc.WatchdogSec > 0 {
		return "main"
	}
	return "none"
}

// Command is one Exec*= line.
type Command struct {
	// Argv is the command line split into words with systemd's quoting rules;
	// Argv[0] is the program. Variable references ($FOO, ${FOO}) are kept
	// verbatim: the driver expands them at start time.
	Argv []string
	// IgnoreFailure is the "-" prefix: a non-zero exit is not a failure.
	IgnoreFailure bool
}

// EnvFile is one EnvironmentFile= line; Optional is the "-" prefix.
type EnvFile struct {
	Path     string
	Optional bool
}

// Fleet is the [X-Fleet] section.
type Fleet struct {
	MachineID       string
	MachineOf       []string
	MachineMetadata []string // raw "key=value" entries; repeated values of one key OR, different keys AND
	Conflicts       []string // globs
	Global          bool
	Replaces        []string
	Role            string
	// Placement is how the scheduler ranks the machines a unit may run on:
	// PlacementSpread, PlacementBinpack, or "" for the cluster's default.
	Placement string
	// LostAfter is the cut-off policy's grace: how long the unit's machine
	// may go unheard before the leader starts the unit elsewhere. Zero means
	// the cluster's agent TTL; Infinity means never.
	LostAfter time.Duration
	// Singleton units never run on two machines at once: a machine cut off
	// for LostAfter kills its copy before the leader places another.
	Singleton bool
	// LogMaxSize is the size in bytes at which the unit's log file is
	// rotated on its machine (LogMaxSize=); 0 means the daemon's
	// --log-max-size.
	LogMaxSize int64 `json:",omitempty"`
	// LogMaxFiles is how many rotated log files the unit's machine keeps
	// beside the current one (LogMaxFiles=, 0 allowed); nil means the
	// daemon's --log-max-files.
	LogMaxFiles *int `json:",omitempty"`
}

// Bounds of LogMaxSize= and LogMaxFiles= (and of the daemon's --log-max-size
// and --log-max-files).
const (
	MinLogMaxSize  = 1 << 10
	MaxLogMaxFiles = 100
)

// The values of [X-Fleet] Placement=.
const (
	// PlacementSpread puts a unit on the machine running the fewest units,
	// spreading load (and failures) across the cluster.
	PlacementSpread = "spread"
	// PlacementBinpack puts a unit on the machine it leaves with the least
	// free resources, keeping other machines free for large units.
	PlacementBinpack = "binpack"
)

// Status is the current state of a unit on a machine, in systemd's terms as
// fleetctl showed them.
type Status struct {
	Name    string    `json:"unit"`
	Hash    string    `json:"hash"`
	Machine string    `json:"machine"`
	Load    string    `json:"load"`   // loaded, not-found, error
	Active  string    `json:"active"` // active, reloading, inactive, failed, activating, deactivating
	Sub     string    `json:"sub"`    // running, dead, failed, start-pre, auto-restart, stop-sigterm, stop-sigkill, exited
	PID     int       `json:"pid,omitempty"`
	Since   time.Time `json:"since,omitzero"`   // when Active last changed
	Result  string    `json:"result,omitempty"` // systemd's Result: success, exit-code, signal, timeout, start-limit-hit
	Message string    `json:"message,omitempty"`
	// Health is the unit's health while it is active, as its agent judges
	// it: "healthy", "unhealthy" or "unknown" (its [X-Check] has not
	// decided yet); a unit without [X-Check] is healthy while active (a
	// Type=notify unit is active once it sent READY=1). "" while it is
	// not active (but for a unit restarted for being unhealthy, which
	// stays unhealthy through its restart, and one whose WatchdogSec=
	// passed, unhealthy until it starts again), and from agents that do
	// not report it.
	Health string `json:"health,omitempty"`
}

// Running reports whether the status counts as fleet's "launched".
func (s Status) Running() bool {
	switch s.Active {
	case "active", "activating", "reloading", "deactivating":
		return true
	}
	return false
}
