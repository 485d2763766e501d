package engine

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flotilla/flotilla/internal/health"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/unit"
)

// Deployments (registry.Deployment). A round that gives a template a new
// file makes a deployment of the instances that follow the template (their
// file was made from one of its versions): the leader then replaces them a
// few at a time, as the new file's [X-Update] says, judging each by its
// health, after a pass of its loop (deploy). Which instances are replaced
// is read from the instances' files, never from the record alone, so a
// leader that takes over resumes without replacing an instance twice.
//
// The decision is stepDeployment, a pure function of the record, the
// instances as the leader sees them and the time; deploy turns its
// outcome into a round of writes (the instances' files, canaries made or
// destroyed, a revert, the record) through applyRound, as the API's are.

// deployState is the term's deployments: the loop's, as are the times.
type deployState struct {
	recs map[string]registry.Deployment // by template
	// replaced is when the loop gave an instance its new file, healthy
	// since when it has been seen healthy with it: memory only (a new
	// leader counts from when it took office).
	replaced, healthy map[string]time.Time
	// seenNew is when the loop first saw an instance with its new file.
	seenNew     map[string]time.Time
	lastReplace map[string]time.Time // by template: Stagger=
}

func newDeployState(recs map[string]registry.Deployment) deployState {
	if recs == nil {
		recs = map[string]registry.Deployment{}
	}
	return deployState{recs: recs, replaced: map[string]time.Time{}, healthy: map[string]time.Time{}, seenNew: map[string]time.Time{},
		lastReplace: map[string]time.Time{}}
}

