// Package registry is Flotilla's durable record in etcd: unit files with
// their desired state, and the schedule. Everything else (machines' presence,
// unit states) is transient and lives in the engine leader's memory.
//
// Layout under the cluster prefix (default "/flotilla/"):
//
//	units/<name>     JSON Record: the unit file (or its content's key under
//	                 files/), its desired state and the machine it is
//	                 scheduled to
//	files/<content>  a unit file stored once by content (ContentOf) for the
//	                 templates and instances whose records name it
//	ranges/<template>/<from>-<to>
//	                 JSON RangeRecord: instances of a template given a
//	                 desired state at once, in one key; the leader then
//	                 writes each instance's record and deletes the range
//	schedule/<name>  the machine of a unit whose record predates Machine
//	                 (read, and deleted when the record is next written)
//	moves/<name>     the ID of the machine a moving unit is stopping on: it is
//	                 placed again only once that copy is gone, by whichever
//	                 leader sees it go
//	machines/<id>    JSON MachineRecord: metadata set through the API
//	config/scheduler JSON: the placement policy (strategy, roles) set through the API
//	versions/<name>  JSON VersionLog: the versions of the unit's file, oldest
//	                 first (versions.go); not for a template's instances
//	deployments/<template>
//	                 JSON Deployment: the latest roll of the template's
//	                 file onto its instances (deployments.go)
//	config/version-index
//	                 the cluster's version index, in decimal: the Index of
//	                 the newest version ever made
//	config/versions  JSON VersionsConfig: how many versions to keep
//	config/schema    the schema version of all this, in decimal (schema.go); none
//	                 means 1
//	acl/tokens/<h>   JSON auth.Token: an API token, h the SHA-256 of its secret
//	acl/bootstrap    the ID of the first admin token (package auth writes both,
//	                 through any daemon, unfenced: they are not the schedule's)
//
// and, in the etcd registry mode only, the transient state fleet kept there
// (protocol buffers of proto/agentpb):
//
//	presence/<id>             agentpb.Machine, under the agent's lease
//	states/<id>/<unit>        agentpb.UnitStatus, under the agent's lease
//	assignments/<id>/<unit>   agentpb.Assignment, written by the leader (fenced)
//	machines/<id>    JSON MachineRecord: metadata set through the API
//	election/        the engine election (client/v3/concurrency)
//
// With TLS, etcd's own authentication confines each machine of that mode
// to its keys: it reads election/ and assignments/<id>/ and writes only
// presence/<id> and states/<id>/ (package daemon, etcdauth.go).
//
// Every write is made by the engine leader through a Committer, in a
// transaction fenced on the leader's election key: a deposed leader's
// writes fail with ErrFenced instead of landing.
package registry

import (
	"fmt"
	"strings"
)

// DefaultPrefix is the key prefix of a cluster's data in etcd.
const DefaultPrefix = "/flotilla/"

// Keys builds the etcd keys of one cluster.
type Keys struct{ Prefix string }

func (k Keys) p() string {
	if k.Prefix == "" {
		return DefaultPrefix
	}
	if !strings.HasSuffix(k.Prefix, "/") {
		return k.Prefix + "/"
	}
	return k.Prefix
}

func (k Keys) Units() string               { return k.p() + "units/" }
func (k Keys) Unit(name string) string     { return k.Units() + name }
func (k Keys) Schedules() string           { return k.p() + "schedule/" }
func (k Keys) Schedule(name string) string { return k.Schedules() + name }
func (k Keys) Election() string            { return k.p() + "election/" }
func (k Keys) Moves() string               { return k.p() + "moves/" }
func (k Keys) Move(name string) string     { return k.Moves() + name }
func (k Keys) SchedulerConfig() string     { return k.p() + "config/scheduler" }
func (k Keys) Machines() string            { return k.p() + "machines/" }

// Keys of the etcd registry mode (fleet's way): agents announce themselves
// and their unit states under their lease, and watch their assignments.
func (k Keys) Presences() string                   { return k.p() + "presence/" }
func (k Keys) Presence(id string) string           { return k.Presences() + id }
func (k Keys) Assignments(machine string) string   { return k.p() + "assignments/" + machine + "/" }
func (k Keys) States() string                      { return k.p() + "states/" }
func (k Keys) MachineStates(machine string) string { return k.States() + machine + "/" }
func (k Keys) Machine(id string) string            { return k.Machines() + id }

// The coordination modes between agents and the engine leader: agents
// stream to the leader (ModeGRPC, the default), or coordinate through etcd
// under the keys above (ModeEtcd, fleet's original way).
const (
	ModeGRPC = "grpc"
	ModeEtcd = "etcd"
)

// ParseMode returns the mode named s ("" means ModeGRPC), or an error
// naming s that a caller prefixes with its flag or field.
func ParseMode(s string) (string, error) {
	switch s {
	case "":
		return ModeGRPC, nil
	case ModeGRPC, ModeEtcd:
		return s, nil
	}
	return "", fmt.Errorf("%q: want %s or %s", s, ModeGRPC, ModeEtcd)
}
