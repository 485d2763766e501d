// Package api holds the JSON shapes of Flotilla's HTTP API under /v1: the
// bodies the daemon answers with and the requests it accepts. The server
// (internal/api) and the Go client (package client) share them; the API is
// documented for curl users in docs/api.md.
//
// Import it with the client:
//
//	import (
//		"github.com/flotilla/flotilla/api"
//		"github.com/flotilla/flotilla/client"
//	)
//
// Unit states are the strings "inactive", "loaded" and "launched"; a unit's
// Load, Active and Sub are systemd's words (e.g. "loaded", "active",
// "running").
package api

import "time"

// EtcdUnreachableHeader is set on every answer of a leader that cannot
// reach etcd, to the time (RFC 3339) since when: its answers come from its
// memory, and it refuses writes (503, code "etcd_unreachable").
const EtcdUnreachableHeader = "X-Flotilla-Etcd-Unreachable-Since"

// Unit is one unit as the cluster knows it.
type Unit struct {
	Name         string     `json:"name"`                  // e.g. hello.service or web@1.service
	Hash         string     `json:"hash"`                  // SHA-1 (hex) of the unit's options, normalized
	Description  string     `json:"description,omitempty"` // [Unit] Description=
	DesiredState string     `json:"desiredState"`          // inactive, loaded, launched
	Machine      string     `json:"machine,omitempty"`     // target machine ID, "" when not scheduled
	Reason       string     `json:"reason,omitempty"`      // why a wanted unit is not scheduled
	Global       bool       `json:"global,omitempty"`      // [X-Fleet] Global=true: runs on every matching machine
	File         string     `json:"file,omitempty"`        // the unit file; only in single-unit answers
	CurrentState string     `json:"currentState"`          // inactive, loaded, launched: as reported by the target machine
	State        *UnitState `json:"state,omitempty"`       // the target machine's report, if any
	// The cut-off policy ([X-Fleet]): Singleton units never run on two
	// machines at once; LostAfter is how long the unit's machine may go
	// unheard before the unit is started elsewhere ("infinity": never;
	// empty: the cluster's agent TTL, shown in LostAfterDefault).
	// MovingFrom names the machine a moving unit is stopping on: it is
	// placed again once that copy has stopped (its reason says so too);
	// for a unit of a draining machine placed on Machine while its old
	// copy keeps running, the machine that copy stops on once the new one
	// is active.
	MovingFrom string `json:"movingFrom,omitempty"`
	Singleton  bool   `json:"singleton,omitempty"` // [X-Fleet] Singleton=true
	LostAfter  string `json:"lostAfter,omitempty"` // [X-Fleet] LostAfter=, e.g. "30s"
	// Staying is set for a unit that stays on its draining machine because
	// it fits on no other (Reason says why).
	Staying bool `json:"staying,omitempty"`
	// History is the unit's recent notable events (lost with its machine,
	// moved, placed again), oldest first, since this leader's term began.
	History []HistoryEntry `json:"history,omitempty"`
}

// HistoryEntry is one notable event of a unit.
type HistoryEntry struct {
	Time  string `json:"time"`  // RFC 3339, the leader's clock
	Event string `json:"event"` // what happened, in words
}

// UnitState is what an agent reported about a unit (systemd's load/active/sub).
type UnitState struct {
	Name    string `json:"name"`            // the unit
	Machine string `json:"machine"`         // the machine that reported
	Hash    string `json:"hash"`            // Unit.Hash of the file the machine runs
	Load    string `json:"load"`            // systemd's LoadState: loaded, not-found, ...
	Active  string `json:"active"`          // systemd's ActiveState: active, inactive, failed, activating, ...
	Sub     string `json:"sub"`             // systemd's SubState: running, dead, exited, ...
	PID     int    `json:"pid,omitempty"`   // main process, 0 when none
	Since   string `json:"since,omitempty"` // RFC 3339: when Active last changed, by the machine's clock
	// ObservedAt is when the leader learnt the current Active state (RFC 3339,
	// the leader's clock): what flotilla bench measures start latency by.
	ObservedAt string `json:"observedAt,omitempty"`
	Result     string `json:"result,omitempty"`  // systemd's Result of the last run: success, exit-code, signal, ...
	Message    string `json:"message,omitempty"` // why the unit failed, in words
	// Health is the unit's health while active, as its machine judges it
	// ([X-Check]): healthy, unhealthy or unknown (not decided yet); a unit
	// without [X-Check] is healthy while active (Type=notify: once it sent
	// READY=1). Absent while not active (but for a unit restarted for
	// being unhealthy, through its restart, and one whose WatchdogSec=
	// passed, until it starts again).
	Health string `json:"health,omitempty"`
}

