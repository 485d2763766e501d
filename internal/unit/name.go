package unit

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// MaxNameLength is the longest unit name systemd accepts.
const MaxNameLength = 255

// serviceSuffix is the suffix of services, the unit type every driver runs.
const serviceSuffix = ".service"

// unitTypes are the unit types Flotilla accepts, as fleet did: services run
// on every driver, the others only under the systemd driver (see
// File.Drivers).
var unitTypes = []string{"service", "socket", "timer", "path", "mount", "automount", "swap", "target"}

// systemdUnitTypes are the unit types systemd knows that Flotilla does not
// schedule, past and present; they get a clearer error than an unknown
// suffix.
var systemdUnitTypes = []string{"busname", "device", "scope", "slice", "snapshot"}

// typeSuffix returns the ".type" suffix of name if it is one of unitTypes.
func typeSuffix(name string) (string, bool) {
	dot := strings.LastIndexByte(name, '.')
	if dot < 0 || !slices.Contains(unitTypes, name[dot+1:]) {
		return "", false
	}
	return name[dot:], true
}

// TypeOf returns the unit type of a valid unit name, its suffix without the
// dot ("web@1.timer" -> "timer"), or "" for an invalid name.
func TypeOf(name string) string {
	if nameProblem(name) != "" {
		return ""
	}
	suffix, _ := typeSuffix(name)
	return suffix[1:]
}

// nameChar reports whether c may appear in a unit name's prefix or instance.
func nameChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == ':' || c == '_' || c == '.' || c == '-' || c == '\\'
}

// ValidateName reports whether name is a valid name for a Flotilla unit:
// "prefix.type", a template "prefix@.type" or an instance
// "prefix@instance.type", where type is one of service, socket, timer, path,
// mount, automount, swap or target, at most MaxNameLength bytes, where prefix and
// instance use only letters, digits and ":_.-\". The error, an *Error with
// Field "name", names the bad name and what is wrong with it.
func ValidateName(name string) error {
	if msg := nameProblem(name); msg != "" {
		return &Error{Field: "name", Msg: msg}
	}
	return nil
}

// nameProblem returns what is wrong with a unit name, or "" if it is valid.
func nameProblem(name string) string {
	bad := func(format string, args ...any) string {
		return "invalid unit name " + quote(name) + ": " + fmt.Sprintf(format, args...)
	}
	switch {
	case name == "":
		return "unit name is empty"
	case len(name) > MaxNameLength:
		return bad("%d bytes long; the maximum is %d", len(name), MaxNameLength)
	case strings.Contains(name, "/"):
		return bad(`must not contain "/"`)
	}
	dot := strings.LastIndexByte(name, '.')
	if dot < 0 {
		return bad("missing a unit type suffix such as %q", serviceSuffix)
	}
	suffix := name[dot:]
	if _, ok := typeSuffix(name); !ok {
		if slices.Contains(systemdUnitTypes, suffix[1:]) {
			return bad("unit type %q is not supported: Flotilla schedules %s units", suffix, typeList())
		}
		if slices.Contains(unitTypes, strings.ToLower(suffix[1:])) {
			return bad("the suffix must be %q, in lower case", strings.ToLower(suffix))
		}
		return bad("unknown unit type %q: unit names end in one of %s", suffix, typeList())
	}
	base := name[:dot]
	prefix, instance, templated := strings.Cut(base, "@")
	if prefix == "" {
		if templated {
			return bad(`must not start with "@"`)
		}
		return bad("empty name before %q", suffix)
	}
	if strings.Contains(instance, "@") {
		return bad(`more than one "@"`)
	}
	if i, r, found := badNameChar(base, true); found {
		return bad(`character %q at offset %d is not allowed (use letters, digits, ":", "_", ".", "-" or "\")`, r, i)
	}
	return ""
}

// badNameChar returns the first character of s that may not appear in a unit
// name, and its byte offset. "@" is allowed when at is set.
func badNameChar(s string, at bool) (int, rune, bool) {
	for i, r := range s {
		if r >= utf8.RuneSelf || !nameChar(byte(r)) && !(at && r == '@') {
			return i, r, true
		}
	}
	return 0, 0, false
}

// splitName returns the parts of a valid unit name; ok is false for an
// invalid one.
func splitName(name string) (prefix, instance string, templated, ok bool) {
	if nameProblem(name) != "" {
		return "", "", false, false
	}
	suffix, _ := typeSuffix(name)
	prefix, instance, templated = strings.Cut(strings.TrimSuffix(name, suffix), "@")
	return prefix, instance, templated, true
}

// typeList returns the accepted suffixes for messages: ".service", ".socket", ….
func typeList() string {
	var b strings.Builder
	for i, t := range unitTypes {
		switch {
		case i == len(unitTypes)-1:
			b.WriteString(" or ")
		case i > 0:
			b.WriteString(", ")
		}
		b.WriteString(`".` + t + `"`)
	}
	return b.String()
}

// IsTemplate reports whether name is a valid template unit name, "prefix@.service"
// (or of another unit type, "prefix@.timer").
func IsTemplate(name string) bool {
	_, instance, templated, ok := splitName(name)
	return ok && templated && instance == ""
}

// IsInstance reports whether name is a valid instance unit name,
// "prefix@instance.service".
func IsInstance(name string) bool {
	_, instance, _, ok := splitName(name)
	return ok && instance != ""
}

// TemplateOf returns the template an instance unit is made from
// ("web@1.service" -> "web@.service"), or "" if name is not a valid instance
// name.
func TemplateOf(name string) string {
	prefix, instance, _, ok := splitName(name)
	if !ok || instance == "" {
		return ""
	}
	suffix, _ := typeSuffix(name)
	return prefix + "@" + suffix
}

// Prefix returns the part of a valid unit name before the "@" or the suffix
// ("web@1.service" -> "web", "db.service" -> "db"), or "" for an invalid name.
func Prefix(name string) string {
	prefix, _, _, _ := splitName(name)
	return prefix
}

// Instance returns the instance of a valid instance unit name
// ("web@1.service" -> "1"), or "" for any other name.
func Instance(name string) string {
	_, instance, _, _ := splitName(name)
	return instance
}

// validInstance reports why s cannot be the instance part of a unit name, or
// returns nil.
func validInstance(s string) error {
	if s == "" {
		return &Error{Field: "instance", Msg: "instance name is empty"}
	}
	if i, r, found := badNameChar(s, false); found {
		return &Error{Field: "instance", Msg: fmt.Sprintf(`invalid instance name %s: character %q at offset %d is not allowed (use letters, digits, ":", "_", ".", "-" or "\")`, quote(s), r, i)}
	}
	return nil
}
