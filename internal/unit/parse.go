package unit

import (
	"errors"
	"fmt"
	"strings"

	sdunit "github.com/coreos/go-systemd/v22/unit"
)

// MaxFileSize is the largest unit file Parse accepts, in bytes.
const MaxFileSize = 256 << 10

// option is one option of a unit file, as Parse accepted it.
type option struct {
	section string
	name    string // current spelling: deprecated [X-Fleet] names are mapped
	written string // spelling in the file
	value   string // continuation lines joined
	line    int    // 1-based; 0 if unknown
	canon   string // the value as the hash sees it; see hash.go
}

// parser holds the state of one Parse.
type parser struct {
	f        *File
	expand   bool // expand [X-Fleet] specifiers: the unit is not a template
	opts     []option
	explicit map[string]bool // options set to a value, for defaults
	lastLine map[string]int  // line of the last assignment of each option

	memoryLimit int64 // legacy MemoryLimit=, used when MemoryMax= is not set

	// Of the other unit types (kinds.go):
	triggers int    // trigger options of a socket, timer or path
	accept   bool   // [Socket] Accept=
	where    string // [Mount] or [Automount] Where=
	what     bool   // [Mount] or [Swap] What= is set

	successAction bool // [Unit] SuccessAction= other than none
}

// Parse validates the unit file data named name and returns it parsed.
//
// The name must pass ValidateName and data must be at most MaxFileSize bytes
// of UTF-8 text in systemd's unit file syntax (parsed with go-systemd). Only
// the sections [Unit], [Service], [Install] and [X-Fleet] are allowed, and
// every option must be one systemd (or fleet, for [X-Fleet]) knows in its
// section; options prefixed "X-" in the systemd sections are accepted and
// ignored, as systemd does. The values of the options drivers act on are
// validated and stored in File.Service and File.Fleet; the others are only
// checked by name.
//
// In [Service] and [X-Fleet] the specifiers %n, %N, %p, %i and %% are
// expanded from the unit's name, except in a template, whose values keep
// them until Instantiate (only "%%" becomes "%" in its [Service]). Other
// specifiers are kept verbatim.
//
// Parse fills File.Service with systemd's defaults (see Service.Defaults)
// for every option the file does not set. Settings that mean "no limit" in
// systemd are stored as such: TimeoutStartSec= and TimeoutStopSec= of 0 or
// "infinity" become Infinity, and StartLimitIntervalSec=0 or
// StartLimitBurst=0 leave StartLimitInterval 0, which turns the start rate
// limit off. RestartSec=0 stays 0.
//
// Errors are *Error values naming the unit and, where it applies, the
// section, option and line; Parse returns the first one it finds.
func Parse(name string, data []byte) (*File, error) {
	p, err := parse(name, data)
	if err != nil {
		return nil, err
	}
	return p.f, nil
}

// parse is Parse, returning the parser with the options it kept (whose
// canonical serialization the hash is of).
func parse(name string, data []byte) (*parser, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, &Error{Unit: name, Msg: fmt.Sprintf("unit file is %d bytes; the limit is %d bytes (%d KiB)", len(data), MaxFileSize, MaxFileSize>>10)}
	}
	// go-systemd does not treat "\r\n" as a line ending where it matters (a
	// backslash before it does not continue the line); systemd does.
	text := strings.ReplaceAll(string(data), "\r\n", "\n")
	if err := checkText(text); err != nil {
		return nil, withUnit(err, name)
	}
	found, warnings, err := scan(text)
	if err != nil {
		return nil, withUnit(err, name)
	}
	raw, err := sdunit.DeserializeOptions(strings.NewReader(text))
	if err != nil {
		// scan rejects everything go-systemd does, so this should not happen.
		return nil, &Error{Unit: name, Msg: "cannot parse unit file: " + err.Error()}
	}
	lines := optionLines(found, raw)

	p := &parser{
		f:        &File{Name: name, Raw: string(data), Warnings: warnings},
		expand:   !IsTemplate(name),
		explicit: make(map[string]bool),
		lastLine: make(map[string]int),
	}
	for i, o := range raw {
		err := p.option(option{
			section: o.Section,
			name:    o.Name,
			written: o.Name,
			value:   joinContinuations(o.Value),
			line:    lines[i],
		})
		if err != nil {
			return nil, err
		}
	}
	if err := p.finish(); err != nil {
		return nil, err
	}
	return p, nil
}