// Machine is one machine of the cluster.
type Machine struct {
	ID       string            `json:"id"`                 // the machine ID (the daemon's --name)
	IP       string            `json:"ip"`                 // the daemon's --public-ip
	Metadata map[string]string `json:"metadata"`           // for [X-Fleet] MachineMetadata=
	Leader   bool              `json:"leader"`             // the machine's daemon runs the engine leader
	APIAddr  string            `json:"apiAddr,omitempty"`  // where its daemon serves this API
	Version  string            `json:"version,omitempty"`  // its daemon's release and short commit, e.g. 0.2.0+abc1234
	Protocol int               `json:"protocol,omitempty"` // the agent protocol its daemon speaks (1: one that does not say)
	Units    int               `json:"units"`              // units scheduled to it
	// ConnectedAt is when the machine's agent opened its stream to the
	// leader (the leader's clock): after a change of leader, the latest of
	// them is when the last agent came back.
	ConnectedAt time.Time `json:"connectedAt,omitzero"`
	// Capacity is what the machine offers to units; Free is what placed
	// units leave of it (0 in a dimension: not limited).
	Capacity Resources `json:"capacity"` // what it offers
	Free     Resources `json:"free"`     // what placed units leave
	// Draining is set while flotilla drain empties the machine, and
	// MaxParallel is then how many instances of one template move off it
	// at once.
	Draining    bool `json:"draining,omitempty"`
	MaxParallel int  `json:"maxParallel,omitempty"`
	// While the machine drains, Moving counts its units mid-move (stopping
	// there before they start elsewhere, or started elsewhere while their
	// copy there runs until the new one is active), and Staying are those
	// that fit on no other machine: they stay there, running. Units less
	// those staying, plus Moving, are the units the drain waits for.
	Moving  int          `json:"moving,omitempty"`
	Staying []UnitReason `json:"staying,omitempty"`
	// Drivers are the drivers the machine runs units with ("exec",
	// "systemd", "docker", "sim"); a unit is placed only where one of them
	// can run it.
	Drivers []string `json:"drivers"`
}

// UnitReason is a unit and why it is where it is.
type UnitReason struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// MachinePatch is the body of PATCH /v1/machines/{id}: each metadata key is
// set to its value, or removed when the value is null. The change is durable
// and overrides what the machine's daemon reports (--metadata).
type MachinePatch struct {
	// Metadata maps each key to change to its new value, or to nil to remove it.
	Metadata map[string]*string `json:"metadata"`
	// Drain, when set, starts (true) or ends (false) draining the machine:
	// a draining machine takes no units, and its units move elsewhere
	// (flotilla drain): a unit that fits nowhere else stays, a launched
	// unit that is not Singleton= starts on its new machine before it
	// stops there, a Singleton= unit stops there first.
	Drain *bool `json:"drain,omitempty"`
	// MaxParallel, with "drain": true, is how many instances of one
	// template may be mid-move at once (1 to MaxDrainParallel; 0 or
	// absent: 1).
	MaxParallel int `json:"maxParallel,omitempty"`
}

// Enrolment answers POST /v1/machines/{id}/enroll: the machine now has an
// etcd user of its name, whose role lets it read the engine election and
// its assignments and write only its own presence key and unit states (the
// etcd registry mode; a server's user, with etcd's root role, is kept).
type Enrolment struct {
	Machine  string `json:"machine"`
	EtcdUser string `json:"etcdUser"`
}

// MaxDrainParallel bounds MachinePatch.MaxParallel.
const MaxDrainParallel = 10000

// Resources are CPU, in percent of one CPU (400 = four CPUs), and memory in bytes.
type Resources struct {
	CPUPercent  int64 `json:"cpuPercent"`  // 100 is one CPU
	MemoryBytes int64 `json:"memoryBytes"` // bytes of memory
}

// UnitList is the answer of GET /v1/units.
type UnitList struct {
	Units []Unit `json:"units"` // sorted by name
}

