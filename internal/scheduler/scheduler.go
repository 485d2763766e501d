// Package scheduler decides where units run. It is a pure function of a
// cluster snapshot: no clock, no network, no etcd. The engine keeps a Cluster
// up to date incrementally as units are placed and machines come and go, so
// that one decision costs time proportional to the number of machines, not
// to the number of units.
//
// A decision runs the unit's constraints as a chain of filters, each of which
// may reject a machine with a reason, then ranks the machines left:
//
//	MachineID        -> only the named machine
//	MachineMetadata  -> only machines whose metadata matches (keys AND, values OR)
//	MachineOf        -> only machines running each named unit
//	Conflicts        -> not machines running a unit that conflicts (both directions)
//	rank             -> fewest units, then machine ID (fleet's least-loaded)
//
// When no machine is left, the Decision carries the reason of the filter
// that rejected the most machines, so a user is told why.
package scheduler

import (
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/flotilla/flotilla/internal/unit"
)

// Machine is a machine units may be placed on.
type Machine struct {
	ID       string
	Metadata map[string]string
}

// Unit is what the scheduler needs to know of a unit.
type Unit struct {
	Name  string
	Fleet unit.Fleet
}

type machineState struct {
	Machine
	units map[string]*Unit // units scheduled here
}

// Cluster is the scheduler's view: machines available for placement and the
// units scheduled on them. The zero value is not usable; use NewCluster.
type Cluster struct {
	machines map[string]*machineState
	ids      []string          // sorted machine IDs
	where    map[string]string // unit name -> machine ID
	// conflicting holds the scheduled units that declare Conflicts=, so a
	// decision checks the reverse direction without scanning every unit.
	conflicting map[string]*Unit
}

// NewCluster returns an empty cluster.
func NewCluster() *Cluster {
	return &Cluster{machines: map[string]*machineState{}, where: map[string]string{}, conflicting: map[string]*Unit{}}
}

// SetMachine adds a machine or replaces its metadata.
func (c *Cluster) SetMachine(m Machine) {
	if ms, ok := c.machines[m.ID]; ok {
		ms.Metadata = m.Metadata
		return
	}
	c.machines[m.ID] = &machineState{Machine: m, units: map[string]*Unit{}}
	i := sort.SearchStrings(c.ids, m.ID)
	c.ids = append(c.ids, "")
	copy(c.ids[i+1:], c.ids[i:])
	c.ids[i] = m.ID
}

// RemoveMachine removes a machine; units scheduled on it are forgotten.
func (c *Cluster) RemoveMachine(id string) {
	ms, ok := c.machines[id]
	if !ok {
		return
	}
	for name := range ms.units {
		delete(c.where, name)
		delete(c.conflicting, name)
	}
	delete(c.machines, id)
	i := sort.SearchStrings(c.ids, id)
	c.ids = append(c.ids[:i], c.ids[i+1:]...)
}

// HasMachine reports whether id is a machine of the cluster.
func (c *Cluster) HasMachine(id string) bool { _, ok := c.machines[id]; return ok }

// Place records that u runs on machine id (which must exist).
func (c *Cluster) Place(u *Unit, id string) {
	c.Unplace(u.Name)
	ms, ok := c.machines[id]
	if !ok {
		return
	}
	ms.units[u.Name] = u
	c.where[u.Name] = id
	if len(u.Fleet.Conflicts) > 0 {
		c.conflicting[u.Name] = u
	}
}

// Unplace forgets where the named unit runs.
func (c *Cluster) Unplace(name string) {
	id, ok := c.where[name]
	if !ok {
		return
	}
	delete(c.machines[id].units, name)
	delete(c.where, name)
	delete(c.conflicting, name)
}

// Where returns the machine the unit is placed on.
func (c *Cluster) Where(name string) (string, bool) { id, ok := c.where[name]; return id, ok }

// Load returns the number of units placed on machine id.
func (c *Cluster) Load(id string) int {
	if ms, ok := c.machines[id]; ok {
		return len(ms.units)
	}
	return 0
}

// Decision is the outcome of Decide: a machine, or the reason there is none.
type Decision struct {
	Machine string
	Reason  string
}

