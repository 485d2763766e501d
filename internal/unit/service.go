package unit

import (
	"slices"
	"time"
)

// systemd's defaults for the [Service] and [Unit] options drivers act on.
const (
	DefaultType               = "simple"
	DefaultRestart            = "no"
	DefaultRestartSec         = 100 * time.Millisecond
	DefaultTimeoutStartSec    = 90 * time.Second
	DefaultTimeoutStopSec     = 90 * time.Second
	DefaultKillMode           = "control-group"
	DefaultKillSignal         = "SIGTERM"
	DefaultStartLimitBurst    = 5
	DefaultStartLimitInterval = 10 * time.Second
)

// Defaults returns a deep copy of s with systemd's default in every field
// that is zero and has one: Type simple, Restart no, RestartSec 100ms,
// TimeoutStartSec 90s (Infinity for Type=oneshot, as in systemd),
// TimeoutStopSec 90s, KillMode control-group, KillSignal SIGTERM,
// StartLimitBurst 5 and StartLimitInterval 10s.
//
// Defaults is for a Service built by hand. Parse has already applied the
// defaults to every option its file does not set, and a zero it leaves is
// what the file asked for: RestartSec=0 restarts at once, and
// StartLimitInterval 0 turns the start rate limit off. Calling Defaults on
// Parse's result would replace those zeros.
func (s Service) Defaults() Service {
	return s.clone().fill(func(string) bool { return false })
}

// fill sets the defaults of the zero fields whose option was not set
// explicitly, as reported by explicit, and returns s.
func (s Service) fill(explicit func(option string) bool) Service {
	if s.Type == "" {
		s.Type = DefaultType
	}
	if s.Restart == "" {
		s.Restart = DefaultRestart
	}
	if s.KillMode == "" {
		s.KillMode = DefaultKillMode
	}
	if s.KillSignal == "" {
		s.KillSignal = DefaultKillSignal
	}
	if s.RestartSec == 0 && !explicit("RestartSec") {
		s.RestartSec = DefaultRestartSec
	}
	if s.TimeoutStartSec == 0 {
		s.TimeoutStartSec = DefaultTimeoutStartSec
		if s.Type == "oneshot" {
			s.TimeoutStartSec = Infinity
		}
	}
	if s.TimeoutStopSec == 0 {
		s.TimeoutStopSec = DefaultTimeoutStopSec
	}
	if s.StartLimitBurst == 0 {
		s.StartLimitBurst = DefaultStartLimitBurst
	}
	if s.StartLimitInterval == 0 && !explicit("StartLimitIntervalSec") {
		s.StartLimitInterval = DefaultStartLimitInterval
	}
	return s
}

// clone returns a copy of s that shares no memory with it.
func (s Service) clone() Service {
	s.ExecStartPre = cloneCommands(s.ExecStartPre)
	s.ExecStart = cloneCommands(s.ExecStart)
	s.ExecStartPost = cloneCommands(s.ExecStartPost)
	s.ExecStop = cloneCommands(s.ExecStop)
	s.ExecStopPost = cloneCommands(s.ExecStopPost)
	s.Environment = slices.Clone(s.Environment)
	s.EnvironmentFiles = slices.Clone(s.EnvironmentFiles)
	return s
}

func cloneCommands(cmds []Command) []Command {
	if cmds == nil {
		return nil
	}
	out := make([]Command, len(cmds))
	for i, c := range cmds {
		out[i] = Command{Argv: slices.Clone(c.Argv), IgnoreFailure: c.IgnoreFailure}
	}
	return out
}