// UnitStateList is the answer of GET /v1/unit-states.
type UnitStateList struct {
	States []UnitState `json:"states"` // one per unit and reporting machine
}

// MachineList is the answer of GET /v1/machines.
type MachineList struct {
	Machines []Machine `json:"machines"` // sorted by ID
}

// UnitChange is one change in a batch: create a unit (File set), change its
// desired state (DesiredState set), or both. A unit that does not exist needs
// a File, but for an instance of a submitted template.
//
// Name may name a range of a template's instances, as shells write a
// sequence: "web@{1..1000}.service" is web@1.service to web@1000.service
// ("web@{001..100}.service" pads to three digits), at most 1,000,000 of
// them. The change then sets their desired state, creating from the
// template those that do not exist; it takes no File, counts as one change
// of the batch, and is answered in BatchResult.Ranges rather than Units.
// In Batch.Destroy a range destroys every instance it names.
type UnitChange struct {
	Name         string `json:"name"`                   // the unit, e.g. hello.service, or a range, web@{1..1000}.service
	File         string `json:"file,omitempty"`         // the unit file's text, to create the unit
	DesiredState string `json:"desiredState,omitempty"` // inactive, loaded or launched; "" leaves it (inactive for a new unit)
}

// Batch is the body of POST /v1/batch: all changes are validated first and
// then written in as few etcd transactions as possible; on a validation error
// nothing is written.
type Batch struct {
	Units   []UnitChange `json:"units,omitempty"`   // units to create or change
	Destroy []string     `json:"destroy,omitempty"` // names of units to destroy
	// Update overrides options of the [X-Update] sections of the templates
	// whose new files the batch deploys: {"MaxParallel": "2", "AutoRevert": "true"}.
	Update map[string]string `json:"update,omitempty"`
}

// BatchResult is the answer of POST /v1/batch.
type BatchResult struct {
	Units    []Unit        `json:"units"`              // the changed units, in the batch's order (ranges aside)
	Ranges   []RangeResult `json:"ranges,omitempty"`   // the changed ranges of instances, in the batch's order
	Warnings []string      `json:"warnings,omitempty"` // what the unit files' parser noted
}

// RangeResult is a range of instances a batch changed or destroyed.
type RangeResult struct {
	Name         string `json:"name"`                   // as the batch named it, web@{1..1000}.service
	Instances    int    `json:"instances"`              // how many units it names
	DesiredState string `json:"desiredState,omitempty"` // what they were given ("" when destroyed)
	Destroyed    bool   `json:"destroyed,omitempty"`
}

// Status is the answer of GET /v1/status: who answered and who leads.
type Status struct {
	Machine     string `json:"machine"`               // the machine whose daemon answered
	Leader      string `json:"leader"`                // the machine leading the engine, "" when none
	LeaderAPI   string `json:"leaderApi,omitempty"`   // the leader's API address
	IsLeader    bool   `json:"isLeader"`              // the answering machine leads
	ElectionRev int64  `json:"electionRev,omitempty"` // etcd revision of the leader's election
	Version     string `json:"version"`               // the answering daemon's version
	Registry    string `json:"registry"`              // how agents coordinate: grpc or etcd
	// Protocol is the agent and supervisor protocol the answering daemon
	// speaks, ProtocolWindow those it accepts of its peers ("1 to 3"), and
	// Schema the schema of the data in etcd it leads (see docs/operations.md,
	// "Versions and compatibility").
	Protocol       int    `json:"protocol,omitempty"`
	ProtocolWindow string `json:"protocolWindow,omitempty"`
	Schema         int    `json:"schema,omitempty"`
	// LeadRefused says why the answering daemon's engine does not
	// campaign: etcd holds data of a schema it cannot lead. Its machine
	// still runs units as an agent.
	LeadRefused string `json:"leadRefused,omitempty"`
	// Standby is, from a daemon whose engine campaigns while another
	// leads, whether it holds ready the state it would lead with.
	Standby *Standby `json:"standby,omitempty"`
}

// Standby is what a standing-by engine holds ready (Status.Standby).
type Standby struct {
	// Prepared says the engine has made, from the durable record as it
	// is now, the state a new leader starts from: elected, it serves at
	// once instead of loading every unit first. An engine prepares once
	// the record has stayed the same for half a second (longer in a
	// large cluster: twice as long as the state takes to make).
	Prepared bool `json:"prepared"`
	Units    int  `json:"units"` // how many units that state holds
}

