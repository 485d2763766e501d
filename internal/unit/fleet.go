package unit

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
)

// maxFleetValues bounds the values of one [X-Fleet] list option, which fleet
// units use by the handful, so that checking them stays cheap.
const maxFleetValues = 256

// fleetOption applies an option of [X-Fleet].
func (p *parser) fleetOption(o option) error {
	if canon, ok := deprecatedFleetOptions[o.name]; ok {
		p.warnf(o, "deprecated spelling; use %s= instead", canon)
		o.name = canon
	} else if !knownOption(sectionFleet, o.name) {
		return p.unknownFleetOption(o)
	}
	f := &p.f.Fleet
	words, err := splitWords(o.value)
	if err != nil {
		return p.valueError(o, err)
	}
	values := make([]string, len(words))
	for i, w := range words {
		values[i] = p.expandSpecifiers(w.text)
	}
	canon := quoteAll(values)

	var list *[]string // for the options that take a list
	switch o.name {
	case "MachineID", "Role", "Placement":
		if len(values) > 1 {
			return p.errorf(o, "takes one value, not %d", len(values))
		}
		v := strings.Join(values, "")
		switch o.name {
		case "MachineID":
			f.MachineID = v
		case "Role":
			f.Role = v
		case "Placement":
			if v != "" && v != PlacementSpread && v != PlacementBinpack {
				return p.errorf(o, "invalid placement %s (want %s or %s, or empty for the cluster's default)",
					quote(v), PlacementSpread, PlacementBinpack)
			}
			f.Placement = v
		}
	case "Global", "Singleton":
		target := &f.Global
		if o.name == "Singleton" {
			target = &f.Singleton
		}
		*target, canon = false, ""
		if o.value != "" {
			b, err := parseBool(o.value)
			if err != nil {
				return p.valueError(o, err)
			}
			*target, canon = b, strconv.FormatBool(b)
		}
	case "LostAfter":
		f.LostAfter, canon = 0, ""
		if o.value != "" {
			d, err := parseDuration(o.value)
			if err != nil {
				return p.valueError(o, err)
			}
			if d <= 0 {
				return p.errorf(o, "must be a positive time span or infinity, not %s", quote(o.value))
			}
			f.LostAfter, canon = d, o.value
		}
	case "LogMaxSize":
		f.LogMaxSize, canon = 0, ""
		if o.value != "" {
			n, err := parseBytes(o.value)
			if err != nil {
				return p.valueError(o, err)
			}
			if n < MinLogMaxSize {
				return p.errorf(o, "must be at least 1K (%d bytes), not %s", MinLogMaxSize, quote(o.value))
			}
			f.LogMaxSize, canon = n, strconv.FormatInt(n, 10)
		}
	case "LogMaxFiles":
		f.LogMaxFiles, canon = nil, ""
		if o.value != "" {
			n, err := strconv.Atoi(strings.TrimSpace(o.value))
			if err != nil || n < 0 || n > MaxLogMaxFiles {
				return p.errorf(o, "must be a whole number from 0 to %d (rotated log files kept), not %s", MaxLogMaxFiles, quote(o.value))
			}
			f.LogMaxFiles, canon = &n, strconv.Itoa(n)
		}
	case "MachineOf", "Replaces":
		for _, v := range values {
			if !p.expand && strings.Contains(v, "%") {
				continue // a template's specifiers are checked in its instances
			}
			if msg := nameProblem(v); msg != "" {
				return p.errorf(o, "%s", msg)
			}
		}
		list = &f.MachineOf
		if o.name == "Replaces" {
			list = &f.Replaces
		}
	case "Conflicts":
		for _, v := range values {
			if _, err := path.Match(v, ""); err != nil {
				return p.errorf(o, "invalid pattern %s: %v", quote(v), err)
			}
		}
		list = &f.Conflicts
	case "MachineMetadata":
		for _, v := range values {
			if _, _, err := splitMetadata(v); err != nil {
				return p.valueError(o, err)
			}
		}
		list = &f.MachineMetadata
	}
	if list != nil {
		if o.value == "" {
			*list = nil // an empty assignment resets the list
		}
		for _, v := range values {
			if !slices.Contains(*list, v) {
				*list = append(*list, v)
			}
		}
		if len(*list) > maxFleetValues {
			return p.errorf(o, "too many values; the limit is %d per option", maxFleetValues)
		}
	}
	p.keep(o, canon)
	return nil
}

// unknownFleetOption returns the error for an option [X-Fleet] does not have.
func (p *parser) unknownFleetOption(o option) error {
	if o.name == "X-ConditionMachineBootID" {
		return p.errorf(o, "no longer supported: a boot ID changes at every boot; use MachineID=")
	}
	if s := otherSection(o.section, o.name); s != "" {
		return p.errorf(o, "unknown option in [X-Fleet]; %s= belongs in [%s]", o.name, s)
	}
	candidates := slices.Clone(fleetOptions)
	for old := range deprecatedFleetOptions {
		candidates = append(candidates, old)
	}
	slices.Sort(candidates)
	if s := closest(o.name, candidates); s != "" {
		if canon, ok := deprecatedFleetOptions[s]; ok {
			s = canon
		}
		return p.errorf(o, "unknown option in [X-Fleet]; did you mean %s=?", s)
	}
	return p.errorf(o, "unknown option in [X-Fleet] (want one of %s=)", strings.Join(fleetOptions, "=, "))
}