// optionLines returns the line number of each of go-systemd's options, as
// found by scan. Should the two parsers ever disagree, it returns zeros
// rather than wrong numbers.
func optionLines(found []scanned, raw []*sdunit.UnitOption) []int {
	lines := make([]int, len(raw))
	if len(found) != len(raw) {
		return lines
	}
	for i, o := range raw {
		if found[i].section != o.Section || found[i].name != o.Name {
			return make([]int, len(raw))
		}
		lines[i] = found[i].line
	}
	return lines
}

// withUnit sets the unit name of err, if it is an *Error.
func withUnit(err error, name string) error {
	var e *Error
	if errors.As(err, &e) {
		e.Unit = name
	}
	return err
}

// linePrefix returns "line N: ", or "" when the line is unknown.
func linePrefix(line int) string {
	if line <= 0 {
		return ""
	}
	return fmt.Sprintf("line %d: ", line)
}

// errorf returns an error about option o.
func (p *parser) errorf(o option, format string, args ...any) *Error {
	return &Error{
		Unit:    p.f.Name,
		Section: o.section,
		Option:  o.written,
		Msg:     linePrefix(o.line) + fmt.Sprintf(format, args...),
	}
}

// valueError wraps an error from a value parser.
func (p *parser) valueError(o option, err error) *Error {
	return p.errorf(o, "%v", err)
}

// warnf adds a warning about option o.
func (p *parser) warnf(o option, format string, args ...any) {
	p.f.Warnings = append(p.f.Warnings, fmt.Sprintf("%s[%s] %s=: %s", linePrefix(o.line), o.section, o.written, fmt.Sprintf(format, args...)))
}

// keep records o, with canon as its value for the hash.
func (p *parser) keep(o option, canon string) {
	o.canon = canon
	p.opts = append(p.opts, o)
	p.lastLine[o.name] = o.line
}

// option validates one option and applies it to the File.
func (p *parser) option(o option) error {
	if err := p.checkSection(o); err != nil {
		return err
	}
	switch o.section {
	case sectionFleet:
		return p.fleetOption(o)
	case sectionContainer:
		return p.containerOption(o)
	case sectionCheck:
		return p.checkOption(o)
	case sectionUpdate:
		return p.updateOption(o)
	}
	if !knownOption(o.section, o.name) {
		if canon, ok := deprecatedFleetOptions[o.name]; ok {
			return p.errorf(o, "fleet option; it belongs in [X-Fleet], spelled %s=", canon)
		}
		if strings.HasPrefix(o.name, "X-") {
			// systemd ignores options prefixed "X-", leaving them to other tools.
			p.keep(o, normalizeSpace(o.value))
			return nil
		}
		return p.unknownOption(o)
	}
	var err error
	switch o.section {
	case sectionUnit:
		err = p.unitOption(o)
	case sectionService:
		err = p.serviceOption(o)
	default:
		err = p.typeOption(o)
	}
	if err != nil {
		return err
	}
	if use, ok := obsoleteOptions[o.name]; ok {
		if use != "" {
			p.warnf(o, "obsolete and ignored by systemd; use %s", use)
		} else {
			p.warnf(o, "obsolete and ignored by systemd")
		}
	}
	p.keep(o, normalizeSpace(o.value))
	return nil
}

// unknownOption returns the error for an option its section does not have.
func (p *parser) unknownOption(o option) error {
	if s := otherSection(o.section, o.name); s != "" {
		return p.errorf(o, "unknown option in [%s]; %s= belongs in [%s]", o.section, o.name, s)
	}
	if s := suggestOption(o.section, o.name); s != "" {
		return p.errorf(o, "unknown option in [%s]; did you mean %s=?", o.section, s)
	}
	return p.errorf(o, "unknown option in [%s]", o.section)
}

