package state

import apiv1 "github.com/flotilla/flotilla/api"

// Unit is a unit of a snapshot. A snapshot holds every unit of the cluster
// (a million at the top of Flotilla's range), rebuilt while units start, and
// while one is built the last one is still served: two live at once. So a
// unit is kept small: everything but its name is what many units share
// (their machine, the settings of their file with their desired state, the
// codes of their reported state), one value they point to. 24 bytes a unit,
// against 168 for an apiv1.StateUnit (64 when the machine and reason were
// the unit's own).
type Unit struct {
	Name string
	*Shared
}

// Shared is what a unit of a snapshot has in common with others: a
// snapshot's builder hands out one value for each combination it meets.
// Never nil in a Unit.
type Shared struct {
	Machine string // target machine, "" when unscheduled or global
	Reason  string // why a wanted unit is unscheduled
	Spec    *Spec  // never nil
	Status  *Status
}

// Spec is what a unit's file and desired state say, shared by the units
// they are the same for.
type Spec struct {
	Hash, DesiredState string
	Global, Singleton  bool
	LostAfter          string // as apiv1.StateUnit has it, "" when not set
}

// Status is a unit's state as its machine's agent last reported it, shared
// by the units in the same state. A nil *Status: no report.
type Status struct {
	Load, Active, Sub, Health string
}

// NewUnit returns v as a Unit, with a Shared, Spec and Status of its own.
func NewUnit(v apiv1.StateUnit) Unit {
	u := Unit{Name: v.Name, Shared: &Shared{Machine: v.Machine, Reason: v.Reason,
		Spec: &Spec{Hash: v.Hash, DesiredState: v.DesiredState, Global: v.Global, Singleton: v.Singleton, LostAfter: v.LostAfter}}}
	if v.Load != "" || v.Active != "" || v.Sub != "" || v.Health != "" {
		u.Status = &Status{Load: v.Load, Active: v.Active, Sub: v.Sub, Health: v.Health}
	}
	return u
}

// View is the unit as the API shows it.
func (u *Unit) View() apiv1.StateUnit {
	v := apiv1.StateUnit{Name: u.Name, Machine: u.Machine, Reason: u.Reason, Hash: u.Spec.Hash, DesiredState: u.Spec.DesiredState,
		Global: u.Spec.Global, Singleton: u.Spec.Singleton, LostAfter: u.Spec.LostAfter}
	if st := u.Status; st != nil {
		v.Load, v.Active, v.Sub, v.Health = st.Load, st.Active, st.Sub, st.Health
	}
	return v
}

// active is the unit's reported active state ("" without a report).
func (u *Unit) active() string {
	if u.Status == nil {
		return ""
	}
	return u.Status.Active
}

// Sharer hands out one *Shared for each distinct value, so that the units
// of a snapshot that have the same machine, reason, spec and status point
// to one. The last value handed out is checked first: a snapshot's units
// come in name order, a template's instances on one machine often one
// after another. The zero value is ready to use; a Sharer serves one
// snapshot's build (not safe for concurrent use).
type Sharer struct {
	m    map[Shared]*Shared
	last *Shared
}

// Get returns the *Shared for v.
func (s *Sharer) Get(v Shared) *Shared {
	if s.last != nil && *s.last == v {
		return s.last
	}
	p := s.m[v]
	if p == nil {
		if s.m == nil {
			s.m = map[Shared]*Shared{}
		}
		p = new(Shared) // not &v: v would be allocated at every call
		*p = v
		s.m[v] = p
	}
	s.last = p
	return p
}
