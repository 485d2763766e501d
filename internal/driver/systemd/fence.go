package systemddriver

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"github.com/flotilla/flotilla/internal/monotime"
	"github.com/flotilla/flotilla/internal/unit"
)

// resultFenced is the Result of a unit a fence deadline stopped.
const resultFenced = "fenced"

// fencedMessage is the Status.Message of a unit a fence deadline stopped.
const fencedMessage = "killed: no word from a current leader before the LostAfter= deadline"

// fencePrefix names the transient timer and service that carry a fence.
const fencePrefix = "flotilla-fence-"

// fence is the driver's one deadline, the units it applies to, and the
// timers armed in systemd for it.
type fence struct {
	mu       sync.Mutex
	gen      uint64
	deadline monotime.Time
	names    map[string]bool
	timers   []string // the fence timers and services in systemd, oldest first
}

// findFenceTimers takes the fence timers an earlier driver left armed: they
// stay armed until the next Fence replaces them.
func (d *Driver) findFenceTimers(ctx context.Context) error {
	us, err := d.conn.ListUnitsByPatternsContext(ctx, nil, []string{fencePrefix + "*.timer", fencePrefix + "*.service"})
	if err != nil {
		return fmt.Errorf("list fence timers: %w", err)
	}
	f := &d.fence
	for _, u := range us {
		base, typ, _ := strings.Cut(strings.TrimPrefix(u.Name, fencePrefix), ".")
		n, err := strconv.ParseUint(base, 10, 64)
		if err != nil {
			continue
		}
		f.gen = max(f.gen, n)
		if typ == "timer" || typ == "service" {
			f.timers = append(f.timers, u.Name)
		}
	}
	slices.Sort(f.timers)
	if len(f.timers) > 0 {
		d.log.Info("the fence an earlier daemon armed stays armed", "units", f.timers)
	}
	return nil
}

// execCommand is one ExecStart= entry of a transient service: the program,
// its argv (argv[0] included) and whether its failure is ignored.
type execCommand struct {
	Path          string
	Args          []string
	IgnoreFailure bool
}

// monotonicTimer is one TimersMonotonic= entry of a transient timer.
type monotonicTimer struct {
	Base string
	Usec uint64
}

// Fence sets the deadline of exactly the named units (driver.Fencer). The
// deadline is handed to systemd as a transient timer (see the package
// documentation), so systemd stops and SIGKILLs the units on time whatever
// the daemon is doing; Start then refuses them with ErrFenced until a later
// Fence leaves them out or moves the deadline on. A zero deadline or no
// names disarms the fence.
func (d *Driver) Fence(deadline monotime.Time, names []string) error {
	for _, n := range names {
		if err := unit.ValidateName(n); err != nil {
			return fmt.Errorf("fence: %w", err)
		}
	}
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return fmt.Errorf("fence: %w", ErrClosed)
	}
	f := &d.fence
	f.mu.Lock()
	passed := slices.Clone(names)
	old := f.timers
	f.timers = nil
	if deadline == 0 || len(names) == 0 {
		f.deadline, f.names = 0, nil
	} else {
		f.gen++
		timer := fmt.Sprintf("%s%d.timer", fencePrefix, f.gen)
		if err := d.arm(timer, deadline, names); err != nil {
			f.timers = old // the old timers stay armed
			f.mu.Unlock()
			return fmt.Errorf("fence: %w", err)
		}
		f.timers = []string{timer, strings.TrimSuffix(timer, ".timer") + ".service"}
		f.deadline = deadline
		f.names = make(map[string]bool, len(names))
		for _, n := range names {
			f.names[n] = true
		}
	}
	f.mu.Unlock()
	// Only now that the new timer is armed are the old ones stopped, with
	// their services: one that is firing would stop units the agent may
	// now start again.
	for _, t := range old {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		if _, err := d.conn.StopUnitContext(ctx, t, "replace", nil); err != nil && !strings.Contains(err.Error(), "not loaded") {
			d.log.Warn("stop an old fence timer", "timer", t, "err", err)
		}
		cancel()
	}
	if deadline != 0 && len(names) > 0 && monotime.Until(deadline) <= 0 {
		// Already passed: the timer fires at once; refresh the units so
		// their status says why they stopped.
		d.refreshFenced(passed)
	}
	return nil
}

// arm starts the transient timer that stops the units at the deadline.
func (d *Driver) arm(timer string, deadline monotime.Time, names []string) error {
	usec := int64(deadline)/1000 - d.userspace
	if usec < 1 {
		usec = 1 // already passed: elapses at once
	}
	service := strings.TrimSuffix(timer, ".timer") + ".service"
	sc := d.cfg.Systemctl
	stop := append([]string{sc, "stop", "--no-block", "--"}, names...)
	kill := append([]string{sc, "kill", "--signal=SIGKILL", "--"}, names...)
	desc := "flotilla: stop singleton units at their LostAfter= deadline"
	timerProps := []sddbus.Property{
		sddbus.PropDescription(desc),
		{Name: "TimersMonotonic", Value: dbus.MakeVariant([]monotonicTimer{{Base: "OnStartupSec", Usec: uint64(usec)}})},
		{Name: "AccuracyUSec", Value: dbus.MakeVariant(uint64(1))},
		{Name: "RemainAfterElapse", Value: dbus.MakeVariant(false)},
	}
	svcProps := []sddbus.Property{
		sddbus.PropDescription(desc),
		sddbus.PropType("oneshot"),
		{Name: "ExecStart", Value: dbus.MakeVariant([]execCommand{
			{Path: sc, Args: stop, IgnoreFailure: true},
			{Path: sc, Args: kill, IgnoreFailure: true},
		})},
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	_, err := d.conn.StartTransientUnitAux(ctx, timer, "replace", timerProps,
		[]sddbus.PropertyCollection{{Name: service, Properties: svcProps}}, nil)
	if err != nil {
		return fmt.Errorf("arm %s: %w", timer, err)
	}
	d.log.Debug("fence armed", "timer", timer, "units", len(names), "in", monotime.Until(deadline))
	return nil
}

// refreshFenced reads the named units' state again.
func (d *Driver) refreshFenced(names []string) {
	for _, n := range names {
		d.refresh(n, nil)
	}
}

// fenced reports whether the unit's fence deadline has passed.
func (d *Driver) fenced(name string) bool {
	return d.fencedLocked(name)
}

// fencedLocked is fenced; the caller may hold d.mu (fence.mu is taken
// after it).
func (d *Driver) fencedLocked(name string) bool {
	f := &d.fence
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.names[name] && f.deadline != 0 && monotime.Until(f.deadline) <= 0
}
