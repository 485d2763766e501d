package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/machine"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/scheduler"
	"github.com/flotilla/flotilla/internal/unit"
)

// Scheduler returns the placement policy and the roles' current shares.
func (e *Engine) Scheduler() (apiv1.Scheduler, error) {
	t, err := e.reader()
	if err != nil {
		return apiv1.Scheduler{}, err
	}
	v, err := t.readViews()
	if err != nil {
		return apiv1.Scheduler{}, err
	}
	s := v.scheduler
	s.ReservedMetadata, s.Shares = slices.Clone(s.ReservedMetadata), maps.Clone(s.Shares)
	return s, nil
}

// SetScheduler changes the placement policy durably. Units already placed
// stay; pending units are placed under the new policy at once.
func (e *Engine) SetScheduler(ctx context.Context, s apiv1.Scheduler) error {
	o := optionsFromAPI(s)
	if err := scheduler.NewCluster().SetOptions(o); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := machine.CheckMetadataCount(len(o.ReservedMetadata)); err != nil {
		return fmt.Errorf("%w: reservedMetadata: %w", ErrInvalid, err)
	}
	for _, k := range o.ReservedMetadata {
		if err := unit.ValidateMetadata(k, nil); err != nil {
			return fmt.Errorf("%w: reservedMetadata: %w", ErrInvalid, err)
		}
	}
	if err := registry.CheckRecord(fmt.Sprintf("the scheduler policy (%d roles)", len(o.Roles)), putOptions(e.cfg.Keys, o)); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return e.submit(ctx, &policyWrite{options: o})
}

func optionsFromAPI(s apiv1.Scheduler) scheduler.Options {
	o := scheduler.Options{Strategy: s.Placement, ReservedMetadata: slices.Clone(s.ReservedMetadata)}
	slices.Sort(o.ReservedMetadata)
	o.ReservedMetadata = slices.Compact(o.ReservedMetadata)
	if len(s.Roles) > 0 {
		o.Roles = map[string]scheduler.RolePolicy{}
		for name, p := range s.Roles {
			o.Roles[name] = scheduler.RolePolicy{Weight: p.Weight,
				Quota: scheduler.Resources{CPUPercent: p.Quota.CPUPercent, MemoryBytes: p.Quota.MemoryBytes}}
		}
	}
	return o
}

func optionsToAPI(o scheduler.Options) apiv1.Scheduler {
	s := apiv1.Scheduler{Placement: o.Strategy, ReservedMetadata: slices.Clone(o.ReservedMetadata)}
	if s.Placement == "" {
		s.Placement = scheduler.Spread
	}
	if len(o.Roles) > 0 {
		s.Roles = map[string]apiv1.RolePolicy{}
		for name, p := range o.Roles {
			s.Roles[name] = apiv1.RolePolicy{Weight: p.Weight,
				Quota: apiv1.Resources{CPUPercent: p.Quota.CPUPercent, MemoryBytes: p.Quota.MemoryBytes}}
		}
	}
	return s
}

// putOptions is the op that stores the placement policy.
func putOptions(keys registry.Keys, o scheduler.Options) registry.Op {
	s := optionsToAPI(o)
	b, _ := json.Marshal(s)
	return registry.Op{Key: keys.SchedulerConfig(), Value: string(b)}
}

// loadOptions reads the stored policy; a policy that no longer validates is
// reported and replaced by the default.
func (t *term) loadOptions(raw []byte) {
	if raw == nil {
		return
	}
	var s apiv1.Scheduler
	if err := json.Unmarshal(raw, &s); err != nil {
		t.e.log.Error("stored scheduler policy does not decode; using the default", "err", err)
		return
	}
	o := optionsFromAPI(s)
	if err := t.sched.SetOptions(o); err != nil {
		t.e.log.Error("stored scheduler policy is invalid; using the default", "err", err)
		return
	}
	t.options = o
}
