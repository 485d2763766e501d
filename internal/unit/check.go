package unit

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Check is a service's [X-Check] section: how to judge whether the unit is
// healthy, beyond running. Every probe listed must pass for a run of the
// checks to pass; the agent runs them every Interval once the unit is
// active, each bounded by Timeout.
//
// A unit counts healthy once its checks have passed for HealthyAfter
// (at the first pass when zero), and unhealthy once UnhealthyAfter runs in
// a row have failed; OnUnhealthy says what the agent then does. Failures
// within StartPeriod of the unit becoming active do not count until a run
// has passed (Docker's --start-period). A unit without [X-Check] is
// healthy while it is active.
type Check struct {
	// Exec are commands run beside the unit, in its environment, as its
	// user, in its working directory: exit status 0 passes.
	Exec []Command
	// HTTP are URLs (http or https) that must answer a GET with 2xx.
	HTTP []string
	// TCP are addresses (host:port) that must accept a connection.
	TCP []string

	Interval       time.Duration // default DefaultCheckInterval
	Timeout        time.Duration // each probe's bound; default DefaultCheckTimeout, at most Interval
	HealthyAfter   time.Duration // how long checks must pass; default 0 (the first pass)
	UnhealthyAfter int           // failed runs in a row; default DefaultUnhealthyAfter
	StartPeriod    time.Duration // failures before it do not count until a pass; default 0
	OnUnhealthy    string        // "none" (default) or "restart"
}

// Defaults of [X-Check], as Docker's HEALTHCHECK has them but for the
// interval, which is Nomad's habit of checking every 10 seconds.
const (
	DefaultCheckInterval  = 10 * time.Second
	DefaultCheckTimeout   = 5 * time.Second
	DefaultUnhealthyAfter = 3
	// MinCheckInterval bounds how often a unit's checks may run.
	MinCheckInterval = 100 * time.Millisecond
)

// checkOptions are the options of [X-Check].
var checkOptions = []string{"Exec", "HTTP", "HealthyAfter", "Interval", "OnUnhealthy", "StartPeriod", "TCP", "Timeout", "UnhealthyAfter"}

// checkOption applies an option of [X-Check]. Values are expanded as
// [Service]'s are (a template keeps %i until Instantiate), so that each
// instance checks its own port.
func (p *parser) checkOption(o option) error {
	if !knownOption(sectionCheck, o.name) {
		return p.unknownOption(o)
	}
	if p.f.Check == nil {
		p.f.Check = &Check{}
	}
	c := p.f.Check
	value := strings.TrimSpace(o.value)
	duration := func() (time.Duration, error) {
		d, err := parseDuration(value)
		if err != nil {
			return 0, p.valueError(o, err)
		}
		if d == Infinity {
			return 0, p.errorf(o, "must be finite")
		}
		return d, nil
	}
	var err error
	switch o.name {
	case "Exec":
		if value == "" {
			c.Exec = nil
			break
		}
		cmds, err := p.parseCommands(o)
		if err != nil {
			return err
		}
		for _, cmd := range cmds {
			if cmd.IgnoreFailure {
				return p.errorf(o, `the "-" prefix would make the check always pass`)
			}
		}
		c.Exec = append(c.Exec, cmds...)
	case "HTTP":
		if value == "" {
			c.HTTP = nil
			break
		}
		for _, w := range strings.Fields(value) {
			u := p.unpercent(w)
			if err := checkURL(u, p.expand); err != nil {
				return p.valueError(o, err)
			}
			c.HTTP = append(c.HTTP, u)
		}
	case "TCP":
		if value == "" {
			c.TCP = nil
			break
		}
		for _, w := range strings.Fields(value) {
			a := p.unpercent(w)
			if err := checkHostPort(a, p.expand); err != nil {
				return p.valueError(o, err)
			}
			c.TCP = append(c.TCP, a)
		}
	case "Interval":
		if c.Interval, err = duration(); err != nil {
			return err
		}
		if c.Interval < MinCheckInterval {
			return p.errorf(o, "%v is too often: at least %v", c.Interval, MinCheckInterval)
		}
	case "Timeout":
		if c.Timeout, err = duration(); err != nil {
			return err
		}
		if c.Timeout <= 0 {
			return p.errorf(o, "must be more than 0")
		}
	case "HealthyAfter":
		if c.HealthyAfter, err = duration(); err != nil {
			return err
		}
	case "StartPeriod":
		if c.StartPeriod, err = duration(); err != nil {
			return err
		}
	case "UnhealthyAfter":
		n, err := strconv.Atoi(value)
		if err != nil || n < 1 || n > 1000 {
			return p.errorf(o, "%s: want a count of failed checks in a row, 1 to 1000", quote(value))
		}
		c.UnhealthyAfter = n
	case "OnUnhealthy":
		switch value {
		case "none", "restart":
			c.OnUnhealthy = value
		default:
			return p.errorf(o, "%s: want none or restart", quote(value))
		}
	}
	p.keep(o, normalizeSpace(o.value))
	return nil
}

