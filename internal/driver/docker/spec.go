package docker

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"

	"github.com/flotilla/flotilla/internal/driver/service"
	"github.com/flotilla/flotilla/internal/unit"
)

// The labels the driver puts on every container it creates. A driver adopts
// the containers that carry its machine's LabelMachine.
const (
	// LabelMachine is the ID of the machine whose driver made the container.
	LabelMachine = "io.flotilla.machine"
	// LabelUnit is the unit's name.
	LabelUnit = "io.flotilla.unit"
	// LabelHash is the hash of the unit file the container was made from.
	LabelHash = "io.flotilla.hash"
	// LabelFile is that unit file's text, from which a driver that adopts
	// the container rebuilds the unit.
	LabelFile = "io.flotilla.file"
)

// containerLogMaxSize and containerLogMaxFiles bound the engine's own copy of
// a container's output (its "local" log driver): the driver copies the
// output to the unit's log as it comes, so the engine's copy only bridges the
// time the daemon is away.
const (
	containerLogMaxSize  = "8m"
	containerLogMaxFiles = "2"
)

// checkFile rejects what the driver cannot run, at Load.
func checkFile(f *unit.File) error {
	if err := service.CheckName(f.Name); err != nil {
		return err
	}
	if f.Container == nil {
		return errors.New("not a container unit: it has no [X-Container] section (the docker driver runs only those)")
	}
	if f.Container.Image == "" {
		return errors.New("[X-Container] Image= is missing")
	}
	switch f.Service.Restart {
	case "", "no", "always", "on-success", "on-failure", "on-abnormal", "on-abort", "on-watchdog":
	default:
		return fmt.Errorf("unknown Restart=%s", f.Service.Restart)
	}
	if _, err := service.ParseSignal(f.Service.KillSignal); err != nil {
		return fmt.Errorf("KillSignal=: %w", err)
	}
	if wd := workingDir(f.Service.WorkingDirectory); wd != "" && !path.IsAbs(wd) {
		return fmt.Errorf("WorkingDirectory=%s: a container's working directory must be an absolute path", f.Service.WorkingDirectory)
	}
	return nil
}

// workingDir is WorkingDirectory= without systemd's "-" prefix (a missing
// directory is no error: Docker creates it).
func workingDir(wd string) string { return strings.TrimPrefix(wd, "-") }

var nameUnsafe = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// containerName is the container's name: readable, and unique per machine
// and unit, so that two machines' drivers on one engine never collide and a
// unit never has two containers.
func containerName(machine, name string) string {
	sum := sha256.Sum256([]byte(machine + "\x00" + name))
	base := nameUnsafe.ReplaceAllString(name, "_")
	if len(base) > 100 {
		base = base[:100]
	}
	return "flotilla-" + base + "-" + hex.EncodeToString(sum[:5])
}

// killSignal is KillSignal= as the engine takes it: "SIGTERM", or a number
// for a signal without a name. The value was checked at Load.
func killSignal(svc *unit.Service) string {
	sig, _ := service.ParseSignal(svc.KillSignal)
	name := service.SignalName(sig)
	if _, err := strconv.Atoi(name); err == nil {
		return name
	}
	return "SIG" + name
}

// stopTimeout is TimeoutStopSec= in whole seconds for the engine, rounded
// up; -1 (wait for ever) for unit.Infinity or none.
func stopTimeout(d time.Duration) int {
	if d <= 0 || d >= unit.Infinity {
		return -1
	}
	return int(math.Ceil(d.Seconds()))
}

// spec is what ContainerCreate is given for a unit.
type spec struct {
	Config *container.Config
	Host   *container.HostConfig
}

// containerSpec maps a unit onto a container: [X-Container] and the
// [Service] options that apply to it. env is the unit's environment
// (Environment= and EnvironmentFile=, read at start); labels are added to
// the driver's own.
func containerSpec(machine string, f *unit.File, env []string, labels map[string]string) (*spec, error) {
	c, svc := f.Container, &f.Service
	if _, err := service.ParseSignal(svc.KillSignal); err != nil {
		return nil, fmt.Errorf("KillSignal=: %w", err)
	}
	timeout := stopTimeout(svc.TimeoutStopSec)
	cfg := &container.Config{
		Image:       c.Image,
		Cmd:         c.Command,
		Env:         env,
		WorkingDir:  workingDir(svc.WorkingDirectory),
		StopSignal:  killSignal(svc),
		StopTimeout: &timeout,
		Labels: map[string]string{
			LabelMachine: machine,
			LabelUnit:    f.Name,
			LabelHash:    f.Hash,
			LabelFile:    f.Raw,
		},
	}
	for k, v := range labels {
		if _, ours := cfg.Labels[k]; !ours {
			cfg.Labels[k] = v
		}
	}
	switch {
	case svc.User != "" && svc.Group != "":
		cfg.User = svc.User + ":" + svc.Group
	case svc.User != "":
		cfg.User = svc.User
	case svc.Group != "":
		return nil, errors.New("Group= without User= cannot be given to a container")
	}
	host := &container.HostConfig{
		NetworkMode:   container.NetworkMode(c.Network),
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		LogConfig:     container.LogConfig{Type: "local", Config: map[string]string{"max-size": containerLogMaxSize, "max-file": containerLogMaxFiles}},
	}
	if svc.CPUQuotaPercent > 0 {
		// CPUQuota=200% is 200ms of CPU time every 100ms, as systemd sets
		// cpu.max.
		host.CPUPeriod = 100_000
		host.CPUQuota = int64(svc.CPUQuotaPercent) * 1000
	}
	if svc.MemoryMax > 0 {
		// MemoryMax= is a hard limit: no swap beyond it.
		host.Memory = svc.MemoryMax
		host.MemorySwap = svc.MemoryMax
	}
	for _, v := range c.Volumes {
		b := v.Source + ":" + v.Target
		if v.ReadOnly {
			b += ":ro"
		}
		host.Binds = append(host.Binds, b)
	}
	for _, p := range c.Ports {
		port, err := network.ParsePort(strconv.Itoa(p.ContainerPort) + "/" + p.Proto)
		if err != nil {
			return nil, fmt.Errorf("Ports=: %w", err)
		}
		if cfg.ExposedPorts == nil {
			cfg.ExposedPorts = network.PortSet{}
			host.PortBindings = network.PortMap{}
		}
		cfg.ExposedPorts[port] = struct{}{}
		b := network.PortBinding{}
		if p.HostPort != 0 {
			b.HostPort = strconv.Itoa(p.HostPort)
		}
		if p.HostIP != "" {
			if b.HostIP, err = netip.ParseAddr(p.HostIP); err != nil {
				return nil, fmt.Errorf("Ports=: %w", err)
			}
		}
		host.PortBindings[port] = append(host.PortBindings[port], b)
	}
	return &spec{Config: cfg, Host: host}, nil
}

// checkVolumes refuses host paths of c's Volumes= that would show a
// container one of hidden: the path itself, one inside it, or a directory
// that holds it. Symbolic links in the source are followed.
func checkVolumes(c *unit.Container, hidden []string) error {
	if c == nil {
		return nil
	}
	for _, v := range c.Volumes {
		if !filepath.IsAbs(v.Source) {
			continue // a named volume
		}
		src := filepath.Clean(v.Source)
		if r, err := filepath.EvalSymlinks(src); err == nil {
			src = r
		}
		for _, h := range hidden {
			if service.Within(src, h) || service.Within(h, src) {
				return fmt.Errorf("[X-Container] Volumes=%s:%s would show the container %s, which Flotilla keeps from every unit", v.Source, v.Target, h)
			}
		}
	}
	return nil
}
