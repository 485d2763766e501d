package unit

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// serviceTypes are the values of Type=; the ones mapped to true are run as
// Type=simple by the exec driver.
var serviceTypes = map[string]bool{
	"simple": false, "exec": false, "oneshot": false, "notify": false, "notify-reload": false,
	"forking": true, "dbus": true, "idle": true,
}

var notifyAccessValues = []string{"none", "main", "exec", "all"}

var restartValues = []string{"no", "always", "on-success", "on-failure", "on-abnormal", "on-abort", "on-watchdog"}

var killModes = []string{"control-group", "mixed", "process", "none"}

// serviceOption applies an option of [Service].
func (p *parser) serviceOption(o option) error {
	s := &p.f.Service
	v := o.value
	switch o.name {
	case "Type":
		if v == "" {
			s.Type = ""
			return nil
		}
		simple, ok := serviceTypes[v]
		if !ok {
			return p.errorf(o, "invalid value %s (want simple, exec, forking, oneshot, notify, notify-reload, dbus or idle)", quote(v))
		}
		if simple && v != "forking" {
			// Type=forking services are placed on systemd machines only
			// (File.Drivers); the others run as Type=simple under exec.
			p.warnf(o, "the exec driver runs Type=%s services as Type=simple", v)
		}
		s.Type = v
	case "Restart":
		if v != "" && !slices.Contains(restartValues, v) {
			return p.errorf(o, "invalid value %s (want %s)", quote(v), strings.Join(restartValues, ", "))
		}
		s.Restart = v
	case "KillMode":
		if v != "" && !slices.Contains(killModes, v) {
			return p.errorf(o, "invalid value %s (want %s)", quote(v), strings.Join(killModes, ", "))
		}
		if v == "none" {
			p.warnf(o, "KillMode=none is deprecated in systemd: processes left behind outlive the unit")
		}
		s.KillMode = v
	case "KillSignal":
		s.KillSignal = ""
		if v != "" {
			sig, err := parseSignal(v)
			if err != nil {
				return p.valueError(o, err)
			}
			s.KillSignal = sig
		}
	case "RemainAfterExit":
		s.RemainAfterExit = false
		if v != "" {
			b, err := parseBool(v)
			if err != nil {
				return p.valueError(o, err)
			}
			s.RemainAfterExit = b
		}
	case "RestartSec":
		s.RestartSec, p.explicit[o.name] = 0, false
		if v != "" {
			d, err := parseDuration(v)
			if err != nil {
				return p.valueError(o, err)
			}
			if d == Infinity {
				return p.errorf(o, "must be a finite time span")
			}
			s.RestartSec, p.explicit[o.name] = d, true
		}
	case "TimeoutStartSec", "TimeoutStopSec", "TimeoutSec":
		d, err := p.timeout(o)
		if err != nil {
			return err
		}
		if o.name != "TimeoutStopSec" {
			s.TimeoutStartSec = d
		}
		if o.name != "TimeoutStartSec" {
			s.TimeoutStopSec = d
		}
	case "StartLimitInterval":
		return p.startLimitInterval(o)
	case "StartLimitBurst":
		return p.startLimitBurst(o)
	case "CPUQuota":
		s.CPUQuotaPercent = 0
		if v != "" {
			pct, exact, err := parsePercent(v)
			if err != nil {
				return p.valueError(o, err)
			}
			if pct == 0 {
				return p.errorf(o, "must be more than 0%%")
			}
			if !exact {
				p.warnf(o, "%s is rounded to %d%%", v, pct)
			}
			s.CPUQuotaPercent = pct
		}
	case "MemoryMax", "MemoryLimit":
		n, err := p.memory(o)
		if err != nil {
			return err
		}
		if o.name == "MemoryMax" {
			s.MemoryMax, p.explicit[o.name] = n, v != ""
		} else {
			p.memoryLimit = n
			p.warnf(o, "deprecated; it is applied as MemoryMax= unless MemoryMax= is set")
		}
	case "User", "Group":
		if strings.ContainsFunc(v, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			return p.errorf(o, "invalid %s %s: spaces and control characters are not allowed", strings.ToLower(o.name), quote(v))
		}
		if o.name == "User" {
			s.User = p.unpercent(v)
		} else {
			s.Group = p.unpercent(v)
		}
	case "WorkingDirectory":
		dir := v
		if rest, ok := strings.CutPrefix(dir, "-"); ok {
			dir = rest
			p.warnf(o, `the "-" prefix is not honoured: a missing directory fails the start`)
		}
		if dir != "" && dir != "~" && !strings.HasPrefix(dir, "/") && !strings.HasPrefix(dir, "%") {
			return p.errorf(o, "%s is not an absolute path or \"~\"", quote(dir))
		}
		s.WorkingDirectory = p.unpercent(dir)
	case "Environment":
		env, err := p.parseEnvironment(v)
		if err != nil {
			return p.valueError(o, err)
		}
		if v == "" {
			s.Environment = nil
		}
		s.Environment = append(s.Environment, env...)
	case "EnvironmentFile":
		if v == "" {
			s.EnvironmentFiles = nil
			return nil
		}
		path, optional := strings.CutPrefix(v, "-")
		if !strings.HasPrefix(path, "/") && !strings.HasPrefix(path, "%") {
			return p.errorf(o, "%s is not an absolute path", quote(path))
		}
		s.EnvironmentFiles = append(s.EnvironmentFiles, EnvFile{Path: p.unpercent(path), Optional: optional})
	case "ExecStartPre", "ExecStart", "ExecStartPost", "ExecStop", "ExecStopPost", "ExecReload", "ExecCondition":
		return p.exec(o)
	case "WatchdogSec":
		// 0 and infinity turn the watchdog off, as in systemd.
		s.WatchdogSec = 0
		if v != "" {
			d, err := parseDuration(v)
			if err != nil {
				return p.valueError(o, err)
			}
			if d != Infinity {
				s.WatchdogSec = d
			}
		}
	case "NotifyAccess":
		if v != "" && !slices.Contains(notifyAccessValues, v) {
			return p.errorf(o, "invalid value %s (want %s)", quote(v), strings.Join(notifyAccessValues, ", "))
		}
		s.NotifyAccess = v
	}
	return nil
}

