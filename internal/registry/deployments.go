package registry

import (
	"encoding/json"
	"strings"
	"time"
)

// Deployment is the roll of a template's new file onto the instances that
// ran its former one (or, for a unit of its own, the watch of its new
// file until it is healthy), carried out by the leader (package engine,
// deploy.go), stored under deployments/<template>: the latest one of each
// template, running or ended. What is done is read from the instances
// themselves (an instance whose file is the new one has been replaced),
// so a new leader resumes a deployment where the last stopped without
// replacing any instance twice; the record holds what cannot be read
// there: the plan, the canaries, the outcome.
type Deployment struct {
	Unit string `json:"unit"` // the template
	// FromVersion and ToVersion are the versions rolled from and to, From
	// and To their files' content keys (files/).
	FromVersion int    `json:"fromVersion"`
	ToVersion   int    `json:"toVersion"`
	From        string `json:"from"`
	To          string `json:"to"`
	// ToHash is the new file's hash (unit.File.Hash).
	ToHash string `json:"toHash"`
	// Strategy is the new file's [X-Update], with the request's overrides.
	Strategy DeployStrategy `json:"strategy"`
	Status   string         `json:"status"` // Deploy*
	Message  string         `json:"message,omitempty"`
	// Instances are the instances it replaces, in the order it does;
	// Canaries the instances it made to run the new file first.
	Instances []string `json:"instances"`
	Canaries  []string `json:"canaries,omitempty"`
	Promoted  bool     `json:"promoted,omitempty"`
	// Revert is set on a deployment that rolls back a failed one.
	Revert  bool      `json:"revert,omitempty"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	// Progress is when an instance last became done (or the start).
	Progress time.Time `json:"progress"`
	// Done counts the instances replaced and healthy: it only grows.
	Done int `json:"done"`
}

// DeployStrategy is unit.Update in the record: durations in milliseconds.
type DeployStrategy struct {
	MaxParallel        int   `json:"maxParallel"`
	MinHealthyTimeMs   int64 `json:"minHealthyTimeMs"`
	HealthyDeadlineMs  int64 `json:"healthyDeadlineMs"`
	ProgressDeadlineMs int64 `json:"progressDeadlineMs"`
	Canary             int   `json:"canary,omitempty"`
	AutoPromote        bool  `json:"autoPromote,omitempty"`
	AutoRevert         bool  `json:"autoRevert,omitempty"`
	StaggerMs          int64 `json:"staggerMs,omitempty"`
}

// Deployment statuses.
const (
	DeployRunning    = "running"
	DeployPaused     = "paused"
	DeployCanaries   = "waiting-for-promotion"
	DeploySucceeded  = "succeeded"
	DeployFailed     = "failed"
	DeployAborted    = "aborted"
	DeploySuperseded = "superseded"
)

// Active reports whether the deployment is still to be carried out.
func (d Deployment) Active() bool {
	switch d.Status {
	case DeployRunning, DeployPaused, DeployCanaries:
		return true
	}
	return false
}

func (k Keys) Deployments() string           { return k.p() + "deployments/" }
func (k Keys) Deployment(unit string) string { return k.Deployments() + unit }

// PutDeployment is the op that stores d.
func PutDeployment(keys Keys, d Deployment) Op {
	b, _ := json.Marshal(d) // strings, numbers, times
	return Op{Key: keys.Deployment(d.Unit), Value: string(b)}
}

// DeleteDeployment is the op that removes a template's deployment.
func DeleteDeployment(keys Keys, unit string) Op {
	return Op{Key: keys.Deployment(unit), Delete: true}
}

func (k Keys) decodeDeployment(key string, val []byte) (Deployment, bool) {
	var d Deployment
	if err := json.Unmarshal(val, &d); err != nil || d.Unit != strings.TrimPrefix(key, k.Deployments()) {
		return d, false
	}
	return d, true
}