// unitOption applies an option of [Unit].
func (p *parser) unitOption(o option) error {
	switch o.name {
	case "Description":
		p.f.Description = o.value
	case "StartLimitIntervalSec", "StartLimitInterval":
		return p.startLimitInterval(o)
	case "StartLimitBurst":
		return p.startLimitBurst(o)
	case "SuccessAction":
		p.successAction = o.value != "" && o.value != "none"
	}
	return nil
}

// startLimitInterval applies StartLimitIntervalSec= (or its legacy spelling
// StartLimitInterval=, in [Unit] or [Service]).
func (p *parser) startLimitInterval(o option) error {
	s := &p.f.Service
	if o.value == "" {
		s.StartLimitInterval, p.explicit["StartLimitIntervalSec"] = 0, false
		return nil
	}
	d, err := parseDuration(o.value)
	if err != nil {
		return p.valueError(o, err)
	}
	s.StartLimitInterval, p.explicit["StartLimitIntervalSec"] = d, true
	return nil
}

// startLimitBurst applies StartLimitBurst= (in [Unit] or, legacy, [Service]).
func (p *parser) startLimitBurst(o option) error {
	s := &p.f.Service
	if o.value == "" {
		s.StartLimitBurst, p.explicit["StartLimitBurst"] = 0, false
		return nil
	}
	n, err := parseUnsigned(o.value)
	if err != nil {
		return p.valueError(o, err)
	}
	s.StartLimitBurst, p.explicit["StartLimitBurst"] = n, true
	return nil
}

// finish checks what needs the whole file, applies defaults and computes the
// hash.
func (p *parser) finish() error {
	s := &p.f.Service
	if err := p.checkType(); err != nil {
		return err
	}
	if !p.explicit["MemoryMax"] && p.memoryLimit > 0 {
		s.MemoryMax = p.memoryLimit
	}
	if p.explicit["StartLimitBurst"] && s.StartLimitBurst == 0 {
		// systemd: a burst of 0 turns the rate limit off, like an interval of 0.
		s.StartLimitInterval, p.explicit["StartLimitIntervalSec"] = 0, true
	}
	p.colocate()
	if err := p.checkFleet(); err != nil {
		return err
	}
	*s = s.fill(func(name string) bool { return p.explicit[name] })
	p.f.Hash = hashOptions(p.opts)
	return nil
}

// checkExecStart applies systemd's rules on the number of ExecStart=
// commands (service_verify in systemd's service.c).
func (p *parser) checkExecStart() error {
	s := &p.f.Service
	at := func(name string) option {
		return option{section: sectionService, name: name, written: name, line: p.lastLine[name]}
	}
	if s.Type == "" && len(s.ExecStart) == 0 && len(s.ExecStop) == 0 && p.successAction {
		// systemd makes a service without commands Type=oneshot; with
		// SuccessAction= it exists for that action (systemd-reboot.service).
		s.Type = "oneshot"
	}
	oneshot := s.Type == "oneshot"
	switch {
	case !oneshot && len(s.ExecStart) == 0:
		return p.errorf(at("ExecStart"), "missing; a service needs exactly one ExecStart= command (only Type=oneshot services may have none or several)")
	case !oneshot && len(s.ExecStart) > 1:
		return p.errorf(at("ExecStart"), "%d commands, but only Type=oneshot services may have more than one", len(s.ExecStart))
	case oneshot && len(s.ExecStart) == 0 && len(s.ExecStop) == 0 && !p.successAction:
		return p.errorf(at("ExecStart"), "missing; a service needs an ExecStart= or an ExecStop= command (or [Unit] SuccessAction=)")
	case oneshot && len(s.ExecStart) == 0 && !s.RemainAfterExit && !p.successAction:
		return p.errorf(at("ExecStart"), "missing; a Type=oneshot service without ExecStart= needs RemainAfterExit=yes")
	case oneshot && (s.Restart == "always" || s.Restart == "on-success"):
		return p.errorf(at("Restart"), "Restart=%s is not allowed for Type=oneshot services", s.Restart)
	}
	return nil
}
