package api

import (
	"context"
	"net/http"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/engine"
)

func deploymentView(d engine.DeploymentInfo) apiv1.Deployment {
	s := d.Strategy
	dur := func(ms int64) string { return (time.Duration(ms) * time.Millisecond).String() }
	out := apiv1.Deployment{Unit: d.Unit, FromVersion: d.FromVersion, ToVersion: d.ToVersion, Status: d.Status, Message: d.Message,
		Strategy: apiv1.DeploymentStrategy{MaxParallel: s.MaxParallel, MinHealthyTime: dur(s.MinHealthyTimeMs), HealthyDeadline: dur(s.HealthyDeadlineMs),
			ProgressDeadline: dur(s.ProgressDeadlineMs), Canary: s.Canary, AutoPromote: s.AutoPromote, AutoRevert: s.AutoRevert},
		Instances: d.Instances, Canaries: d.Canaries, NewInstances: d.NewInstances, Promoted: d.Promoted, Revert: d.Revert,
		Done: d.Done, Healthy: d.Healthy, Created: d.Created, Updated: d.Updated}
	if s.StaggerMs > 0 {
		out.Strategy.Stagger = dur(s.StaggerMs)
	}
	if out.Instances == nil {
		out.Instances = []string{}
	}
	return out
}

func (s *server) deployments(w http.ResponseWriter, r *http.Request) {
	ds, err := s.cfg.Engine.Deployments()
	if err != nil {
		s.engineError(w, err)
		return
	}
	out := apiv1.DeploymentList{Deployments: make([]apiv1.Deployment, 0, len(ds))}
	for _, d := range ds {
		out.Deployments = append(out.Deployments, deploymentView(d))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *server) deployment(w http.ResponseWriter, r *http.Request) {
	d, err := s.cfg.Engine.Deployment(r.PathValue("unit"))
	if err != nil {
		s.engineError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, deploymentView(d))
}

// controlDeployment promotes, pauses, resumes or aborts a deployment.
func (s *server) controlDeployment(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("unit")
	noteUnits(r, []engine.Change{{Name: name}})
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	if err := s.cfg.Engine.ControlDeployment(ctx, name, r.PathValue("action")); err != nil {
		s.engineError(w, err)
		return
	}
	s.deployment(w, r)
}