// quoteAll joins Go-quoted values, the canonical form of a list of words.
func quoteAll(values []string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, " ")
}

// expandSpecifiers expands fleet's specifiers in an [X-Fleet] value from the
// unit's name: %n the full name ("web@1.service"), %N the name without its
// suffix ("web@1"), %p the prefix ("web"), %i the instance ("1") and %% a
// "%". Other specifiers are kept. A template's values are kept whole.
func (p *parser) expandSpecifiers(s string) string {
	if !p.expand || !strings.Contains(s, "%") {
		return s
	}
	name := p.f.Name
	prefix, instance, _, _ := splitName(name)
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case 'n':
			b.WriteString(name)
		case 'N':
			suffix, _ := typeSuffix(name)
			b.WriteString(strings.TrimSuffix(name, suffix))
		case 'p':
			b.WriteString(prefix)
		case 'i':
			b.WriteString(instance)
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// fleetConflicts are the pairs of [X-Fleet] options that cannot be used
// together, as in fleet.
var fleetConflicts = [][2]string{
	{"MachineID", "MachineOf"},
	{"MachineID", "Conflicts"},
	{"MachineID", "Global"},
	{"MachineID", "Replaces"},
	{"Global", "MachineOf"},
	{"Global", "Replaces"},
	{"Global", "Singleton"},
	{"Global", "LostAfter"},
	{"Conflicts", "Replaces"},
}

// checkFleet rejects [X-Fleet] options that cannot be satisfied together.
func (p *parser) checkFleet() error {
	f := &p.f.Fleet
	set := map[string]bool{
		"MachineID": f.MachineID != "",
		"MachineOf": len(f.MachineOf) > 0,
		"Conflicts": len(f.Conflicts) > 0,
		"Global":    f.Global,
		"Replaces":  len(f.Replaces) > 0,
		"Singleton": f.Singleton,
		"LostAfter": f.LostAfter != 0,
	}
	fleetErr := func(line int, format string, args ...any) error {
		return &Error{Unit: p.f.Name, Section: sectionFleet, Msg: linePrefix(line) + fmt.Sprintf(format, args...)}
	}
	for _, c := range fleetConflicts {
		if set[c[0]] && set[c[1]] {
			return fleetErr(max(p.lastLine[c[0]], p.lastLine[c[1]]), "%s= cannot be used with %s=", c[0], c[1])
		}
	}
	if !p.expand {
		return nil // patterns and names may still hold specifiers
	}
	for _, peer := range f.MachineOf {
		for _, c := range f.Conflicts {
			if ok, _ := path.Match(c, peer); ok {
				return fleetErr(p.lastLine["Conflicts"], "MachineOf=%s matches Conflicts=%s: the unit cannot both run next to it and avoid it", peer, c)
			}
		}
	}
	return nil
}

// splitMetadata splits a "key=value" machine metadata entry.
func splitMetadata(entry string) (key, value string, err error) {
	key, value, ok := strings.Cut(entry, "=")
	switch {
	case !ok:
		return "", "", fmt.Errorf("metadata %s is not a key=value pair", quote(entry))
	case key == "":
		return "", "", fmt.Errorf("metadata %s has an empty key", quote(entry))
	case value == "":
		return "", "", fmt.Errorf("metadata %s has an empty value", quote(entry))
	case strings.ContainsAny(key, " \t,"):
		return "", "", fmt.Errorf("metadata key %s may not contain spaces or commas", quote(key))
	case strings.ContainsAny(value, "=,"):
		return "", "", fmt.Errorf("metadata value %s may not contain \"=\" or \",\"", quote(value))
	}
	return key, value, nil
}

// ParseMetadata parses a machine's metadata as given to the daemon's
// --metadata flag: comma-separated key=value pairs ("region=us-east,disk=ssd"),
// with spaces around keys and values ignored. An empty string is no
// metadata. Empty entries, keys or values, a missing "=" and a key given
// twice are errors (*Error with Field "metadata").
func ParseMetadata(s string) (map[string]string, error) {
	md := make(map[string]string)
	if strings.TrimSpace(s) == "" {
		return md, nil
	}
	bad := func(format string, args ...any) error {
		return &Error{Field: "metadata", Msg: fmt.Sprintf(format, args...)}
	}
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			return nil, bad("empty entry %d in %s", i+1, quote(s))
		}
		key, value, ok := strings.Cut(entry, "=")
		if !ok {
			return nil, bad("%s is not a key=value pair", quote(entry))
		}
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		if _, _, err := splitMetadata(key + "=" + value); err != nil {
			return nil, bad("%v", err)
		}
		if old, dup := md[key]; dup {
			return nil, bad("duplicate key %s (%s=%s and %s=%s)", quote(key), key, old, key, value)
		}
		md[key] = value
	}
	return md, nil
}

// MetadataRequirements returns the machine metadata a unit requires, from its
// MachineMetadata= entries: for each key, the values a machine may have, in
// file order. A machine qualifies if, for every key, its value is one of
// those listed. It returns nil when the unit has no requirements.
func MetadataRequirements(f Fleet) map[string][]string {
	var req map[string][]string
	for _, entry := range f.MachineMetadata {
		key, value, err := splitMetadata(entry)
		if err != nil {
			continue // Parse rejects these
		}
		if req == nil {
			req = make(map[string][]string)
		}
		if !slices.Contains(req[key], value) {
			req[key] = append(req[key], value)
		}
	}
	return req
}