// strategyOf is [X-Update] in the record's terms.
func strategyOf(u unit.Update) registry.DeployStrategy {
	return registry.DeployStrategy{MaxParallel: u.MaxParallel, MinHealthyTimeMs: u.MinHealthyTime.Milliseconds(),
		HealthyDeadlineMs: u.HealthyDeadline.Milliseconds(), ProgressDeadlineMs: u.ProgressDeadline.Milliseconds(),
		Canary: u.Canary, AutoPromote: u.AutoPromote, AutoRevert: u.AutoRevert, StaggerMs: u.Stagger.Milliseconds()}
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// deployInst is an instance of a deployment as the leader sees it.
type deployInst struct {
	exists   bool
	launched bool // desired launched, and placed
	isNew    bool // its file is the deployment's new one
	healthy  bool // active, healthy, running the file it has
	// healthyFor is how long it has been healthy with its file;
	// replacedFor how long since it was given the new file.
	healthyFor, replacedFor time.Duration
}

// deployStep is what stepDeployment decides.
type deployStep struct {
	rec      registry.Deployment
	changed  bool     // rec differs from the record
	replace  []string // instances to give the new file
	canaries []string // canary instances to make, launched with the new file
	destroy  []string // canaries to destroy
	revert   bool     // give the template its From file again (AutoRevert)
	// wake is how soon to look again though nothing changes (0: when
	// something does).
	wake time.Duration
}

// stepDeployment decides the next step of deployment d given its
// instances (Instances and Canaries, by name), at now.
func stepDeployment(d registry.Deployment, insts map[string]deployInst, now time.Time) deployStep {
	if d.Status != registry.DeployRunning && d.Status != registry.DeployCanaries {
		return deployStep{rec: d}
	}
	x := &stepper{d: d, insts: insts, now: now, st: deployStep{rec: d}, minHealthy: ms(d.Strategy.MinHealthyTimeMs)}
	if d.Strategy.Canary > 0 && !d.Promoted {
		if hold := x.canaries(); hold {
			return x.st
		}
	}
	return x.roll()
}

// stepper is one stepDeployment: its inputs and the step it builds.
type stepper struct {
	d          registry.Deployment
	insts      map[string]deployInst
	now        time.Time
	st         deployStep
	minHealthy time.Duration
}

// done says whether in runs the new file and has been healthy for
// MinHealthyTime.
func (x *stepper) done(in deployInst) bool {
	return in.isNew && in.healthy && in.healthyFor >= x.minHealthy
}

// wakeAt asks for another step within d at the latest.
func (x *stepper) wakeAt(d time.Duration) {
	if d > 0 && (x.st.wake == 0 || d < x.st.wake) {
		x.st.wake = d
	}
}

// late returns the first of names given the new file that is not done
// within HealthyDeadline ("" if none), asking to wake when the next may be.
func (x *stepper) late(names []string) string {
	s := x.d.Strategy
	for _, name := range names {
		in := x.insts[name]
		if !in.exists || !in.launched || !in.isNew || x.done(in) {
			continue
		}
		if s.HealthyDeadlineMs > 0 && in.replacedFor > ms(s.HealthyDeadlineMs) {
			return name
		}
		x.wakeAt(ms(s.HealthyDeadlineMs) - in.replacedFor)
		if in.healthy {
			x.wakeAt(x.minHealthy - in.healthyFor)
		}
	}
	return ""
}

// fail ends the deployment as failed with msg.
func (x *stepper) fail(msg string) deployStep {
	x.st.rec.Status, x.st.rec.Message, x.st.changed = registry.DeployFailed, msg, true
	x.st.destroy = append(x.st.destroy, x.d.Canaries...)
	x.st.revert = x.d.Strategy.AutoRevert && !x.d.Revert
	return x.st
}

// canaries steps a deployment whose canaries are not promoted: it starts
// them, fails the deployment when one is late, and promotes them when
// AutoPromote= says so. It returns true while the rest must wait.
func (x *stepper) canaries() (hold bool) {
	d, s := x.d, x.d.Strategy
	if len(d.Canaries) == 0 {
		x.st.canaries = canaryNames(d, x.insts)
		x.st.rec.Canaries, x.st.changed = x.st.canaries, true
		return true
	}
	if name := x.late(d.Canaries); name != "" {
		x.st = x.fail(fmt.Sprintf("canary %s was not healthy for %v within %v of starting", name, x.minHealthy, ms(s.HealthyDeadlineMs)))
		return true
	}
	for _, name := range d.Canaries {
		if !x.done(x.insts[name]) {
			return true
		}
	}
	switch {
	case s.AutoPromote:
		x.st.rec.Promoted, x.st.rec.Status, x.st.changed = true, registry.DeployRunning, true
		return false
	case d.Status != registry.DeployCanaries:
		x.st.rec.Status, x.st.rec.Message, x.st.changed = registry.DeployCanaries, "the canaries are healthy: promote to go on", true
	}
	return true
}

// roll steps the deployment's instances: it replaces as many as
// MaxParallel= allows beside those not yet healthy, and ends the
// deployment when every one is done or one is late.
func (x *stepper) roll() deployStep {
	d, s, now := x.d, x.d.Strategy, x.now
	if name := x.late(d.Instances); name != "" {
		return x.fail(fmt.Sprintf("%s was not healthy for %v within %v of being replaced", name, x.minHealthy, ms(s.HealthyDeadlineMs)))
	}
	nDone, unhealthy := 0, 0
	var todo []string
	for _, name := range d.Instances {
		in := x.insts[name]
		switch {
		case !in.exists:
			nDone++ // destroyed meanwhile: nothing to do
		case in.isNew:
			if !in.launched || x.done(in) {
				nDone++
			} else {
				unhealthy++
			}
		case !in.launched:
			x.st.replace = append(x.st.replace, name) // not running: its file only
		default:
			if !in.healthy {
				unhealthy++
			}
			todo = append(todo, name)
		}
	}
	st := &x.st
	if nDone > d.Done {
		st.rec.Done, st.rec.Progress, st.changed = nDone, now, true
	}
	if s.ProgressDeadlineMs > 0 && len(todo)+unhealthy > 0 {
		left := ms(s.ProgressDeadlineMs) - now.Sub(st.rec.Progress)
		if left <= 0 {
			return x.fail(fmt.Sprintf("no instance became healthy in %v (%d of %d done)", ms(s.ProgressDeadlineMs), nDone, len(d.Instances)))
		}
		x.wakeAt(left)
	}
	if d.Status == registry.DeployCanaries {
		st.rec.Status, st.rec.Message, st.changed = registry.DeployRunning, "", true
	}
	for budget := max(s.MaxParallel, 1) - unhealthy; budget > 0 && len(todo) > 0; budget-- {
		st.replace = append(st.replace, todo[0])
		todo = todo[1:]
		if s.StaggerMs > 0 {
			x.wakeAt(ms(s.StaggerMs))
			break // one at a time, Stagger= apart (deploy holds it back)
		}
	}
	if nDone == len(d.Instances) {
		st.rec.Status, st.changed = registry.DeploySucceeded, true
		if !d.Revert {
			st.rec.Message = ""
		}
		st.destroy = append(st.destroy, d.Canaries...)
	}
	return x.st
}

// canaryNames names d's canaries: the next numbers after the largest
// numeric instance of the template, else canary-1, canary-2...
func canaryNames(d registry.Deployment, insts map[string]deployInst) []string {
	top, numeric := 0, true
	for _, name := range d.Instances {
		n, err := strconv.Atoi(unit.Instance(name))
		if err != nil {
			numeric = false
			break
		}
		top = max(top, n)
	}
	var out []string
	for i := 1; len(out) < d.Strategy.Canary; i++ {
		inst := "canary-" + strconv.Itoa(i)
		if numeric {
			inst = strconv.Itoa(top + i)
		}
		name := unit.Prefix(d.Unit) + "@" + inst + strings.TrimPrefix(d.Unit, unit.Prefix(d.Unit)+"@")
		if !insts[name].exists {
			out = append(out, name)
		}
	}
	return out
}

// templateFollowers returns the instances of template tmpl (as lookup sees them)
// whose file was made from one of the versions in log, sorted, leaving
// out those skip holds.
func (t *term) templateFollowers(tmpl string, log registry.VersionLog, skip map[string]*unitRec, lookup func(string) *unitRec) []string {
	var tmplFiles []*unit.File
	for _, v := range log.Versions {
		if f := t.store.files[v.Content]; f != nil && f.text != "" {
			if tf, err := unit.Parse(tmpl, []byte(f.text)); err == nil {
				tmplFiles = append(tmplFiles, tf)
			}
		}
	}
	if cur := lookup(tmpl); cur != nil {
		tmplFiles = append(tmplFiles, cur.file)
	}
	shared := map[*unit.File]string{} // a Shareable template's instances' hash
	var out []string
	for name := range t.units {
		if !unit.IsInstance(name) || unit.TemplateOf(name) != tmpl {
			continue
		}
		if _, ok := skip[name]; ok {
			continue
		}
		r := lookup(name)
		if r == nil {
			continue
		}
		for _, tf := range tmplFiles {
			h, ok := shared[tf]
			if !ok {
				f, err := unit.Instantiate(tf, unit.Instance(name))
				if err != nil {
					continue
				}
				h = f.Hash
				if unit.Shareable(tf) {
					shared[tf] = h
				}
			}
			if h == r.file.Hash {
				out = append(out, name)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// noteDeployment makes the deployment of template name's new file, next,
// in round p, as req replaces it. local holds the request's other changes
// (instances it changes itself are not the deployment's).
func (t *term) noteDeployment(p *roundPlan, name string, next *unitRec, log registry.VersionLog, local map[string]*unitRec, req *unitsWrite, now time.Time) {
	revert := req.autoRevert
	var running []string
	if unit.IsTemplate(name) {
		lookup := func(n string) *unitRec { return p.lookup(t)(nil, n) }
		for _, n := range t.templateFollowers(name, log, local, lookup) {
			if r := lookup(n); r != nil && r.file.Hash != t.instanceHash(next.file, n) {
				running = append(running, n)
			}
		}
	} else {
		running = []string{name} // replaced by this round: watched until healthy
	}
	if len(running) == 0 && !revert {
		return // a revert is recorded even with nothing to roll back
	}
	cur := log.Current()
	from := log.Versions[max(len(log.Versions)-2, 0)]
	update, err := unit.OverrideUpdate(unit.UpdateOf(next.file), req.update)
	if err != nil { // checked by ApplyWith against the defaults: a file's own may still clash
		update = unit.UpdateOf(next.file)
	}
	d := registry.Deployment{Unit: name, FromVersion: from.Version, ToVersion: cur.Version, From: from.Content, To: cur.Content, ToHash: cur.Hash,
		Strategy: strategyOf(update), Status: registry.DeployRunning, Instances: slices.Clip(running), Revert: revert,
		Created: now.UTC(), Updated: now.UTC(), Progress: now.UTC()}
	if old, ok := t.deployOf(p, name); ok && old.Active() {
		d.Message = fmt.Sprintf("supersedes the deployment of version %d", old.ToVersion)
	}
	if revert || !unit.IsTemplate(name) {
		d.Strategy.Canary = 0 // back to what ran, or one unit: no canaries
	}
	if revert {
		if old, ok := t.deployOf(p, name); ok {
			d.Message = fmt.Sprintf("rolls back the failed deployment of version %d: %s", old.ToVersion, old.Message)
		}
	}
	p.setDeploy(name, &d)
}

// deployable reports whether replacing a unit of its own, cur, with next
// is watched as a deployment: it runs (launched, not Global=) before and
// after. Its deployment has one instance, the unit, which the round
// replaces itself; the deployment judges its health and reverts it.
func deployable(cur, next *unitRec) bool {
	return cur.desired() == unit.Launched && next.desired() == unit.Launched && !next.file.Fleet.Global && !unit.IsInstance(next.name())
}

// newFile reports whether unit name (r) of deployment d has d's new file.
func (t *term) newFile(d registry.Deployment, name string, r *unitRec) bool {
	if name == d.Unit { // a unit of its own
		return r.file.Hash == d.ToHash
	}
	tmpl := t.units[d.Unit]
	return tmpl != nil && r.file.Hash == t.instanceHash(tmpl.file, name)
}

// instanceHash is the hash of instance name's file made from template f.
func (t *term) instanceHash(f *unit.File, name string) string {
	inf, err := t.store.instanceFile(f, name)
	if err != nil {
		return ""
	}
	return inf.Hash
}

func (t *term) deployOf(p *roundPlan, name string) (registry.Deployment, bool) {
	if d, ok := p.deploys[name]; ok {
		if d == nil {
			return registry.Deployment{}, false
		}
		return *d, true
	}
	d, ok := t.deploys.recs[name]
	return d, ok
}

func (p *roundPlan) setDeploy(name string, d *registry.Deployment) {
	if p.deploys == nil {
		p.deploys = map[string]*registry.Deployment{}
	}
	p.deploys[name] = d
}

// deployOps adds the round's deployments to its operations.
func (t *term) deployOps(p *roundPlan) {
	for name, d := range p.deploys {
		if d == nil {
			p.ops = append(p.ops, registry.DeleteDeployment(t.keys, name))
		} else {
			p.ops = append(p.ops, registry.PutDeployment(t.keys, *d))
		}
	}
}

// applyDeploys makes memory follow a durable round, telling /v1/events
// and counting ended deployments. It runs on the loop.
func (t *term) applyDeploys(p *roundPlan) {
	for name, d := range p.deploys {
		old, had := t.deploys.recs[name]
		if d == nil {
			delete(t.deploys.recs, name)
			t.events.append(loggedEvent{kind: deploymentKind, unit: name, removed: true, rev: t.committer.Revision()}, t.now)
			continue
		}
		t.deploys.recs[name] = *d
		if d.Active() && !unit.IsTemplate(name) && (!had || old.ToVersion != d.ToVersion) {
			t.deploys.replaced[name] = t.now // replaced by this round
			delete(t.deploys.healthy, name)
		}
		if !d.Active() && (!had || old.Active() || old.ToVersion != d.ToVersion) {
			t.e.cfg.Metrics.DeploymentSteps.WithLabelValues(d.Status).Inc()
		}
		t.events.append(loggedEvent{kind: deploymentKind, unit: name, a: d.Status, b: d.Message, version: int32(d.ToVersion),
			done: int32(d.Done), rev: t.committer.Revision()}, t.now)
	}
}

// deployView is the instances of d as the leader sees them at now.
func (t *term) deployView(d registry.Deployment, now time.Time) map[string]deployInst {
	out := make(map[string]deployInst, len(d.Instances)+len(d.Canaries))
	for _, name := range append(slices.Clone(d.Instances), d.Canaries...) {
		r := t.units[name]
		if r == nil {
			delete(t.deploys.replaced, name)
			delete(t.deploys.seenNew, name)
			delete(t.deploys.healthy, name)
			continue
		}
		// launched: wanted running and placed, or on its way to a machine
		// (moving: placed again once its old copy stopped); one that fits
		// nowhere is given its new file at once, as a stopped one is.
		_, moving := t.moves.draining[name]
		in := deployInst{exists: true, launched: r.desired() == unit.Launched && (r.machine != "" || moving)}
		in.isNew = t.newFile(d, name, r)
		// mine: this term gave it the new file at replacedAt; it must have
		// become active since, not merely report the new file while the
		// old process still runs.
		replacedAt, mine := t.deploys.replaced[name]
		if in.isNew {
			first, ok := t.deploys.seenNew[name]
			if !ok {
				first = now
				t.deploys.seenNew[name] = now
			}
			if !mine {
				replacedAt = first // replaced before this term: counted from when it was first seen
			}
			in.replacedFor = now.Sub(replacedAt)
		}
		var since time.Time
		if m := t.machines[r.machine]; m != nil {
			if s, ok := t.statusOf(m, name); ok && s.Active == "active" && s.Hash == r.file.Hash && s.Health == health.Healthy &&
				(!mine || s.Since.After(replacedAt)) {
				in.healthy, since = true, s.Since
			}
		}
		if in.healthy {
			at, ok := t.deploys.healthy[name]
			if !ok {
				at = now
				t.deploys.healthy[name] = at
			}
			in.healthyFor = now.Sub(at)
			if mine && !since.IsZero() { // active since then: at most that long
				in.healthyFor = min(in.healthyFor, now.Sub(since))
			}
		} else {
			delete(t.deploys.healthy, name)
		}
		out[name] = in
	}
	return out
}

// deploy carries out the active deployments a step each. It runs on the
// loop, after a pass, and returns when it would look again though nothing
// changed (zero: not by time).
func (t *term) deploy() time.Time {
	now := t.now
	var wake time.Time
	var steps []deployStep
	for _, d := range t.deploys.recs {
		if !d.Active() {
			continue
		}
		st := stepDeployment(d, t.deployView(d, now), now)
		if last, ok := t.deploys.lastReplace[d.Unit]; ok && d.Strategy.StaggerMs > 0 && now.Sub(last) < ms(d.Strategy.StaggerMs) {
			st.replace = nil // not yet
			st.wake = ms(d.Strategy.StaggerMs) - now.Sub(last)
		}
		if st.wake > 0 && (wake.IsZero() || now.Add(st.wake).Before(wake)) {
			wake = now.Add(st.wake)
		}
		if st.changed || len(st.replace)+len(st.canaries)+len(st.destroy) > 0 || st.revert {
			steps = append(steps, st)
		}
	}
	t.runSteps(steps, now)
	return wake
}

// runSteps writes the steps' changes, a round each, one after the other.
func (t *term) runSteps(steps []deployStep, now time.Time) {
	if len(steps) > 0 {
		t.runStep(steps[0], now, func() { t.runSteps(steps[1:], now) })
	}
}

// runStep writes a step's changes in one round, then runs next.
func (t *term) runStep(st deployStep, now time.Time, next func()) {
	tmpl := t.units[st.rec.Unit]
	var changes []Change
	var revertTo int
	if tmpl != nil {
		for _, name := range st.replace {
			if !unit.IsInstance(name) {
				continue // a unit of its own: its write replaced it
			}
			if f, err := t.store.instanceFile(tmpl.file, name); err == nil {
				changes = append(changes, Change{Name: name, File: f, Replace: true})
			}
		}
		for _, name := range st.canaries {
			if f, err := t.store.instanceFile(tmpl.file, name); err == nil {
				changes = append(changes, Change{Name: name, File: f, DesiredState: unit.Launched})
			}
		}
		if st.revert {
			if f := t.store.files[st.rec.From]; f != nil && f.text != "" {
				if tf, err := unit.Parse(st.rec.Unit, []byte(f.text)); err == nil {
					changes = append(changes, Change{Name: st.rec.Unit, File: tf, Replace: true})
					revertTo = st.rec.FromVersion
				}
			}
		}
	}
	for _, name := range st.destroy {
		changes = append(changes, Change{Name: name, Destroy: true})
	}
	rec := st.rec
	rec.Updated = now.UTC()
	uw := &unitsWrite{changes: changes, by: "deployment", revertTo: revertTo, deploy: &rec, autoRevert: st.revert}
	req := &applyReq{w: uw, res: make(chan applyRes, 1), queued: now}
	t.applyRound([]*applyReq{req}, func() {
		t.stepped(st, rec, <-req.res, now) // the round has answered
		next()
	})
}

// stepped notes a deployment step's round, answered with res.
func (t *term) stepped(st deployStep, rec registry.Deployment, res applyRes, now time.Time) {
	if res.err != nil {
		t.e.log.Warn("a deployment step failed; retrying on the next pass", "unit", rec.Unit, "err", res.err)
		return
	}
	for _, name := range st.replace {
		t.deploys.replaced[name] = now
		delete(t.deploys.healthy, name) // healthy with its old file: counts for nothing
	}
	steps := t.e.cfg.Metrics.DeploymentSteps
	steps.WithLabelValues("replace").Add(float64(len(st.replace)))
	steps.WithLabelValues("canary").Add(float64(len(st.canaries)))
	steps.WithLabelValues("destroy").Add(float64(len(st.destroy)))
	if len(st.replace) > 0 {
		t.deploys.lastReplace[rec.Unit] = now
	}
	t.e.log.Info("deployment step", "unit", rec.Unit, "status", rec.Status, "replaced", st.replace,
		"canaries", st.canaries, "destroyed", st.destroy, "revert", st.revert, "done", rec.Done, "of", len(rec.Instances))
}

// deployCtl is a request to promote, pause, resume or abort a deployment.
type deployCtl struct {
	unit, action string
}

func (*deployCtl) isWrite() {}

// Deployment actions.
const (
	DeployPromote = "promote"
	DeployPause   = "pause"
	DeployResume  = "resume"
	DeployAbort   = "abort"
)

// validateDeployCtl validates a deployment action and records the
// deployment it leaves.
func (t *term) validateDeployCtl(p *roundPlan, w *deployCtl) error {
	d, ok := t.deployOf(p, w.unit)
	if !ok {
		return fmt.Errorf("%w: %s has no deployment", ErrNotFound, w.unit)
	}
	if !d.Active() {
		return fmt.Errorf("%w: the deployment of %s version %d has ended (%s)", ErrConflict, w.unit, d.ToVersion, d.Status)
	}
	switch w.action {
	case DeployPromote:
		if d.Strategy.Canary == 0 || d.Promoted {
			return fmt.Errorf("%w: the deployment of %s has no canaries waiting", ErrConflict, w.unit)
		}
		d.Promoted = true
		if d.Status == registry.DeployCanaries {
			d.Status, d.Message = registry.DeployRunning, ""
		}
	case DeployPause:
		d.Status, d.Message = registry.DeployPaused, "paused"
	case DeployResume:
		if d.Status != registry.DeployPaused {
			return fmt.Errorf("%w: the deployment of %s is not paused (%s)", ErrConflict, w.unit, d.Status)
		}
		d.Status, d.Message, d.Progress = registry.DeployRunning, "", t.now.UTC()
	case DeployAbort:
		d.Status, d.Message = registry.DeployAborted, "aborted: the instances keep the file they have"
	default:
		return fmt.Errorf("%w: deployment action %q: want promote, pause, resume or abort", ErrInvalid, w.action)
	}
	d.Updated = t.now.UTC()
	p.setDeploy(w.unit, &d)
	return nil
}

// ControlDeployment promotes, pauses, resumes or aborts the deployment of
// template name.
func (e *Engine) ControlDeployment(ctx context.Context, name, action string) error {
	return e.submit(ctx, &deployCtl{unit: name, action: action})
}

// DeploymentInfo is a deployment with its instances' progress.
type DeploymentInfo struct {
	registry.Deployment
	// Healthy counts the instances of the deployment (and canaries)
	// healthy now, Running those launched.
	Healthy, Running int
	// NewInstances are those with the new file.
	NewInstances []string
}

// Deployments returns the latest deployment of each template, by template.
func (e *Engine) Deployments() ([]DeploymentInfo, error) {
	t := e.leader()
	if t == nil {
		return nil, ErrNotLeader
	}
	return readOnLoop(t, func() ([]DeploymentInfo, error) { return t.deployments() })
}

// deployments is Deployments on the loop.
func (t *term) deployments() ([]DeploymentInfo, error) {
	out := make([]DeploymentInfo, 0, len(t.deploys.recs))
	for _, d := range t.deploys.recs {
		out = append(out, t.deploymentInfo(d))
	}
	slices.SortFunc(out, func(a, b DeploymentInfo) int { return strings.Compare(a.Unit, b.Unit) })
	return out, nil
}

// Deployment returns template name's latest deployment.
func (e *Engine) Deployment(name string) (DeploymentInfo, error) {
	t := e.leader()
	if t == nil {
		return DeploymentInfo{}, ErrNotLeader
	}
	return readOnLoop(t, func() (DeploymentInfo, error) { return t.deployment(name) })
}

// deployment is Deployment on the loop.
func (t *term) deployment(name string) (DeploymentInfo, error) {
	d, ok := t.deploys.recs[name]
	if !ok {
		return DeploymentInfo{}, fmt.Errorf("%w: %s has no deployment", ErrNotFound, name)
	}
	return t.deploymentInfo(d), nil
}

func (t *term) deploymentInfo(d registry.Deployment) DeploymentInfo {
	info := DeploymentInfo{Deployment: d}
	for _, name := range append(slices.Clone(d.Instances), d.Canaries...) {
		r := t.units[name]
		if r == nil {
			continue
		}
		if r.desired() == unit.Launched {
			info.Running++
		}
		if t.newFile(d, name, r) {
			info.NewInstances = append(info.NewInstances, name)
		}
		if m := t.machines[r.machine]; m != nil {
			if s, ok := t.statusOf(m, name); ok && s.Active == "active" && s.Health == health.Healthy && s.Hash == r.file.Hash {
				info.Healthy++
			}
		}
	}
	return info
}