// State is the answer of GET /v1/state: the whole cluster as the leader
// holds it, at one moment.
type State struct {
	// Revision is the etcd revision of the durable record the state reflects.
	Revision int64 `json:"revision"`
	// Generation changes each time the leader publishes a new state; it is
	// the ETag.
	Generation uint64 `json:"generation"`
	Leader     string `json:"leader"` // the leader that holds the state
	// EtcdUnreachableSince (RFC 3339) is set while the leader cannot reach
	// etcd: the state is the leader's memory, and writes are refused.
	EtcdUnreachableSince string      `json:"etcdUnreachableSince,omitempty"`
	Machines             []Machine   `json:"machines"` // every machine
	Units                []StateUnit `json:"units"`    // the units that match, sorted by name
	// Total is the number of units that match the filters; Units holds at
	// most ?limit of them, and Next is the ?after= of the next page.
	Total int    `json:"total"`          // units that match
	Next  string `json:"next,omitempty"` // ?after= of the next page, "" on the last
}

// StateUnit is one unit in /v1/state.
type StateUnit struct {
	Name         string `json:"name"`                // the unit
	Hash         string `json:"hash"`                // as Unit.Hash
	DesiredState string `json:"desiredState"`        // inactive, loaded, launched
	Machine      string `json:"machine,omitempty"`   // target machine; "" when unscheduled or global
	Global       bool   `json:"global,omitempty"`    // [X-Fleet] Global=true
	Singleton    bool   `json:"singleton,omitempty"` // [X-Fleet] Singleton=true
	LostAfter    string `json:"lostAfter,omitempty"` // [X-Fleet] LostAfter=, "" for the agent TTL
	Load         string `json:"load,omitempty"`      // as the target machine reports (see UnitState)
	Active       string `json:"active,omitempty"`    // as the target machine reports
	Sub          string `json:"sub,omitempty"`       // as the target machine reports
	Health       string `json:"health,omitempty"`    // as the target machine reports (see UnitState)
	Reason       string `json:"reason,omitempty"`    // why a wanted unit is not scheduled
}

// Event is one change, as GET /v1/events streams them (Server-Sent Events:
// "id: <ID>", "event: <Type>", "data: <this object>"). Type is "unit" (a
// desired state, file or placement changed), "state" (what a machine reports
// of a unit changed), "machine" (a machine came or went), or "reset" (the
// position asked for is unknown to this leader: read /v1/state again and
// follow on from this event).
type Event struct {
	ID       string `json:"id"`                // position in the stream, for ?since= and Last-Event-ID
	Type     string `json:"type"`              // unit, state, machine, deployment or reset
	Time     string `json:"time"`              // RFC 3339, the leader's clock
	Revision int64  `json:"revision"`          // etcd revision of the durable record when it happened
	Unit     string `json:"unit,omitempty"`    // the unit of a unit or state event
	Machine  string `json:"machine,omitempty"` // the machine of a state or machine event; a unit's target
	Removed  bool   `json:"removed,omitempty"` // the unit was destroyed, its state dropped, or the machine left

	// A unit event's unit as it now is (see StateUnit).
	Hash         string `json:"hash,omitempty"`
	DesiredState string `json:"desiredState,omitempty"` // inactive, loaded, launched
	Global       bool   `json:"global,omitempty"`       // [X-Fleet] Global=true
	Reason       string `json:"reason,omitempty"`       // why a wanted unit is not scheduled
	// A state event's report (see UnitState).
	Load   string `json:"load,omitempty"`   // systemd's LoadState
	Active string `json:"active,omitempty"` // systemd's ActiveState
	Sub    string `json:"sub,omitempty"`    // systemd's SubState
	Health string `json:"health,omitempty"` // healthy, unhealthy, unknown (see UnitState)

	// A deployment event's deployment (of the template Unit) as it now is
	// (see Deployment).
	Status  string `json:"status,omitempty"`
	Version int    `json:"version,omitempty"` // the version it deploys
	Done    int    `json:"done,omitempty"`
	Message string `json:"message,omitempty"`
}