// Decide picks the machine u should run on.
func (c *Cluster) Decide(u *Unit) Decision {
	if len(c.ids) == 0 {
		return Decision{Reason: "no machines available"}
	}
	f := u.Fleet
	candidates := c.ids
	if f.MachineID != "" {
		if _, ok := c.machines[f.MachineID]; !ok {
			return Decision{Reason: fmt.Sprintf("MachineID=%s: no such machine is available", f.MachineID)}
		}
		candidates = []string{f.MachineID}
	}
	req := unit.MetadataRequirements(f)
	var (
		best       string
		bestLoad   = -1
		rejections = map[string][]string{} // reason -> machines
	)
	for _, id := range candidates {
		ms := c.machines[id]
		if why := c.reject(ms, u, req); why != "" {
			rejections[why] = append(rejections[why], id)
			continue
		}
		if l := len(ms.units); bestLoad < 0 || l < bestLoad {
			best, bestLoad = id, l
		}
	}
	if best != "" {
		return Decision{Machine: best}
	}
	return Decision{Reason: summarize(rejections)}
}

func (c *Cluster) reject(ms *machineState, u *Unit, req map[string][]string) string {
	for key, vals := range req {
		have, ok := ms.Metadata[key]
		if !ok || !contains(vals, have) {
			return "no machine has " + formatReq(req)
		}
	}
	for _, other := range u.Fleet.MachineOf {
		if c.where[other] != ms.ID {
			if _, ok := c.where[other]; !ok {
				return fmt.Sprintf("MachineOf=%s: that unit is not scheduled", other)
			}
			return fmt.Sprintf("MachineOf=%s: runs on another machine", other)
		}
	}
	for _, g := range u.Fleet.Conflicts {
		for name := range ms.units {
			if name != u.Name && globMatch(g, name) {
				return "conflicts with " + name
			}
		}
	}
	for name, other := range c.conflicting {
		if name == u.Name || c.where[name] != ms.ID {
			continue
		}
		for _, g := range other.Fleet.Conflicts {
			if globMatch(g, u.Name) {
				return "conflicts with " + name
			}
		}
	}
	return ""
}

// Fits reports whether u may stay on machine id (its constraints still hold),
// and why not.
func (c *Cluster) Fits(u *Unit, id string) (bool, string) {
	ms, ok := c.machines[id]
	if !ok {
		return false, "machine " + id + " is not available"
	}
	if u.Fleet.MachineID != "" && u.Fleet.MachineID != id {
		return false, "MachineID=" + u.Fleet.MachineID
	}
	why := c.reject(ms, u, unit.MetadataRequirements(u.Fleet))
	return why == "", why
}

func summarize(rejections map[string][]string) string {
	reasons := make([]string, 0, len(rejections))
	for r := range rejections {
		reasons = append(reasons, r)
	}
	sort.Slice(reasons, func(i, j int) bool {
		if len(rejections[reasons[i]]) != len(rejections[reasons[j]]) {
			return len(rejections[reasons[i]]) > len(rejections[reasons[j]])
		}
		return reasons[i] < reasons[j]
	})
	parts := make([]string, 0, len(reasons))
	for _, r := range reasons {
		ms := rejections[r]
		if strings.HasPrefix(r, "no machine has") {
			parts = append(parts, r)
			continue
		}
		parts = append(parts, r+" on "+listMachines(ms))
	}
	return strings.Join(parts, "; ")
}

func listMachines(ids []string) string {
	const max = 5
	if len(ids) <= max {
		return strings.Join(ids, ", ")
	}
	return strings.Join(ids[:max], ", ") + fmt.Sprintf(" and %d more", len(ids)-max)
}

func formatReq(req map[string][]string) string {
	keys := make([]string, 0, len(req))
	for k := range req {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+strings.Join(req[k], "|"))
	}
	return strings.Join(parts, ",")
}

func contains(vals []string, v string) bool {
	for _, x := range vals {
		if x == v {
			return true
		}
	}
	return false
}

func globMatch(pattern, name string) bool {
	ok, err := path.Match(pattern, name)
	return err == nil && ok
}
