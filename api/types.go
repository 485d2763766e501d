// Package apiv1 holds the JSON shapes of Flotilla's HTTP API under /v1.
// The server (internal/api) and the client (internal/client) share them; the
// API is documented for curl users in docs/api.md.
package api

// EtcdUnreachableHeader is set on every answer of a leader that cannot
// reach etcd, to the time (RFC 3339) since when: its answers come from its
// memory, and it refuses writes (503, code "etcd_unreachable").
const EtcdUnreachableHeader = "X-Flotilla-Etcd-Unreachable-Since"

// Unit is one unit as the cluster knows it.
type Unit struct {
	Name         string     `json:"name"`
	Hash         string     `json:"hash"`
	Description  string     `json:"description,omitempty"`
	DesiredState string     `json:"desiredState"`      // inactive, loaded, launched
	Machine      string     `json:"machine,omitempty"` // target machine ID, "" when not scheduled
	Reason       string     `json:"reason,omitempty"`  // why a wanted unit is not scheduled
	Global       bool       `json:"global,omitempty"`  // [X-Fleet] Global=true: runs on every matching machine
	File         string     `json:"file,omitempty"`    // the unit file; only in single-unit answers
	CurrentState string     `json:"currentState"`      // inactive, loaded, launched: as reported by the target machine
	State        *UnitState `json:"state,omitempty"`   // the target machine's report, if any
	// The cut-off policy ([X-Fleet]): Singleton units never run on two
	// machines at once; LostAfter is how long the unit's machine may go
	// unheard before the unit is started elsewhere ("infinity": never;
	// empty: the cluster's agent TTL, shown in LostAfterDefault).
	Singleton bool   `json:"singleton,omitempty"`
	LostAfter string `json:"lostAfter,omitempty"`
	// History is the unit's recent notable events (lost with its machine,
	// moved, placed again), oldest first; only in single-unit answers.
	History []HistoryEntry `json:"history,omitempty"`
}

// HistoryEntry is one notable event of a unit.
type HistoryEntry struct {
	Time  string `json:"time"` // RFC 3339, the leader's clock
	Event string `json:"event"`
}

// UnitState is what an agent reported about a unit (systemd's load/active/sub).
type UnitState struct {
	Name    string `json:"name"`
	Machine string `json:"machine"`
	Hash    string `json:"hash"`
	Load    string `json:"load"`
	Active  string `json:"active"`
	Sub     string `json:"sub"`
	PID     int    `json:"pid,omitempty"`
	Since   string `json:"since,omitempty"` // RFC 3339: when Active last changed, by the machine's clock
	// ObservedAt is when the leader learnt the current Active state (RFC 3339,
	// the leader's clock): what flotilla bench measures start latency by.
	ObservedAt string `json:"observedAt,omitempty"`
	Result     string `json:"result,omitempty"`
	Message    string `json:"message,omitempty"`
}

// Machine is one machine of the cluster.
type Machine struct {
	ID       string            `json:"id"`
	IP       string            `json:"ip"`
	Metadata map[string]string `json:"metadata"`
	Leader   bool              `json:"leader"`
	APIAddr  string            `json:"apiAddr,omitempty"`
	Version  string            `json:"version,omitempty"`
	Units    int               `json:"units"`
	// Capacity is what the machine offers to units; Free is what placed
	// units leave of it (0 in a dimension: not limited).
	Capacity Resources `json:"capacity"`
	Free     Resources `json:"free"`
	// Draining is set while flotilla drain empties the machine.
	Draining bool `json:"draining,omitempty"`
}

// MachinePatch is the body of PATCH /v1/machines/{id}: each metadata key is
// set to its value, or removed when the value is null. The change is durable
// and overrides what the machine's daemon reports (--metadata).
type MachinePatch struct {
	Metadata map[string]*string `json:"metadata"`
	// Drain, when set, starts (true) or ends (false) draining the machine:
	// a draining machine takes no units, and its units move elsewhere, each
	// stopped there before it starts on another machine (flotilla drain).
	Drain *bool `json:"drain,omitempty"`
}

// Resources are CPU, in percent of one CPU (400 = four CPUs), and memory in bytes.
type Resources struct {
	CPUPercent  int64 `json:"cpuPercent"`
	MemoryBytes int64 `json:"memoryBytes"`
}

// UnitList is the answer of GET /v1/units.
type UnitList struct {
	Units []Unit `json:"units"`
}

// UnitStateList is the answer of GET /v1/unit-states.
type UnitStateList struct {
	States []UnitState `json:"states"`
}

// MachineList is the answer of GET /v1/machines.
type MachineList struct {
	Machines []Machine `json:"machines"`
}

// UnitChange is one change in a batch: create a unit (File set), change its
// desired state (DesiredState set), or both. A unit that does not exist needs
// a File.
type UnitChange struct {
	Name         string `json:"name"`
	File         string `json:"file,omitempty"`
	DesiredState string `json:"desiredState,omitempty"`
}

// Batch is the body of POST /v1/batch: all changes are validated first and
// then written in as few etcd transactions as possible; on a validation error
// nothing is written.
type Batch struct {
	Units   []UnitChange `json:"units,omitempty"`
	Destroy []string     `json:"destroy,omitempty"`
}

// BatchResult is the answer of POST /v1/batch.
type BatchResult struct {
	Units    []Unit   `json:"units"`
	Warnings []string `json:"warnings,omitempty"`
}

