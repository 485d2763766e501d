package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/flotilla/flotilla/internal/unit"
)

// A plan shows what a write would do without making it: the write is
// validated as it would be (validateUnitsWrite, on the loop, against
// memory), and each unit it touches is compared as it is with as the
// write would leave it; a unit the write would have placed again is
// decided by the scheduler as if it were the only one placed.

// Plan actions of a unit (PlannedUnit.Action).
const (
	PlanNone      = "none"       // nothing happens to it
	PlanSubmit    = "submit"     // it is stored, not scheduled (or a template)
	PlanUpdate    = "update"     // its file changes; it does not run, or not yet
	PlanStart     = "start"      // it starts on Target
	PlanRestart   = "restart"    // it restarts on Target (its machine) with the new file
	PlanMove      = "move"       // it stops on Machine and starts on Target
	PlanStop      = "stop"       // it stops (desired state inactive or loaded)
	PlanDestroy   = "destroy"    // it is destroyed
	PlanNotPlaced = "not-placed" // it should run but no machine can take it (Reason)
)

// Plan changes of a unit's file (PlannedUnit.Change).
const (
	PlanNew       = "new"
	PlanChanged   = "changed"
	PlanUnchanged = "unchanged"
	PlanDestroyed = "destroyed"
)

// MaxPlannedUnits is how many units a plan lists one by one; the counts
// cover every unit.
const MaxPlannedUnits = 1000

// PlannedUnit is what a write would do to one unit.
type PlannedUnit struct {
	Name   string
	Change string // PlanNew, PlanChanged, PlanUnchanged, PlanDestroyed
	// Version is the unit's current version (0: none), Diff the unified
	// diff of its file against the cluster's (changed units).
	Version      int
	Diff         string
	DesiredState string // as the write leaves it
	Action       string // Plan*
	Machine      string // where it is scheduled now
	Target       string // where it would run
	Reason       string // why it could not be placed
	// Deployment says which deployment would replace it, and how.
	Deployment string
}

// PlanResult is what a write would do.
type PlanResult struct {
	// Index is the check index: a write with it (ApplyOptions.CheckIndex)
	// is refused if any of these units changed since.
	Index int64
	Units []PlannedUnit // sorted by name, at most MaxPlannedUnits
	More  int           // units left out of Units
	// Counts are the units by Change and by Action.
	Counts map[string]int
}

// planWrite asks for a plan of a write; validateRound answers it, and it is
// never committed.
type planWrite struct {
	uw  unitsWrite
	out *PlanResult
}

func (*planWrite) isWrite() {}

// Plan returns what Apply(changes) would do, changing nothing.
func (e *Engine) Plan(ctx context.Context, changes []Change, opts ApplyOptions) (PlanResult, error) {
	var out PlanResult
	err := e.submit(ctx, &planWrite{uw: unitsWrite{changes: changes, update: opts.Update}, out: &out})
	return out, err
}