// timeout parses TimeoutStartSec=, TimeoutStopSec= or TimeoutSec=, where 0
// means no timeout, like "infinity". An empty value restores the default.
func (p *parser) timeout(o option) (d time.Duration, err error) {
	if o.value == "" {
		return 0, nil
	}
	d, err = parseDuration(o.value)
	if err != nil {
		return 0, p.valueError(o, err)
	}
	if d == 0 {
		d = Infinity
	}
	return d, nil
}

// memory parses MemoryMax= or MemoryLimit=: bytes, or "infinity" (and empty)
// for no limit, which is 0.
func (p *parser) memory(o option) (int64, error) {
	if o.value == "" || o.value == "infinity" {
		return 0, nil
	}
	n, err := parseBytes(o.value)
	if err != nil {
		return 0, p.valueError(o, err)
	}
	if n < 1 {
		return 0, p.errorf(o, "must be at least 1 byte; use infinity for no limit")
	}
	return n, nil
}

// unpercent expands the unit-name specifiers %n, %N, %p, %i (as systemd
// does) and "%%" in a [Service] value of a unit that is not a template; a
// template's values keep their specifiers for its instances, but "%%"
// becomes "%". Other specifiers are kept.
func (p *parser) unpercent(s string) string {
	if p.expand {
		return p.expandSpecifiers(s)
	}
	return strings.ReplaceAll(s, "%%", "%")
}