// Status is the answer of GET /v1/status: who answered and who leads.
type Status struct {
	Machine     string `json:"machine"`
	Leader      string `json:"leader"`
	LeaderAPI   string `json:"leaderApi,omitempty"`
	IsLeader    bool   `json:"isLeader"`
	ElectionRev int64  `json:"electionRev,omitempty"`
	Version     string `json:"version"`
	Registry    string `json:"registry"`
}

// State is the answer of GET /v1/state: the whole cluster as the leader
// holds it, at one moment.
type State struct {
	// Revision is the etcd revision of the durable record the state reflects.
	Revision int64 `json:"revision"`
	// Generation changes each time the leader publishes a new state; it is
	// the ETag.
	Generation uint64 `json:"generation"`
	Leader     string `json:"leader"`
	// EtcdUnreachableSince (RFC 3339) is set while the leader cannot reach
	// etcd: the state is the leader's memory, and writes are refused.
	EtcdUnreachableSince string      `json:"etcdUnreachableSince,omitempty"`
	Machines             []Machine   `json:"machines"`
	Units                []StateUnit `json:"units"`
	// Total is the number of units that match the filters; Units holds at
	// most ?limit of them, and Next is the ?after= of the next page.
	Total int    `json:"total"`
	Next  string `json:"next,omitempty"`
}

// StateUnit is one unit in /v1/state.
type StateUnit struct {
	Name         string `json:"name"`
	Hash         string `json:"hash"`
	DesiredState string `json:"desiredState"`
	Machine      string `json:"machine,omitempty"` // target machine; "" when unscheduled or global
	Global       bool   `json:"global,omitempty"`
	Singleton    bool   `json:"singleton,omitempty"` // [X-Fleet] Singleton=true
	LostAfter    string `json:"lostAfter,omitempty"` // [X-Fleet] LostAfter=, "" for the agent TTL
	Load         string `json:"load,omitempty"`
	Active       string `json:"active,omitempty"`
	Sub          string `json:"sub,omitempty"`
	Reason       string `json:"reason,omitempty"`
}

// Event is one change, as GET /v1/events streams them (Server-Sent Events:
// "id: <ID>", "event: <Type>", "data: <this object>"). Type is "unit" (a
// desired state, file or placement changed), "state" (what a machine reports
// of a unit changed), "machine" (a machine came or went), or "reset" (the
// position asked for is unknown to this leader: read /v1/state again and
// follow on from this event).
type Event struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Time     string `json:"time"`
	Revision int64  `json:"revision"` // etcd revision of the durable record when it happened
	Unit     string `json:"unit,omitempty"`
	Machine  string `json:"machine,omitempty"`
	Removed  bool   `json:"removed,omitempty"` // the unit was destroyed, its state dropped, or the machine left

	Hash         string `json:"hash,omitempty"`
	DesiredState string `json:"desiredState,omitempty"`
	Global       bool   `json:"global,omitempty"`
	Reason       string `json:"reason,omitempty"`
	Load         string `json:"load,omitempty"`
	Active       string `json:"active,omitempty"`
	Sub          string `json:"sub,omitempty"`
}

// Scheduler is the cluster's placement policy (GET and PUT /v1/scheduler).
// Placement is the default strategy for units without [X-Fleet] Placement=:
// "spread" (fleet's least-loaded; the default) or "binpack". Roles gives
// roles ([X-Fleet] Role=; "*" for units without one) a weight in the
// dominant-resource-fair sharing of a cluster that cannot run everything,
// and an optional quota. Shares (read-only) is each role's dominant share of
// the cluster's capacity now.
type Scheduler struct {
	Placement string                `json:"placement"`
	Roles     map[string]RolePolicy `json:"roles,omitempty"`
	Shares    map[string]float64    `json:"shares,omitempty"`
}

// RolePolicy is one role's weight (default 1) and quota (0 in a dimension:
// no cap).
type RolePolicy struct {
	Weight float64   `json:"weight,omitempty"`
	Quota  Resources `json:"quota,omitzero"`
}

// Error is the body of every non-2xx answer.
type Error struct {
	Error string `json:"error"`
	// Code is a stable machine-readable kind: bad_request, not_found,
	// conflict, too_large, unavailable, etcd_unreachable, internal; and for
	// refused requests unauthorized (401: no token, or an unknown one),
	// forbidden (403: the token's role is too small, or a foreign Origin or
	// Host), unsupported_media_type (415: a write that is not JSON),
	// acl_disabled.
	Code string `json:"code"`
}

// Token is an API token as listed (GET /v1/acl/tokens): never its secret.
// Role is read, write or admin.
type Token struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Role    string `json:"role"`
	Created string `json:"created"` // RFC 3339
}

// TokenList is the answer of GET /v1/acl/tokens.
type TokenList struct {
	Tokens []Token `json:"tokens"`
}

// TokenRequest is the body of POST /v1/acl/tokens.
type TokenRequest struct {
	Name string `json:"name,omitempty"`
	Role string `json:"role"`
}

// NewToken is the answer of POST /v1/acl/tokens and POST /v1/acl/bootstrap:
// the token and, in Secret, what to send as "Authorization: Bearer SECRET".
// The secret is shown this once and is not stored.
type NewToken struct {
	Token
	Secret string `json:"token"`
}
