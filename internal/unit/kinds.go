package unit

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	sdunit "github.com/coreos/go-systemd/v22/unit"
)

// This file holds the unit types other than plain services (sockets,
// timers, paths, mounts, automounts, swaps, targets) and containers, and
// which drivers can run what.

// DriverSet is a set of drivers: those that can run a unit (File.Drivers),
// or those a machine runs.
type DriverSet uint8

// The drivers. DriverSim, the benchmarks' simulated driver, pretends to run
// every unit.
const (
	DriverExec DriverSet = 1 << iota
	DriverSystemd
	DriverDocker
	DriverSim
)

// driverNames are the drivers' names, in bit order.
var driverNames = []string{"exec", "systemd", "docker", "sim"}

// ParseDrivers parses a comma-separated list of driver names ("exec,docker").
func ParseDrivers(s string) (DriverSet, error) {
	var set DriverSet
	for name := range strings.SplitSeq(s, ",") {
		name = strings.TrimSpace(name)
		i := slices.Index(driverNames, name)
		if i < 0 {
			return 0, &Error{Field: "driver", Msg: fmt.Sprintf("unknown driver %s (want %s)", quote(name), strings.Join(driverNames, ", "))}
		}
		if set&(1<<i) != 0 {
			return 0, &Error{Field: "driver", Msg: fmt.Sprintf("driver %s named twice", quote(name))}
		}
		set |= 1 << i
	}
	return set, nil
}

// DriversFromNames is the set of the named drivers, ignoring unknown names
// (a newer daemon's driver, as an older engine reads it).
func DriversFromNames(names []string) DriverSet {
	var set DriverSet
	for _, n := range names {
		if i := slices.Index(driverNames, n); i >= 0 {
			set |= 1 << i
		}
	}
	return set
}

