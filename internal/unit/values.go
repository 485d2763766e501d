package unit

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Infinity is the duration systemd spells "infinity": a timeout that never
// fires, or a start-rate interval that never ends.
const Infinity = time.Duration(math.MaxInt64)

// timeUnits are systemd's time span units (systemd.time(7)). Units are
// case-sensitive: "m" is minutes, "M" months.
var timeUnits = map[string]time.Duration{
	"usec": time.Microsecond, "us": time.Microsecond, "µs": time.Microsecond, "μs": time.Microsecond,
	"msec": time.Millisecond, "ms": time.Millisecond,
	"seconds": time.Second, "second": time.Second, "sec": time.Second, "s": time.Second,
	"minutes": time.Minute, "minute": time.Minute, "min": time.Minute, "m": time.Minute,
	"hours": time.Hour, "hour": time.Hour, "hr": time.Hour, "h": time.Hour,
	"days": 24 * time.Hour, "day": 24 * time.Hour, "d": 24 * time.Hour,
	"weeks": 7 * 24 * time.Hour, "week": 7 * 24 * time.Hour, "w": 7 * 24 * time.Hour,
	"months": 2629800 * time.Second, "month": 2629800 * time.Second, "M": 2629800 * time.Second, // 30.4375 days
	"years": 31557600 * time.Second, "year": 31557600 * time.Second, "y": 31557600 * time.Second, // 365.25 days
}

// parseDuration parses a systemd time span: "infinity", or one or more
// numbers, each optionally fractional and followed by a unit, seconds when
// there is none ("5", "5s", "100ms", "1min 30s", "1.5h", "2h30min").
func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return 0, errors.New("empty time span")
	case s == "infinity":
		return Infinity, nil
	case strings.HasPrefix(s, "-"):
		return 0, fmt.Errorf("negative time span %s", quote(s))
	}
	invalid := fmt.Errorf("invalid time span %s: want a number with an optional unit, such as 90s, 100ms, 1min 30s or infinity", quote(s))
	var total time.Duration
	for rest := s; rest != ""; rest = strings.TrimLeft(rest, " \t") {
		num, frac, n := scanDecimal(rest)
		if n == 0 {
			return 0, invalid
		}
		glued := n < len(rest) && rest[n] != ' ' && rest[n] != '\t'
		rest = strings.TrimLeft(rest[n:], " \t")
		u := 0
		for u < len(rest) && !strings.ContainsRune(" \t0123456789.", rune(rest[u])) {
			u++
		}
		unit := time.Second
		if u > 0 {
			var ok bool
			if unit, ok = timeUnits[rest[:u]]; !ok {
				return 0, fmt.Errorf("invalid time span %s: unknown unit %s (use us, ms, s, min, h, d, w, M or y)", quote(s), quote(rest[:u]))
			}
			rest = rest[u:]
		} else if glued {
			return 0, invalid // "1.2.3"
		}
		d, ok := scale(num, frac, int64(unit))
		if !ok || total > Infinity-time.Duration(d) {
			return 0, fmt.Errorf("time span %s is too long", quote(s))
		}
		total += time.Duration(d)
	}
	return total, nil
}

// scanDecimal reads an unsigned decimal number with an optional fraction
// ("12", "1.5", ".5") from the start of s. It returns the integer digits, the
// fraction digits and the number of bytes read, 0 if there is no number.
func scanDecimal(s string) (num, frac string, n int) {
	for n < len(s) && '0' <= s[n] && s[n] <= '9' {
		n++
	}
	num = s[:n]
	if n < len(s) && s[n] == '.' {
		f := n + 1
		for f < len(s) && '0' <= s[f] && s[f] <= '9' {
			f++
		}
		if f > n+1 {
			frac, n = s[n+1:f], f
		} else if num != "" {
			n++ // "5." is 5
		}
	}
	if num == "" && frac == "" {
		return "", "", 0
	}
	return num, frac, n
}

// scale returns (num.frac)*unit, truncated to an integer, and whether it fits
// in an int64.
func scale(num, frac string, unit int64) (int64, bool) {
	var v int64
	if num != "" {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n > math.MaxInt64/unit {
			return 0, false
		}
		v = n * unit
	}
	if len(frac) > 18 {
		frac = frac[:18] // beyond the precision of an int64
	}
	if frac != "" {
		f, _ := strconv.ParseUint(frac, 10, 64)
		div := uint64(1)
		for range len(frac) {
			div *= 10
		}
		// unit*f/div exactly; hi < div because f < div, so Div64 cannot panic.
		hi, lo := bits.Mul64(uint64(unit), f)
		q, _ := bits.Div64(hi, lo, div)
		if int64(q) > math.MaxInt64-v {
			return 0, false
		}
		v += int64(q)
	}
	return v, true
}

// parseBool parses a systemd boolean.
func parseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "yes", "y", "true", "t", "on":
		return true, nil
	case "0", "no", "n", "false", "f", "off":
		return false, nil
	}
	return false, fmt.Errorf("invalid boolean %s (want yes, no, true, false, on, off, 1 or 0)", quote(s))
}