// Scheduler is the cluster's placement policy (GET and PUT /v1/scheduler).
// Placement is the default strategy for units without [X-Fleet] Placement=:
// "spread" (fleet's least-loaded; the default) or "binpack". Roles gives
// roles ([X-Fleet] Role=; "*" for units without one) a weight in the
// dominant-resource-fair sharing of a cluster that cannot run everything,
// and an optional quota. Shares (read-only) is each role's dominant share of
// the cluster's capacity now.
type Scheduler struct {
	Placement string                `json:"placement"`        // spread or binpack
	Roles     map[string]RolePolicy `json:"roles,omitempty"`  // by role name
	Shares    map[string]float64    `json:"shares,omitempty"` // read-only: dominant share by role, 0 to 1
	// ReservedMetadata are machine metadata keys only the API sets (PATCH
	// /v1/machines/{id}): a machine's own value for one is ignored, so a
	// machine cannot claim it to draw units constrained on it.
	ReservedMetadata []string `json:"reservedMetadata,omitempty"`
}

// RolePolicy is one role's weight (default 1) and quota (0 in a dimension:
// no cap).
type RolePolicy struct {
	Weight float64   `json:"weight,omitempty"` // relative share; 0 means 1
	Quota  Resources `json:"quota,omitzero"`   // the most the role's units may take
}

// Error is the body of every non-2xx answer.
type Error struct {
	Error string `json:"error"` // what went wrong, in words
	// Code is a stable machine-readable kind: bad_request, not_found,
	// conflict, too_large, unavailable, etcd_unreachable, internal; and for
	// refused requests unauthorized (401: no token, or an unknown or
	// expired one), forbidden (403: the token's role is too small, or a
	// foreign Origin or Host), unsupported_media_type (415: a write that is
	// not JSON), too_many_requests (429: a token over its write rate, or
	// too many streams), acl_disabled.
	Code string `json:"code"`
}

// Token is an API token as listed (GET /v1/acl/tokens): never its secret.
// Role is read, write or admin.
type Token struct {
	ID      string `json:"id"`      // names the token for revocation
	Name    string `json:"name"`    // what the token is for, as given
	Role    string `json:"role"`    // read, write or admin
	Created string `json:"created"` // RFC 3339
	// RunAs are the users the token's units may run as (User=), "*" for
	// any user including root; an admin token may run units as anyone.
	RunAs []string `json:"runAs,omitempty"`
	// Expires is when the token stops being accepted (RFC 3339); absent: never.
	Expires string `json:"expires,omitempty"`
}

// TokenList is the answer of GET /v1/acl/tokens.
type TokenList struct {
	Tokens []Token `json:"tokens"` // every token, secrets left out
}

// TokenRequest is the body of POST /v1/acl/tokens.
type TokenRequest struct {
	Name string `json:"name,omitempty"` // what the token is for
	Role string `json:"role"`           // read, write or admin
	// RunAs are the users the token's units may run as: names, numeric
	// IDs, or "*" for any user including root (write and admin only).
	RunAs []string `json:"runAs,omitempty"`
	// TTL is how long the token lasts, a Go duration such as "720h";
	// absent: until revoked.
	TTL string `json:"ttl,omitempty"`
}

// NewToken is the answer of POST /v1/acl/tokens and POST /v1/acl/bootstrap:
// the token and, in Secret, what to send as "Authorization: Bearer SECRET".
// The secret is shown this once and is not stored.
type NewToken struct {
	Token
	Secret string `json:"token"` // send as "Authorization: Bearer SECRET"
}

// Version is one version of a unit's file (GET /v1/units/{name}/versions).
// Every change of a template's or plain unit's file makes one; instances
// follow their template's.
type Version struct {
	Version int       `json:"version"`
	Hash    string    `json:"hash"`          // the unit file's hash
	Index   int64     `json:"index"`         // the cluster's version index when it was made
	Time    time.Time `json:"time,omitzero"` // when it was made (zero: before versions were kept)
	By      string    `json:"by,omitempty"`  // the token's or certificate's name that made it
	Change  string    `json:"change"`        // created, replaced, reverted to N
	Tag     string    `json:"tag,omitempty"` // a tag keeps it
	Current bool      `json:"current,omitempty"`
	File    string    `json:"file,omitempty"` // with ?files=true, or of one version
}

// VersionList is a unit's versions, oldest first.
type VersionList struct {
	Unit string `json:"unit"`
	// Log is the unit whose versions they are: Unit, or an instance's template.
	Log string `json:"log"`
	// Index is the check index of the unit: its newest version's.
	Index    int64     `json:"index"`
	Keep     int       `json:"keep"` // versions kept of each unit (tagged ones besides)
	Versions []Version `json:"versions"`
}