// validEnvName reports whether s is a valid environment variable name.
func validEnvName(s string) bool {
	if s == "" || '0' <= s[0] && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// parseEnvironment splits an Environment= value into its NAME=value
// assignments.
func (p *parser) parseEnvironment(v string) ([]string, error) {
	words, err := splitWords(v)
	if err != nil {
		return nil, err
	}
	env := make([]string, 0, len(words))
	for _, w := range words {
		name, _, ok := strings.Cut(w.text, "=")
		if !ok {
			return nil, fmt.Errorf("%s is not an assignment (want NAME=value)", quote(w.text))
		}
		if !validEnvName(name) {
			return nil, fmt.Errorf("invalid variable name %s in %s: use letters, digits and \"_\", not starting with a digit", quote(name), quote(w.text))
		}
		env = append(env, p.unpercent(w.text))
	}
	return env, nil
}

// exec applies an Exec*= option. An empty value resets the list, as in
// systemd; ExecReload= and ExecCondition= are checked but not stored.
func (p *parser) exec(o option) error {
	cmds, err := p.parseCommands(o)
	if err != nil {
		return err
	}
	s := &p.f.Service
	var list *[]Command
	switch o.name {
	case "ExecStartPre":
		list = &s.ExecStartPre
	case "ExecStart":
		list = &s.ExecStart
	case "ExecStartPost":
		list = &s.ExecStartPost
	case "ExecStop":
		list = &s.ExecStop
	case "ExecStopPost":
		list = &s.ExecStopPost
	default:
		return nil
	}
	if o.value == "" {
		*list = nil
	}
	*list = append(*list, cmds...)
	return nil
}

// execPrefixes describes the prefixes of an Exec*= command that the exec
// driver does not honour.
var execPrefixes = map[string]string{
	"@":  `the "@" prefix is not honoured: the program gets its path as argv[0], not %s`,
	":":  `the ":" prefix is not honoured: environment variables in the command are still expanded`,
	"+":  `the "+" prefix is not honoured: the command runs with the same privileges as the others`,
	"!":  `the "!" prefix is not honoured: the command runs with the same privileges as the others`,
	"!!": `the "!!" prefix is not honoured: the command runs with the same privileges as the others`,
}

// parseCommands parses the value of an Exec*= option: one or more command
// lines separated by lone ";" words, each with systemd's quoting and
// optional prefixes ("-", "@", ":", "+", "!", "!!") on its first word.
func (p *parser) parseCommands(o option) ([]Command, error) {
	words, err := splitWords(o.value)
	if err != nil {
		return nil, p.valueError(o, err)
	}
	var cmds []Command
	for len(words) > 0 {
		n := slices.IndexFunc(words, func(w word) bool { return w.raw == ";" })
		if n < 0 {
			n = len(words)
		}
		if n == 0 {
			return nil, p.errorf(o, "empty command before \";\"")
		}
		cmd, err := p.command(o, words[:n])
		if err != nil {
			return nil, err
		}
		cmds = append(cmds, cmd)
		if n == len(words) {
			break
		}
		words = words[n+1:]
		if len(words) == 0 {
			return nil, p.errorf(o, "empty command after \";\"")
		}
	}
	return cmds, nil
}

// command builds one command line from its words.
func (p *parser) command(o option, words []word) (Command, error) {
	var cmd Command
	prog := words[0].text
	args := words[1:]
	// Each prefix may appear once, in any order; "+", "!" and "!!" exclude
	// each other. Anything else ends the prefixes, as in systemd.
	seen := map[string]bool{}
	privileged := false
prefixes:
	for {
		prefix := ""
		switch {
		case strings.HasPrefix(prog, "-") && !cmd.IgnoreFailure:
			cmd.IgnoreFailure = true
			prog = prog[1:]
			continue
		case strings.HasPrefix(prog, "@") && !seen["@"]:
			prefix = "@"
		case strings.HasPrefix(prog, ":") && !seen[":"]:
			prefix = ":"
		case strings.HasPrefix(prog, "+") && !privileged:
			prefix = "+"
		case strings.HasPrefix(prog, "!!") && !privileged:
			prefix = "!!"
		case strings.HasPrefix(prog, "!") && !privileged:
			prefix = "!"
		default:
			break prefixes
		}
		seen[prefix] = true
		privileged = privileged || prefix == "+" || prefix == "!" || prefix == "!!"
		prog = prog[len(prefix):]
	}
	for _, prefix := range []string{"@", ":", "+", "!", "!!"} {
		if !seen[prefix] {
			continue
		}
		if prefix == "@" {
			if len(args) == 0 {
				return cmd, p.errorf(o, "the \"@\" prefix needs the argv[0] to use after the program")
			}
			p.warnf(o, execPrefixes[prefix], quote(args[0].text))
			args = args[1:]
			continue
		}
		p.warnf(o, "%s", execPrefixes[prefix])
	}
	switch {
	case prog == "":
		return cmd, p.errorf(o, "missing the program to run")
	case strings.HasPrefix(prog, "$"):
		return cmd, p.errorf(o, "the program to run cannot be a variable (%s)", prog)
	case strings.ContainsFunc(prog, func(r rune) bool { return r < ' ' || r == 0x7f }):
		return cmd, p.errorf(o, "program %s contains control characters", quote(prog))
	case strings.Contains(prog, "/") && !strings.HasPrefix(prog, "/") && !strings.HasPrefix(prog, "%"):
		return cmd, p.errorf(o, "program %s must be an absolute path, or a bare name to look up in the search path", quote(prog))
	}
	cmd.Argv = make([]string, 0, 1+len(args))
	cmd.Argv = append(cmd.Argv, p.unpercent(prog))
	for _, a := range args {
		cmd.Argv = append(cmd.Argv, p.unpercent(a.text))
	}
	return cmd, nil
}