// parseUnsigned parses a non-negative decimal integer that fits in an int32.
func parseUnsigned(s string) (int, error) {
	s = strings.TrimSpace(s)
	n, err := strconv.ParseUint(s, 10, 31)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Errorf("%s is too large", quote(s))
		}
		return 0, fmt.Errorf("invalid number %s (want a non-negative integer)", quote(s))
	}
	return int(n), nil
}

// byteSuffixes are systemd's size suffixes, powers of 1024 (parse_size).
var byteSuffixes = map[string]int64{
	"":  1,
	"B": 1,
	"K": 1 << 10,
	"M": 1 << 20,
	"G": 1 << 30,
	"T": 1 << 40,
	"P": 1 << 50,
	"E": 1 << 60,
}

// parseBytes parses a size in bytes with an optional K, M, G, T, P or E
// suffix, powers of 1024 as in systemd ("512M", "1.5G"). Percentages are
// rejected: they are relative to the memory of the machine the unit lands
// on, which Flotilla does not know when it parses the unit.
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	num, frac, n := scanDecimal(s)
	if n == 0 {
		return 0, fmt.Errorf("invalid size %s: want a number of bytes with an optional K, M, G or T suffix (powers of 1024), such as 512M, or infinity", quote(s))
	}
	suffix := strings.TrimSpace(s[n:])
	if suffix == "%" {
		return 0, fmt.Errorf("percentage %s is not supported: Flotilla cannot know the memory of the machine the unit will run on; give a size such as 512M", quote(s))
	}
	unit, ok := byteSuffixes[suffix]
	if !ok {
		hint := ""
		up := strings.ToUpper(suffix)
		up = strings.TrimSuffix(strings.TrimSuffix(up, "IB"), "B")
		if u, ok := byteSuffixes[up]; ok && u > 1 {
			hint = fmt.Sprintf("; did you mean %s%s?", s[:n], up)
		}
		return 0, fmt.Errorf("invalid size %s: unknown suffix %s (use K, M, G, T, P or E, powers of 1024)%s", quote(s), quote(suffix), hint)
	}
	v, ok := scale(num, frac, unit)
	if !ok {
		return 0, fmt.Errorf("size %s is too large", quote(s))
	}
	return v, nil
}

// parsePercent parses a percentage such as "150%" or "12.5%", rounding it to
// the nearest whole percent but not down to 0. exact is false when rounding
// changed the value.
func parsePercent(s string) (percent int, exact bool, err error) {
	s = strings.TrimSpace(s)
	body, ok := strings.CutSuffix(s, "%")
	num, frac, n := scanDecimal(body)
	if !ok || n == 0 || n != len(body) {
		return 0, false, fmt.Errorf("invalid percentage %s: want a percentage of one CPU such as 50%% or 200%%", quote(s))
	}
	// Hundredths of a percent, to round.
	v, ok := scale(num, frac, 100)
	if !ok || v > 100*math.MaxInt32 {
		return 0, false, fmt.Errorf("percentage %s is too large", quote(s))
	}
	percent = int((v + 50) / 100)
	if percent == 0 && v > 0 {
		percent = 1
	}
	return percent, int64(percent)*100 == v, nil
}

// signals are the Linux signal names systemd accepts, by number.
var signals = []string{
	1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
	7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2",
	13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 16: "SIGSTKFLT", 17: "SIGCHLD", 18: "SIGCONT",
	19: "SIGSTOP", 20: "SIGTSTP", 21: "SIGTTIN", 22: "SIGTTOU", 23: "SIGURG", 24: "SIGXCPU",
	25: "SIGXFSZ", 26: "SIGVTALRM", 27: "SIGPROF", 28: "SIGWINCH", 29: "SIGIO", 30: "SIGPWR",
	31: "SIGSYS",
}

// parseSignal parses a signal the way systemd does ("SIGTERM", "TERM", "15",
// "SIGRTMIN+3") and returns its canonical "SIG..." name.
func parseSignal(s string) (string, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.Atoi(s); err == nil {
		if n > 0 && n < len(signals) {
			return signals[n], nil
		}
		return "", fmt.Errorf("invalid signal number %s (use a name such as SIGTERM, or SIGRTMIN+n for real-time signals)", quote(s))
	}
	name := s
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	for _, sig := range signals {
		if sig != "" && (name == sig || name == "SIGPOLL" && sig == "SIGIO") {
			return sig, nil
		}
	}
	for _, rt := range []string{"SIGRTMIN+", "SIGRTMAX-"} {
		if off, ok := strings.CutPrefix(name, rt); ok {
			if n, err := strconv.Atoi(off); err == nil && n >= 0 && n <= 30 && off == strconv.Itoa(n) {
				return name, nil
			}
		}
	}
	if name == "SIGRTMIN" || name == "SIGRTMAX" {
		return name, nil
	}
	hint := ""
	if up := strings.ToUpper(s); up != s {
		if sig, err := parseSignal(up); err == nil {
			hint = "; did you mean " + sig + "?"
		}
	}
	return "", fmt.Errorf("unknown signal %s%s", quote(s), hint)
}
