package execdriver

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	sdjournal "github.com/coreos/go-systemd/v22/journal"

	"github.com/flotilla/flotilla/internal/driver/service"
	"github.com/flotilla/flotilla/internal/unit"
)

// LogConfig is the machine's setting for every unit's log: the limits a unit
// gets unless its [X-Fleet] LogMaxSize= or LogMaxFiles= says otherwise, and
// whether the lines also go to journald.
type LogConfig struct {
	Limits   LogLimits
	Journald bool
	// Machine is the FLOTILLA_MACHINE of journald entries; empty means
	// Config.Machine.
	Machine string
}

// Validate checks the settings, naming what is wrong.
func (c LogConfig) Validate() error {
	if c.Limits.MaxBytes < minMaxLogBytes {
		return fmt.Errorf("log max size %d is below the minimum of %d bytes", c.Limits.MaxBytes, minMaxLogBytes)
	}
	if c.Limits.MaxFiles < 0 || c.Limits.MaxFiles > maxRotated {
		return fmt.Errorf("log max files %d is out of range: want 0 to %d", c.Limits.MaxFiles, maxRotated)
	}
	return nil
}

// LogConfig returns the machine's log settings.
func (d *Driver) LogConfig() LogConfig {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.logs
}

// SetLogConfig changes the machine's log settings: every loaded unit without
// limits of its own obeys the new limits from its next line on (a log over
// the new size is rotated at that line, and rotated files beyond the new
// count are removed at the next rotation), and the journald sink is turned
// on or off.
func (d *Driver) SetLogConfig(c LogConfig) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("execdriver: %w", err)
	}
	d.mu.Lock()
	d.logs = c
	sups := make([]*supervisor, 0, len(d.units))
	for _, s := range d.units {
		sups = append(sups, s)
	}
	d.mu.Unlock()
	for _, s := range sups {
		s.applyLogConfig()
	}
	return nil
}

// logSettings returns the limits and journal sink of the unit defined by f
// on a machine with the settings c.
func (d *Driver) logSettings(c LogConfig, f *unit.File) (LogLimits, journalSink) {
	lim := c.Limits
	if f.Fleet.LogMaxSize > 0 {
		lim.MaxBytes = f.Fleet.LogMaxSize
	}
	if f.Fleet.LogMaxFiles != nil {
		lim.MaxFiles = min(max(*f.Fleet.LogMaxFiles, 0), maxRotated)
	}
	var sink journalSink
	if c.Journald {
		sink = journaldSink(f.Name, cmp.Or(c.Machine, d.cfg.Machine))
	}
	return lim, sink
}

// applyLogConfig sets the unit's log settings from its newest definition
// and the machine's settings.
func (s *supervisor) applyLogConfig() {
	s.mu.Lock()
	f := s.logFile
	s.mu.Unlock()
	lim, sink := s.d.logSettings(s.d.LogConfig(), f)
	s.log.set(lim, sink)
}

// journaldSink sends a line of the unit's log to the local journald, as
// systemd does a service's output: SYSLOG_IDENTIFIER is the unit for its
// processes' output ("flotilla" for the driver's own messages about it),
// SYSLOG_PID the process, and FLOTILLA_UNIT and FLOTILLA_MACHINE say where
// it ran.
func journaldSink(name, machine string) journalSink {
	return func(ident string, pid int, text []byte) error {
		return sdjournal.Send(string(text), sdjournal.PriInfo, journaldFields(name, machine, ident, pid))
	}
}

// journaldFields are the fields of a line sent to journald.
func journaldFields(name, machine, ident string, pid int) map[string]string {
	return map[string]string{
		"SYSLOG_IDENTIFIER": ident,
		"SYSLOG_PID":        strconv.Itoa(pid),
		"FLOTILLA_UNIT":     name,
		"FLOTILLA_MACHINE":  machine,
	}
}

// ErrUnitLoaded is returned by RemoveLog for a unit that is loaded.
var ErrUnitLoaded = errors.New("execdriver: unit is loaded")

// RemoveLog removes the log of a unit that is not loaded, with its rotated
// files: the agent calls it once a unit that was destroyed is unloaded (a
// unit that merely stops or moves away keeps its log). A unit without a log
// is no error.
func (d *Driver) RemoveLog(name string) error {
	if err := service.CheckName(name); err != nil {
		return fmt.Errorf("remove log of %s: %w", name, err)
	}
	d.mu.Lock() // no Load of the unit meanwhile
	defer d.mu.Unlock()
	if d.units[name] != nil {
		return fmt.Errorf("remove log of %s: %w", name, ErrUnitLoaded)
	}
	path := d.logPath(name)
	err := os.Remove(path)
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	if rerr := removeRotated(path, 1); err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("remove log of %s: %w", name, err)
	}
	return nil
}