// checkURL checks an HTTP= URL: absolute, http or https, with a host. It
// is not net/url's parser because this package stays free of the network
// packages (see the scheduler's dependency test); the agent parses the URL
// fully when it checks. In a template (expanded false) the host and port
// may still hold specifiers.
func checkURL(s string, expanded bool) error {
	rest, ok := strings.CutPrefix(s, "http://")
	if !ok {
		if rest, ok = strings.CutPrefix(s, "https://"); !ok {
			return fmt.Errorf("URL %s: want http:// or https://", quote(s))
		}
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Errorf("URL %s contains spaces or control characters", quote(s))
	}
	host, _, _ := strings.Cut(rest, "/")
	host, _, _ = strings.Cut(host, "?")
	switch {
	case host == "":
		return fmt.Errorf("URL %s has no host", quote(s))
	case strings.Contains(host, "@"):
		return fmt.Errorf("URL %s: credentials do not belong in a unit file", quote(s))
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
		if err := checkHostPort(host, expanded); err != nil {
			return fmt.Errorf("URL %s: %w", quote(s), err)
		}
	}
	return nil
}

// checkHostPort checks a TCP= address: host:port with a port from 1 to
// 65535 (in a template, the port may still hold specifiers).
func checkHostPort(s string, expanded bool) error {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 || i == len(s)-1 {
		return fmt.Errorf("address %s: want host:port", quote(s))
	}
	host, port := s[:i], s[i+1:]
	if strings.HasPrefix(host, "[") != strings.HasSuffix(host, "]") {
		return fmt.Errorf("address %s: an IPv6 host goes in brackets, [::1]:80", quote(s))
	}
	if !expanded && strings.Contains(port, "%") {
		return nil
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("address %s: port %s is not 1 to 65535", quote(s), quote(port))
	}
	return nil
}

// checkChecks checks the [X-Check] section as a whole and fills its
// defaults: it has something to check, and its timeout fits its interval.
func (p *parser) checkChecks() error {
	c := p.f.Check
	if c == nil {
		return nil
	}
	whole := func(option, format string, args ...any) error {
		return &Error{Unit: p.f.Name, Section: sectionCheck, Option: option, Msg: linePrefix(p.lastLine[option]) + fmt.Sprintf(format, args...)}
	}
	if len(c.Exec)+len(c.HTTP)+len(c.TCP) == 0 {
		return whole("", "nothing to check: give Exec=, HTTP= or TCP=")
	}
	if c.Interval == 0 {
		c.Interval = DefaultCheckInterval
	}
	if c.Timeout == 0 {
		c.Timeout = min(DefaultCheckTimeout, c.Interval)
	}
	if c.Timeout > c.Interval {
		return whole("Timeout", "%v is longer than Interval=%v: a check would still run when the next begins", c.Timeout, c.Interval)
	}
	if c.UnhealthyAfter == 0 {
		c.UnhealthyAfter = DefaultUnhealthyAfter
	}
	if c.OnUnhealthy == "" {
		c.OnUnhealthy = "none"
	}
	return nil
}
