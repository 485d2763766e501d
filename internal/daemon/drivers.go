package daemon

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/flotilla/flotilla/internal/driver"
	"github.com/flotilla/flotilla/internal/driver/docker"
	execdriver "github.com/flotilla/flotilla/internal/driver/exec"
	"github.com/flotilla/flotilla/internal/driver/mux"
	"github.com/flotilla/flotilla/internal/driver/sim"
	systemddriver "github.com/flotilla/flotilla/internal/driver/systemd"
	"github.com/flotilla/flotilla/internal/supervisor"
	"github.com/flotilla/flotilla/internal/unit"
)

// parseDrivers parses --driver: one driver or a comma-separated list, in
// order of preference for units more than one of them can run.
func parseDrivers(s string) (unit.DriverSet, error) {
	set, err := unit.ParseDrivers(s)
	if err != nil {
		return 0, fmt.Errorf("--driver %q: %w", s, err)
	}
	if set&unit.DriverSim != 0 && set != unit.DriverSim {
		return 0, fmt.Errorf("--driver %q: the sim driver runs alone (it pretends to run every unit)", s)
	}
	return set, nil
}

// driverSet is the set of a validated --driver.
func driverSet(s string) unit.DriverSet {
	set, _ := unit.ParseDrivers(s)
	return set
}

// newDriver makes the drivers --driver names, in its order, and a mux over
// them when there are several; sup is the exec driver's supervisor client,
// if there is one. cfg.Driver was checked by Config.validate.
func newDriver(cfg Config, notify driver.Notify) (driver.Driver, *supervisor.Client, error) {
	var entries []mux.Entry
	var sup *supervisor.Client
	for _, name := range splitDrivers(cfg.Driver) {
		kind := unit.DriversFromNames([]string{name})
		var d driver.Driver
		var err error
		switch kind {
		case unit.DriverSim:
			d, err = sim.New(sim.Config{Machine: cfg.Name, Notify: notify, StartDelay: cfg.SimStartDelay, FailureRate: cfg.SimFailureRate})
		case unit.DriverExec:
			// Units run in the machine's supervisor process, so that they
			// outlive this one; it is started if none runs.
			sup, err = supervisor.New(supervisor.Config{Dir: filepath.Join(cfg.DataDir, "units"), Machine: cfg.Name, Notify: notify,
				Logger: cfg.Logger, Binary: cfg.SupervisorBinary, Version: Version, Inaccessible: cfg.secretPaths(),
				Logs: &execdriver.LogConfig{Limits: execdriver.LogLimits{MaxBytes: cfg.LogMaxSize, MaxFiles: cfg.LogMaxFiles}, Journald: cfg.LogJournald}})
			if err == nil {
				d = sup
			}
		case unit.DriverSystemd:
			d, err = systemddriver.New(systemddriver.Config{Machine: cfg.Name, Notify: notify, Logger: cfg.Logger, Inaccessible: cfg.secretPaths()})
		case unit.DriverDocker:
			// Containers run in the machine's Docker engine, which keeps
			// them when this process stops; the next daemon adopts them.
			d, err = docker.New(docker.Config{Machine: cfg.Name, Dir: filepath.Join(cfg.DataDir, "docker"), Notify: notify, Inaccessible: cfg.secretPaths(),
				Logger: cfg.Logger, MaxLogBytes: cfg.LogMaxSize, MaxLogFiles: cmp.Or(cfg.LogMaxFiles, -1)})
		default:
			err = fmt.Errorf("not available in this build")
		}
		if err != nil {
			closeAll(entries)
			return nil, nil, fmt.Errorf("%s driver: %w", name, err)
		}
		entries = append(entries, mux.Entry{Kind: kind, Driver: d})
	}
	if len(entries) == 1 {
		return entries[0].Driver, sup, nil
	}
	m, err := mux.New(entries...)
	if err != nil {
		closeAll(entries)
		return nil, nil, fmt.Errorf("--driver %s: %w", cfg.Driver, err)
	}
	return m, sup, nil
}

// splitDrivers returns the driver names of a --driver list, in its order.
func splitDrivers(s string) []string {
	var names []string
	for name := range strings.SplitSeq(s, ",") {
		names = append(names, strings.TrimSpace(name))
	}
	return names
}

// closeAll releases drivers made before one failed, leaving their units
// running where the driver can (they belong to the next daemon).
func closeAll(entries []mux.Entry) {
	for _, e := range entries {
		if d, ok := e.Driver.(driver.Detacher); ok {
			d.Detach(context.Background())
		} else {
			e.Driver.Close(context.Background())
		}
	}
}

// secretPaths are what no unit may see: the data directory (the etcd
// member, the supervisor's socket, the local token) and the key files,
// as absolute paths.
func (c Config) secretPaths() []string {
	var out []string
	for _, p := range []string{c.DataDir, c.TLS.Key, c.EtcdTLS.Key} {
		if p == "" {
			continue
		}
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}