// Names returns the names of the drivers in the set, in a fixed order.
func (s DriverSet) Names() []string {
	var names []string
	for i, n := range driverNames {
		if s&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	return names
}

// MarshalJSON encodes the set as the list of its names.
func (s DriverSet) MarshalJSON() ([]byte, error) { return json.Marshal(s.Names()) }

// UnmarshalJSON decodes a list of names, ignoring unknown ones.
func (s *DriverSet) UnmarshalJSON(b []byte) error {
	var names []string
	if err := json.Unmarshal(b, &names); err != nil {
		return err
	}
	*s = DriversFromNames(names)
	return nil
}

// String returns the names joined by ",", as --driver takes them.
func (s DriverSet) String() string { return strings.Join(s.Names(), ",") }

// Runs reports whether a machine running the drivers in s can run a unit
// that needs one of the drivers in unit. A machine that names no driver
// (its daemon predates drivers in machine records) runs exec.
func (s DriverSet) Runs(unit DriverSet) bool {
	if s == 0 {
		s = DriverExec
	}
	return s&DriverSim != 0 || s&unit != 0
}

// Drivers returns the drivers that can run the unit: containers run only
// under docker; services that the exec driver supervises itself under exec
// or systemd; Type=forking services and every other unit type only under
// systemd, which they are written for.
func (f *File) Drivers() DriverSet {
	switch {
	case f.Container != nil:
		return DriverDocker
	case TypeOf(f.Name) != "service", f.Service.Type == "forking",
		len(f.Service.ExecStart) == 0 && len(f.Service.ExecStop) == 0:
		// The last: a service of [Unit] SuccessAction= alone.
		return DriverSystemd
	}
	return DriverExec | DriverSystemd
}

// DriversReason says in words which machines can run the unit named name
// that needs one of the drivers in set, and why, for the scheduler's
// reasons: "machines with the systemd driver (.timer units run under
// systemd)".
func DriversReason(name string, set DriverSet) string {
	typ := TypeOf(name)
	switch {
	case set == DriverDocker:
		return "a machine with the docker driver (the unit has an [X-Container] section)"
	case set == DriverSystemd && typ != "service":
		return "a machine with the systemd driver (." + typ + " units run under systemd)"
	case set == DriverSystemd:
		return "a machine with the systemd driver (Type=forking services run under systemd)"
	}
	return "a machine with the " + strings.Join(set.Names(), " or ") + " driver"
}

// specifierRE matches a specifier such as %i.
var specifierRE = regexp.MustCompile(`%.`)

// typeSections maps each unit type to the section of its own options.
var typeSections = map[string]string{
	"service": sectionService, "socket": sectionSocket, "timer": sectionTimer,
	"path": sectionPath, "mount": sectionMount, "automount": sectionAutomount,
	"swap": sectionSwap, "target": "",
}

// checkSection refuses a section that does not belong in the unit's type:
// [Timer] in a .service, [Service] in a .timer, [X-Container] outside a
// service.
func (p *parser) checkSection(o option) error {
	switch o.section {
	case sectionUnit, sectionInstall, sectionFleet:
		return nil
	}
	typ := TypeOf(p.f.Name)
	own := typeSections[typ]
	if o.section == own || (o.section == sectionContainer || o.section == sectionCheck || o.section == sectionUpdate) && typ == "service" {
		return nil
	}
	if own == "" {
		return p.errorf(o, "a .%s unit has no [%s] section (only [Unit], [Install] and [X-Fleet])", typ, o.section)
	}
	return p.errorf(o, "a .%s unit has no [%s] section; its options go in [%s]", typ, o.section, own)
}

// typeOption validates an option of [Socket], [Timer], [Path], [Mount],
// [Automount] or [Swap]: its name, and the values that decide where the
// unit is placed or that systemd would refuse.
func (p *parser) typeOption(o option) error {
	v := o.value
	switch o.section + "." + o.name {
	case "Timer.Unit", "Path.Unit", "Socket.Service":
		if v == "" {
			p.f.Triggers = ""
			return nil
		}
		v = p.expandSpecifiers(v)
		check := v
		if !p.expand {
			// A template keeps its specifiers ("web@%i.service") until
			// it is instantiated; check the name with them filled in.
			check = specifierRE.ReplaceAllString(v, "x")
		}
		if err := ValidateName(check); err != nil {
			return p.valueError(o, err)
		}
		if v == p.f.Name {
			return p.errorf(o, "a unit cannot trigger itself")
		}
		p.f.Triggers = v
	case "Socket.Accept":
		b, err := parseBool(v)
		if err != nil {
			return p.valueError(o, err)
		}
		p.accept = b
	case "Timer.OnActiveSec", "Timer.OnBootSec", "Timer.OnStartupSec", "Timer.OnUnitActiveSec",
		"Timer.OnUnitInactiveSec", "Timer.AccuracySec", "Timer.RandomizedDelaySec", "Timer.RandomizedOffsetSec":
		for _, w := range strings.Fields(v) {
			if _, err := parseDuration(w); err != nil {
				return p.valueError(o, err)
			}
		}
	case "Timer.Persistent", "Timer.WakeSystem", "Timer.RemainAfterElapse", "Timer.FixedRandomDelay",
		"Timer.OnClockChange", "Timer.OnTimezoneChange", "Path.MakeDirectory", "Mount.LazyUnmount",
		"Mount.ForceUnmount", "Mount.SloppyOptions", "Mount.ReadWriteOnly":
		if v != "" {
			if _, err := parseBool(v); err != nil {
				return p.valueError(o, err)
			}
		}
	case "Mount.Where", "Automount.Where":
		if !path.IsAbs(v) {
			return p.errorf(o, "%s is not an absolute path", quote(v))
		}
		p.where = v
	case "Mount.What", "Swap.What":
		if v == "" {
			return p.errorf(o, "empty; name the device or file to %s", map[string]string{"Mount": "mount", "Swap": "swap on"}[o.section])
		}
		p.what = true
	}
	if isTrigger(o.section, o.name) {
		p.triggers++
	}
	return nil
}

// isTrigger reports whether an option is one that makes a socket, timer or
// path unit do anything: systemd refuses such a unit without one.
func isTrigger(section, name string) bool {
	switch section {
	case sectionSocket:
		return strings.HasPrefix(name, "Listen")
	case sectionTimer:
		return strings.HasPrefix(name, "On") && name != "OnClockChange" && name != "OnTimezoneChange"
	case sectionPath:
		return strings.HasPrefix(name, "Path") || name == "DirectoryNotEmpty"
	}
	return false
}

// checkType applies what a unit's type needs of the whole file: services
// their ExecStart= (or their container), sockets, timers and paths a
// trigger, mounts What= and a Where= that matches their name.
func (p *parser) checkType() error {
	typ := TypeOf(p.f.Name)
	whole := func(format string, args ...any) error {
		return &Error{Unit: p.f.Name, Section: typeSections[typ], Msg: fmt.Sprintf(format, args...)}
	}
	switch typ {
	case "service":
		if err := p.checkChecks(); err != nil {
			return err
		}
		if err := p.checkUpdate(); err != nil {
			return err
		}
		if p.f.Container != nil {
			return p.checkContainer()
		}
		return p.checkExecStart()
	case "socket", "timer", "path":
		if p.triggers == 0 {
			return whole("a .%s unit needs at least one of %s", typ, map[string]string{
				"socket": "ListenStream=, ListenDatagram=, ListenSequentialPacket=, ListenFIFO=, ListenSpecial=, ListenNetlink=, ListenMessageQueue= or ListenUSBFunction=",
				"timer":  "OnCalendar=, OnActiveSec=, OnBootSec=, OnStartupSec=, OnUnitActiveSec= or OnUnitInactiveSec=",
				"path":   "PathExists=, PathExistsGlob=, PathChanged=, PathModified= or DirectoryNotEmpty=",
			}[typ])
		}
		if p.f.Triggers == "" && !(typ == "socket" && p.accept) {
			// systemd's default: the service (or, for a timer or path,
			// the unit) of the same name.
			suffix, _ := typeSuffix(p.f.Name)
			p.f.Triggers = strings.TrimSuffix(p.f.Name, suffix) + serviceSuffix
		}
		if typ == "socket" && p.accept && p.f.Triggers == "" {
			// Accept=yes starts an instance of "prefix@.service" per
			// connection; the template must be on the machine.
			p.f.Triggers = Prefix(p.f.Name) + "@" + serviceSuffix
		}
	case "mount", "automount":
		if p.where == "" {
			return whole("a .%s unit needs Where=", typ)
		}
		if typ == "mount" && !p.what {
			return whole("a .mount unit needs What=")
		}
		if !IsTemplate(p.f.Name) {
			want := sdunit.UnitNamePathEscape(path.Clean(p.where)) + "." + typ
			if want != p.f.Name {
				return whole("Where=%s means the unit must be named %s (systemd names mount units after their mount point)", p.where, quote(want))
			}
		}
	case "swap":
		if !p.what {
			return whole("a .swap unit needs What=")
		}
	}
	return nil
}

// colocate makes a socket, timer or path unit run where the unit it
// triggers is scheduled, as if it said MachineOf= that unit: systemd can
// only activate a unit on its own machine. A unit that names its machine or
// is global is left as written.
func (p *parser) colocate() {
	f := &p.f.Fleet
	t := p.f.Triggers
	if t == "" || !p.expand || f.MachineID != "" || f.Global || slices.Contains(f.MachineOf, t) || IsTemplate(t) {
		return
	}
	f.MachineOf = append(f.MachineOf, t)
}
