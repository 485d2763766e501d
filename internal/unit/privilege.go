package unit

import (
	"fmt"
	"path/filepath"
	"strings"

	sdunit "github.com/coreos/go-systemd/v22/unit"
)

// RootNeeds returns why the processes of f would run as root or get
// root's powers back, one reason per option, each naming the option: a
// service (or a socket with commands) without User= or with User=root,
// Group=root, SupplementaryGroups=, the "+", "!" and "!!" command prefixes,
// AmbientCapabilities=, PermissionsStartOnly=, a .mount, .automount or
// .swap unit (systemd acts on those as root), [X-Container] Network=host
// and Volumes= of a host path. It returns nil for a file that needs none
// of that. The API refuses such a file from a token that may not run
// units as root (docs/security.md).
//
// User= is checked against the token's list of users separately; a User=
// with a specifier (%i) is not root here, and is not in any list.
func RootNeeds(f *File) []string {
	var out []string
	switch TypeOf(f.Name) {
	case "mount", "automount", "swap":
		return []string{fmt.Sprintf("a .%s unit is carried out by systemd as root", TypeOf(f.Name))}
	}
	// f parsed, so its text does too.
	opts, _ := sdunit.DeserializeOptions(strings.NewReader(strings.ReplaceAll(f.Raw, "\r\n", "\n")))
	hasExec := false
	for _, o := range opts {
		if o.Section != sectionService && o.Section != sectionSocket {
			continue
		}
		v := strings.TrimSpace(joinContinuations(o.Value))
		name := "[" + o.Section + "] " + o.Name + "="
		switch {
		case strings.HasPrefix(o.Name, "Exec"):
			hasExec = hasExec || v != ""
			if p := privilegedPrefix(v); p != "" {
				out = append(out, fmt.Sprintf("%s%s...: the %q prefix runs the command with full privileges", name, p, p))
			}
		case o.Name == "AmbientCapabilities" && v != "" && v != "~":
			out = append(out, name+v+" gives the processes capabilities")
		case o.Name == "PermissionsStartOnly" && isTrue(v):
			out = append(out, name+v+" runs the other commands as root")
		case o.Name == "SupplementaryGroups" && v != "":
			out = append(out, name+v+" adds groups the token does not choose")
		case o.Name == "Group" && isRoot(v):
			out = append(out, name+v+" runs the processes in group root")
		}
	}
	runs := TypeOf(f.Name) == "service" || hasExec
	switch u := f.Service.User; {
	case runs && u == "":
		out = append(out, "[Service] User= is not set, so the unit would run as root")
	case runs && isRoot(u):
		out = append(out, "[Service] User="+u+" is root")
	}
	if c := f.Container; c != nil {
		if c.Network == "host" {
			out = append(out, "[X-Container] Network=host shares the host's network namespace")
		}
		for _, v := range c.Volumes {
			if filepath.IsAbs(v.Source) {
				out = append(out, fmt.Sprintf("[X-Container] Volumes=%s:%s mounts a path of the host", v.Source, v.Target))
			}
		}
	}
	return out
}

func isRoot(name string) bool { return name == "root" || name == "0" }

func isTrue(v string) bool {
	b, _ := parseBool(v)
	return b
}

// privilegedPrefix returns the first "+", "!" or "!!" prefix of any
// command of an Exec*= value, or "".
func privilegedPrefix(v string) string {
	words, err := splitWords(v)
	if err != nil {
		return ""
	}
	first := true
	for _, w := range words {
		if w.raw == ";" {
			first = true
			continue
		}
		if !first {
			continue
		}
		first = false
		prog := strings.TrimLeft(w.text, "-@:")
		switch {
		case strings.HasPrefix(prog, "!!"):
			return "!!"
		case strings.HasPrefix(prog, "+"), strings.HasPrefix(prog, "!"):
			return prog[:1]
		}
	}
	return ""
}