// Revert is the body of POST /v1/units/{name}/revert: the version to
// return to (0 or absent: the newest earlier version with another file).
type Revert struct {
	Version int `json:"version,omitempty"`
	// Update overrides options of the template's [X-Update] for the
	// deployment the revert starts (as Batch.Update).
	Update map[string]string `json:"update,omitempty"`
}

// Tag is the body of PUT /v1/units/{name}/versions/{version}/tag.
type Tag struct {
	Tag string `json:"tag"`
}

// VersionsConfig is the cluster's versions setting (GET and PUT
// /v1/config/versions): how many versions of each unit are kept.
type VersionsConfig struct {
	Keep int `json:"keep"`
}

// PlannedUnit is what a write would do to one unit (POST /v1/plan).
type PlannedUnit struct {
	Name string `json:"name"`
	// Change is new, changed, unchanged or destroyed; Diff the unified
	// diff of a changed unit's file against the cluster's.
	Change       string `json:"change"`
	Version      int    `json:"version,omitempty"` // its current version
	Diff         string `json:"diff,omitempty"`
	DesiredState string `json:"desiredState,omitempty"`
	// Action is none, submit, update, start, restart, move, stop,
	// destroy or not-placed.
	Action  string `json:"action"`
	Machine string `json:"machine,omitempty"` // where it is scheduled now
	Target  string `json:"target,omitempty"`  // where it would run
	Reason  string `json:"reason,omitempty"`  // why no machine can take it
	// Deployment says which deployment would replace it, and how.
	Deployment string `json:"deployment,omitempty"`
}

// Plan is what a batch would do (POST /v1/plan, whose body is a Batch).
type Plan struct {
	// Index is the check index: the batch sent with ?check-index=Index is
	// refused (409) if any of its units changed since.
	Index int64         `json:"index"`
	Units []PlannedUnit `json:"units"`
	More  int           `json:"more,omitempty"` // units left out of Units (it lists 1,000)
	// Counts are the units by change and by action.
	Counts map[string]int `json:"counts"`
}

// Deployment is the roll of a template's new file onto its instances, run
// by the leader (GET /v1/deployments, /v1/deployments/{template}).
type Deployment struct {
	Unit        string `json:"unit"` // the template
	FromVersion int    `json:"fromVersion"`
	ToVersion   int    `json:"toVersion"`
	// Status is running, paused, waiting-for-promotion, succeeded,
	// failed, aborted or superseded.
	Status   string             `json:"status"`
	Message  string             `json:"message,omitempty"`
	Strategy DeploymentStrategy `json:"strategy"`
	// Instances are the instances it replaces; Canaries those it made to
	// run the new file first; NewInstances those that have it.
	Instances    []string  `json:"instances"`
	Canaries     []string  `json:"canaries,omitempty"`
	NewInstances []string  `json:"newInstances,omitempty"`
	Promoted     bool      `json:"promoted,omitempty"`
	Revert       bool      `json:"revert,omitempty"` // it rolls back a failed one
	Done         int       `json:"done"`             // instances replaced and healthy for MinHealthyTime
	Healthy      int       `json:"healthy"`          // of its instances and canaries, healthy now
	Created      time.Time `json:"created"`
	Updated      time.Time `json:"updated"`
}

// DeploymentStrategy is a template's [X-Update] as a deployment runs it;
// durations as Go writes them (10s, 5m0s).
type DeploymentStrategy struct {
	MaxParallel      int    `json:"maxParallel"`
	MinHealthyTime   string `json:"minHealthyTime"`
	HealthyDeadline  string `json:"healthyDeadline"`
	ProgressDeadline string `json:"progressDeadline"`
	Canary           int    `json:"canary,omitempty"`
	AutoPromote      bool   `json:"autoPromote,omitempty"`
	AutoRevert       bool   `json:"autoRevert,omitempty"`
	Stagger          string `json:"stagger,omitempty"`
}

// DeploymentList is GET /v1/deployments: the latest deployment of each
// template that had one.
type DeploymentList struct {
	Deployments []Deployment `json:"deployments"`
}

// Active reports whether the deployment is still to be carried out.
func (d Deployment) Active() bool {
	switch d.Status {
	case "running", "paused", "waiting-for-promotion":
		return true
	}
	return false
}
