package unit

import (
	"fmt"
	"path"
	"strconv"
	"strings"
)

// Container is a service's [X-Container] section: the unit runs as a
// container of Image under the docker driver instead of as a process. The
// [Service] options Environment=, EnvironmentFile=, User=,
// WorkingDirectory=, CPUQuota=, MemoryMax=, Restart= and the timeouts apply
// to the container; Exec*= lines do not exist for it (Command= replaces
// ExecStart=).
type Container struct {
	// Image is the image to run, "name[:tag]" or "name@digest".
	Image string
	// Command, when set, replaces the image's command (its CMD); split
	// with systemd's quoting rules, as ExecStart= is.
	Command []string
	// Ports publishes container ports on the host.
	Ports []Port
	// Volumes are bind mounts ("/host:/in/container") and named volumes
	// ("name:/in/container"), each read-write unless ReadOnly.
	Volumes []Volume
	// Network is "bridge" (Docker's default, when empty), "host", "none", or
	// the name of a Docker network.
	Network string
}

// Port is one Ports= entry: "[hostIP:]hostPort:containerPort[/proto]" or
// "containerPort[/proto]" (published on a port Docker picks).
type Port struct {
	HostIP        string
	HostPort      int // 0: Docker picks
	ContainerPort int
	Proto         string // tcp or udp
}

// Volume is one Volumes= entry: "source:target[:ro|rw]".
type Volume struct {
	Source   string // an absolute host path, or a volume name
	Target   string // an absolute path in the container
	ReadOnly bool
}

// containerOption applies an option of [X-Container].
func (p *parser) containerOption(o option) error {
	if !knownOption(sectionContainer, o.name) {
		return p.unknownOption(o)
	}
	if p.f.Container == nil {
		p.f.Container = &Container{}
	}
	c := p.f.Container
	words, err := splitWords(o.value)
	if err != nil {
		return p.valueError(o, err)
	}
	values := make([]string, len(words))
	for i, w := range words {
		values[i] = w.text
		if p.expand {
			values[i] = p.expandSpecifiers(w.text)
		}
	}
	switch o.name {
	case "Image":
		if len(values) != 1 {
			return p.errorf(o, "takes one image name, not %d words", len(values))
		}
		c.Image = values[0]
		if strings.ContainsAny(c.Image, " \t") || strings.HasPrefix(c.Image, "-") {
			return p.errorf(o, "invalid image name %s", quote(c.Image))
		}
	case "Command":
		c.Command = values
	case "Network":
		if len(values) > 1 {
			return p.errorf(o, "takes one network, not %d", len(values))
		}
		c.Network = strings.Join(values, "")
	case "Ports":
		if len(values) == 0 {
			c.Ports = nil
		}
		for _, v := range values {
			pt, err := parsePort(v)
			if err != nil {
				return p.valueError(o, err)
			}
			c.Ports = append(c.Ports, pt)
		}
	case "Volumes":
		if len(values) == 0 {
			c.Volumes = nil
		}
		for _, v := range values {
			vol, err := parseVolume(v)
			if err != nil {
				return p.valueError(o, err)
			}
			c.Volumes = append(c.Volumes, vol)
		}
	}
	p.keep(o, quoteAll(values))
	return nil
}

// parsePort parses one Ports= entry.
func parsePort(s string) (Port, error) {
	pt := Port{Proto: "tcp"}
	spec := s
	if base, proto, ok := strings.Cut(s, "/"); ok {
		if proto != "tcp" && proto != "udp" {
			return pt, fmt.Errorf("port %s: protocol %s (want tcp or udp)", quote(s), quote(proto))
		}
		spec, pt.Proto = base, proto
	}
	parts := strings.Split(spec, ":")
	if len(parts) > 1 && strings.HasPrefix(spec, "[") { // [::1]:8080:80
		end := strings.Index(spec, "]:")
		if end < 0 {
			return pt, fmt.Errorf("port %s: unclosed \"[\"", quote(s))
		}
		parts = append([]string{spec[1:end]}, strings.Split(spec[end+2:], ":")...)
	}
	num := func(v string, zero bool) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 65535 || n == 0 && !zero {
			return 0, fmt.Errorf("port %s: %s is not a port number (1 to 65535)", quote(s), quote(v))
		}
		return n, nil
	}
	var err error
	switch len(parts) {
	case 1:
		pt.ContainerPort, err = num(parts[0], false)
	case 2:
		if pt.HostPort, err = num(parts[0], true); err == nil {
			pt.ContainerPort, err = num(parts[1], false)
		}
	case 3:
		pt.HostIP = parts[0]
		if !isIP(pt.HostIP) {
			return pt, fmt.Errorf("port %s: %s is not an IP address", quote(s), quote(pt.HostIP))
		}
		if pt.HostPort, err = num(parts[1], true); err == nil {
			pt.ContainerPort, err = num(parts[2], false)
		}
	default:
		return pt, fmt.Errorf("port %s: want [hostIP:]hostPort:containerPort[/tcp|udp] or containerPort[/tcp|udp]", quote(s))
	}
	return pt, err
}

// parseVolume parses one Volumes= entry.
func parseVolume(s string) (Volume, error) {
	parts := strings.Split(s, ":")
	var v Volume
	switch len(parts) {
	case 3:
		switch parts[2] {
		case "ro":
			v.ReadOnly = true
		case "rw":
		default:
			return v, fmt.Errorf("volume %s: mode %s (want ro or rw)", quote(s), quote(parts[2]))
		}
	case 2:
	default:
		return v, fmt.Errorf("volume %s: want source:target[:ro|rw]", quote(s))
	}
	v.Source, v.Target = parts[0], parts[1]
	if v.Source == "" || !path.IsAbs(v.Target) {
		return v, fmt.Errorf("volume %s: want a host path or volume name, then an absolute path in the container", quote(s))
	}
	if strings.HasPrefix(v.Source, ".") {
		return v, fmt.Errorf("volume %s: a host path must be absolute", quote(s))
	}
	return v, nil
}

// checkContainer checks a service with an [X-Container] section as a whole:
// it names an image and has no Exec*= lines (which would run on the host,
// not in the container).
func (p *parser) checkContainer() error {
	c := p.f.Container
	if c.Image == "" {
		return &Error{Unit: p.f.Name, Section: sectionContainer, Option: "Image", Msg: "missing; a container unit names the image it runs"}
	}
	s := &p.f.Service
	for _, name := range []string{"ExecStartPre", "ExecStart", "ExecStartPost", "ExecStop", "ExecStopPost"} {
		if line, ok := p.lastLine[name]; ok {
			return &Error{Unit: p.f.Name, Section: sectionService, Option: name, Msg: linePrefix(line) + "not used for a container unit: the container runs its image's command, or [X-Container] Command="}
		}
	}
	switch s.Type {
	case "", "simple", "exec":
	default:
		return &Error{Unit: p.f.Name, Section: sectionService, Option: "Type", Msg: linePrefix(p.lastLine["Type"]) + fmt.Sprintf("Type=%s is not supported for a container unit (it runs as Type=simple)", s.Type)}
	}
	return nil
}

// isIP reports whether s looks like an IPv4 or IPv6 address. It is not
// net.ParseIP because this package stays free of the network packages
// (see the scheduler's dependency test); Docker checks the address fully.
func isIP(s string) bool {
	if strings.Contains(s, ":") {
		return strings.Count(s, ":") >= 2 && strings.Trim(s, "0123456789abcdefABCDEF:.") == ""
	}
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return false
	}
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 255 || len(p) > 3 {
			return false
		}
	}
	return true
}