// plan validates w's write on a scratch round and describes its outcome.
func (t *term) plan(w *planWrite) error {
	p := &roundPlan{recs: map[string]*unitRec{}}
	if err := t.validateUnitsWrite(p, &w.uw); err != nil {
		return err
	}
	out := PlanResult{Counts: map[string]int{}}
	seen := map[string]bool{}
	for _, c := range w.uw.changes {
		seen[logOwner(c.Name)] = true
		if c.Range != nil {
			seen[c.Name] = true
		}
	}
	for name := range seen { // as the units are: p has the write's versions
		out.Index = max(out.Index, t.indexOf(&roundPlan{}, name))
	}
	names := make([]string, 0, len(p.recs))
	unchanged := func(name string) { // units given unchanged are in no recs
		if _, ok := p.recs[name]; !ok && t.units[name] != nil {
			names = append(names, name)
		}
	}
	for i, c := range w.uw.changes {
		if c.Range == nil {
			unchanged(c.Name)
			continue
		}
		if i < len(w.uw.rangeNames) {
			for _, name := range w.uw.rangeNames[i] {
				unchanged(name)
			}
		}
	}
	for name := range p.recs {
		names = append(names, name)
	}
	deployed := map[string]string{} // instance -> how its deployment replaces it
	for tmpl, d := range p.deploys {
		if d == nil || !d.Active() {
			continue
		}
		how := fmt.Sprintf("the deployment of %s version %d replaces it, %d at a time", tmpl, d.ToVersion, d.Strategy.MaxParallel)
		if d.Strategy.Canary > 0 {
			how += fmt.Sprintf(", after %d canaries", d.Strategy.Canary)
		}
		for _, name := range d.Instances {
			deployed[name] = how
			names = append(names, name)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	for _, name := range names {
		next, ok := p.recs[name]
		if !ok {
			next = t.units[name]
		}
		pu := t.planUnit(p, name, t.units[name], next)
		if how, ok := deployed[name]; ok && next != nil {
			pu.Deployment, pu.Change = how, PlanChanged
			if tmpl := p.recs[unit.TemplateOf(name)]; tmpl != nil {
				if f, err := t.store.instanceFile(tmpl.file, name); err == nil {
					pu.Diff = unifiedDiff(name, next.file.Raw, f.Raw)
				}
			}
			switch pu.Action {
			case PlanNone:
				pu.Action = PlanRestart
			case PlanSubmit:
				pu.Action = PlanUpdate
			}
		}
		out.Counts[pu.Change]++
		out.Counts[pu.Action]++
		if len(out.Units) < MaxPlannedUnits {
			out.Units = append(out.Units, pu)
		} else {
			out.More++
		}
	}
	*w.out = out
	return nil
}

// planUnit compares unit name as it is (cur, nil: new) with as the write
// leaves it (next, nil: destroyed).
func (t *term) planUnit(p *roundPlan, name string, cur, next *unitRec) PlannedUnit {
	pu := PlannedUnit{Name: name}
	if l, ok := t.versions.logs[logOwner(name)]; ok {
		pu.Version = l.Current().Version
	}
	if cur != nil {
		pu.Machine = cur.machine
	}
	switch {
	case next == nil:
		pu.Change, pu.Action = PlanDestroyed, PlanDestroy
		return pu
	case cur == nil:
		pu.Change = PlanNew
	case cur.file.Hash != next.file.Hash:
		pu.Change = PlanChanged
		pu.Diff = unifiedDiff(name, cur.file.Raw, next.file.Raw)
	default:
		pu.Change = PlanUnchanged
	}
	pu.DesiredState = string(next.desired())
	wasRunning := cur != nil && cur.desired() == unit.Launched && cur.machine != ""
	switch {
	case unit.IsTemplate(name):
		pu.Action = PlanSubmit
	case next.desired() == unit.Inactive || (next.desired() == unit.Loaded && !wasRunning):
		pu.Action = PlanSubmit
		if pu.Change == PlanChanged {
			pu.Action = PlanUpdate
		}
		if wasRunning {
			pu.Action = PlanStop
		}
	case next.desired() == unit.Loaded:
		pu.Action = PlanStop
	case next.file.Fleet.Global:
		pu.Action, pu.Target = PlanStart, "(every machine it fits)"
		if cur != nil && cur.desired() == unit.Launched {
			pu.Action = PlanNone
			if pu.Change == PlanChanged {
				pu.Action = PlanRestart
			}
		}
	case next.machine != "" && cur != nil && cur.machine == next.machine && cur.desired() == unit.Launched:
		pu.Target, pu.Action = next.machine, PlanNone
		if pu.Change == PlanChanged {
			pu.Action = PlanRestart
		}
	default:
		d := t.sched.Decide(next.su)
		switch {
		case d.Machine == "":
			pu.Action, pu.Reason = PlanNotPlaced, d.Reason
		case wasRunning && d.Machine != cur.machine:
			pu.Action, pu.Target = PlanMove, d.Machine
		case wasRunning:
			pu.Action, pu.Target = PlanRestart, d.Machine
		default:
			pu.Action, pu.Target = PlanStart, d.Machine
		}
	}
	return pu
}

// unifiedDiff is the unified diff of a unit's file from the cluster's a to
// the new b.
func unifiedDiff(name, a, b string) string {
	return unit.Diff(name+" (cluster)", name+" (new)", a, b)
}
