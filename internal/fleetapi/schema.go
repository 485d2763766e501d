package fleetapi

// The JSON entities of fleet's API v1, with fleet's field names. Empty
// fields are left out, as fleet's server left them out.

// UnitOption is one option of a unit file: Name=Value in [Section].
type UnitOption struct {
	Section string `json:"section,omitempty"`
	Name    string `json:"name,omitempty"`
	Value   string `json:"value,omitempty"`
}

// Unit is a unit as fleet showed it. Reason is Flotilla's: why a unit that
// should run is not placed (fleet had no such field; fleetctl ignores it).
type Unit struct {
	Name         string        `json:"name,omitempty"`
	Options      []*UnitOption `json:"options,omitempty"`
	DesiredState string        `json:"desiredState,omitempty"`
	CurrentState string        `json:"currentState,omitempty"`
	MachineID    string        `json:"machineID,omitempty"`
	Reason       string        `json:"reason,omitempty"`
}

// UnitPage is one page of GET /fleet/v1/units.
type UnitPage struct {
	Units         []*Unit `json:"units,omitempty"`
	NextPageToken string  `json:"nextPageToken,omitempty"`
}

// UnitState is what a machine reports of a unit, its hash being fleet's.
type UnitState struct {
	Name               string `json:"name,omitempty"`
	Hash               string `json:"hash,omitempty"`
	MachineID          string `json:"machineID,omitempty"`
	SystemdLoadState   string `json:"systemdLoadState,omitempty"`
	SystemdActiveState string `json:"systemdActiveState,omitempty"`
	SystemdSubState    string `json:"systemdSubState,omitempty"`
}

// UnitStatePage is one page of GET /fleet/v1/state.
type UnitStatePage struct {
	States        []*UnitState `json:"states,omitempty"`
	NextPageToken string       `json:"nextPageToken,omitempty"`
}

// Machine is one machine of the cluster.
type Machine struct {
	ID        string            `json:"id,omitempty"`
	PrimaryIP string            `json:"primaryIP,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
}

// MachinePage is one page of GET /fleet/v1/machines.
type MachinePage struct {
	Machines      []*Machine `json:"machines,omitempty"`
	NextPageToken string     `json:"nextPageToken,omitempty"`
}

// ErrorBody is fleet's error entity: {"error":{"code":N,"message":"…"}}.
type ErrorBody struct {
	Error ErrorEntity `json:"error"`
}

// ErrorEntity is the inside of ErrorBody; Code is the HTTP status.
type ErrorEntity struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}
