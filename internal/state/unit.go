package state

import apiv1 "github.com/flotilla/flotilla/api"

// Unit is a unit of a snapshot. A snapshot holds every unit of the cluster
// (a million at the top of Flotilla's range), rebuilt while units start, so
// a unit is kept small: what many units share, the settings of their file
// with their desired state and the codes of their reported state, is one
// value they point to. 64 bytes a unit, against 168 for an
// apiv1.StateUnit, and a third of the pointers for the collector to scan.
type Unit struct {
	Name    string
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
	Load, Active, Sub string
}

// NewUnit returns v as a Unit, with a Spec and a Status of its own.
func NewUnit(v apiv1.StateUnit) Unit {
	u := Unit{Name: v.Name, Machine: v.Machine, Reason: v.Reason,
		Spec: &Spec{Hash: v.Hash, DesiredState: v.DesiredState, Global: v.Global, Singleton: v.Singleton, LostAfter: v.LostAfter}}
	if v.Load != "" || v.Active != "" || v.Sub != "" {
		u.Status = &Status{Load: v.Load, Active: v.Active, Sub: v.Sub}
	}
	return u
}

// View is the unit as the API shows it.
func (u *Unit) View() apiv1.StateUnit {
	v := apiv1.StateUnit{Name: u.Name, Machine: u.Machine, Reason: u.Reason, Hash: u.Spec.Hash, DesiredState: u.Spec.DesiredState,
		Global: u.Spec.Global, Singleton: u.Spec.Singleton, LostAfter: u.Spec.LostAfter}
	if st := u.Status; st != nil {
		v.Load, v.Active, v.Sub = st.Load, st.Active, st.Sub
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
