package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/scheduler"
	"github.com/flotilla/flotilla/internal/unit"
)

// Errors of Apply, matched with errors.Is. Each is wrapped with a message
// naming the unit.
var (
	ErrNotFound    = errors.New("not found")
	ErrConflict    = errors.New("conflict")
	ErrInvalid     = errors.New("invalid")
	ErrUnavailable = errors.New("etcd unavailable")
)

// Change is one requested change of a unit. File is set to create the unit
// (a unit that exists with the same hash is left as is; one with another
// hash is refused with ErrConflict, or replaced when Replace is set);
// DesiredState, when not "", sets its desired state; Destroy removes it.
//
// A replaced unit keeps its desired state and its machine, whose agent
// restarts it with the new file, unless the new file's placement (its
// [X-Fleet] options or resource needs) differs: then it is placed again,
// as a new unit, and may move (a Singleton= unit once its copy on its
// machine has stopped: movesFirst).
//
// A change with Range names the instances of the template Name in the
// range (unit.ParseRange) and sets their DesiredState, creating those that
// do not exist, or destroys them; it carries no file. Starting or stopping
// a range is written as one key (registry.RangeRecord) whatever its size.
type Change struct {
	Name         string
	File         *unit.File
	DesiredState unit.DesiredState
	Destroy      bool
	Replace      bool
	Range        *unit.Range
}

// applyReq is one API write on its way to the loop, with where its answer
// goes.
type applyReq struct {
	w   write
	res chan applyRes
	// queued is when the request reached the loop's queue.
	queued time.Time
}

// write is one API write: a *unitsWrite, *machineWrite, *policyWrite,
// *tagWrite or *versionsWrite.
type write interface{ isWrite() }

// unitsWrite changes units: all its changes, or none.
type unitsWrite struct {
	changes []Change
	by      string // who asks: names the versions it makes
	check   *int64 // the check index it must match (ApplyOptions)
	// revertTo is the version a revert returns to (0: not a revert).
	revertTo int
	// deploy is a deployment's record to write with the changes (a step
	// of it: deploy.go); autoRevert says the changes roll a failed one
	// back.
	deploy     *registry.Deployment
	autoRevert bool
	update     map[string]string // ApplyOptions.Update
	// rangeNames are the names of each range change's instances, once
	// validated (by change index).
	rangeNames [][]string
}

// machineWrite changes one machine's metadata, or whether it drains.
type machineWrite struct {
	machine string
	patch   map[string]*string
	drain   *bool
	// parallel is the drain's instances of one template moving at once.
	parallel int
}

// policyWrite sets the placement policy.
type policyWrite struct {
	options scheduler.Options
}

func (*unitsWrite) isWrite()   {}
func (*machineWrite) isWrite() {}
func (*policyWrite) isWrite()  {}

type applyRes struct {
	names []string
	err   error
}

// Apply validates changes against the cluster and commits them to etcd
// (all of them, or none when one is invalid), then returns. It must be
// called on the leader; elsewhere it returns ErrNotLeader.
func (e *Engine) Apply(ctx context.Context, changes []Change) error {
	return e.ApplyWith(ctx, changes, ApplyOptions{})
}

// ApplyOptions are how a write is made.
type ApplyOptions struct {
	// By names who asks (a token's or a certificate's name): the versions
	// the write makes say so.
	By string
	// CheckIndex, when set, refuses the write with ErrConflict if any of
	// its units (or an instance's template) has a version newer than it:
	// the index a plan showed (UnitVersions.Index, PlanResult.Index).
	CheckIndex *int64
	// Update overrides [X-Update] options of the templates whose new files
	// the write deploys (option name to value).
	Update map[string]string
}

// ApplyWith is Apply with options.
func (e *Engine) ApplyWith(ctx context.Context, changes []Change, opts ApplyOptions) error {
	if _, err := unit.OverrideUpdate(unit.DefaultUpdate, opts.Update); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	for _, c := range changes {
		// The API checks desired states; a caller that did not would
		// otherwise stop the leader's loop (wantOf panics).
		if c.DesiredState == "" {
			continue
		}
		if _, err := unit.ParseDesiredState(string(c.DesiredState)); err != nil {
			return fmt.Errorf("%w: unit %s: %w", ErrInvalid, c.Name, err)
		}
	}
	return e.submit(ctx, &unitsWrite{changes: changes, by: opts.By, check: opts.CheckIndex, update: opts.Update})
}

// PatchMachine changes a machine's metadata durably: each key of patch is
// set to its value, or removed when the value is nil, over what the machine
// reports. Units whose constraints no longer hold there are moved.
func (e *Engine) PatchMachine(ctx context.Context, id string, patch map[string]*string) error {
	for k, v := range patch {
		if err := unit.ValidateMetadata(k, v); err != nil {
			return fmt.Errorf("%w: machine %s: %w", ErrInvalid, id, err)
		}
	}
	return e.submit(ctx, &machineWrite{machine: id, patch: patch})
}

// DrainMachine sets whether a machine drains, durably: a draining machine
// takes no units, and its units move elsewhere (plan.go): a unit that fits
// nowhere else stays, a launched unit that is not Singleton= starts on its
// new machine before it stops there, and at most maxParallel instances of
// one template (0: one) are mid-move at once. Undraining lets it take
// units again; nothing moves back by itself.
func (e *Engine) DrainMachine(ctx context.Context, id string, drain bool, maxParallel int) error {
	if maxParallel < 0 || maxParallel > apiv1.MaxDrainParallel {
		return fmt.Errorf("%w: machine %s: maxParallel %d: want 1 to %d (0: 1)", ErrInvalid, id, maxParallel, apiv1.MaxDrainParallel)
	}
	return e.submit(ctx, &machineWrite{machine: id, drain: &drain, parallel: max(maxParallel, 1)})
}

func (e *Engine) submit(ctx context.Context, w write) error {
	r := &applyReq{w: w, res: make(chan applyRes, 1)}
	t := e.leader()
	if t == nil {
		return ErrNotLeader
	}
	if _, ok := t.degradedSince(); ok {
		return t.unreachableErr(false)
	}
	r.queued = time.Now()
	select {
	case t.reqs <- r:
	case <-t.ctx.Done():
		return ErrNotLeader
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case res := <-r.res:
		return res.err
	case <-t.ctx.Done():
		select {
		case res := <-r.res: // answered as the term ended
			return res.err
		case <-time.After(2 * time.Second): // queued after the loop's last drain: never taken
			return ErrNotLeader
		}
	case <-ctx.Done():
		// The change may still commit; the caller cannot know. Say so.
		return fmt.Errorf("%w (the change may still be applied)", ctx.Err())
	}
}

// applyRound validates and commits a round of requests in as few etcd
// transactions as the ops allow, then runs after (if any) once every
// request is answered. Each request stands or falls alone in validation;
// an etcd failure fails the whole round. Its steps: validateRound decides
// what the round comes to, roundOps turns that into etcd operations,
// roundTxn into the txn the driver commits, and applyPlan makes memory
// follow once they are durable.
func (t *term) applyRound(round []*applyReq, after func()) {
	ph := &passPhases{}
	ph.start(time.Now())
	ph.note("requests", len(round))
	var waited time.Duration // the longest a request of the round waited for the loop
	for _, r := range round {
		waited = max(waited, ph.began.Sub(r.queued))
	}
	if waited >= slowPass {
		ph.note("waited for the loop (ms)", int(waited.Milliseconds()))
	}
	ph.note("unwritten", t.store.standing.count())
	finish := func() {
		ph.logSlow(t.e.log, "apply round")
		if after != nil {
			after()
		}
	}
	// A range record would create a destroyed instance again on the next
	// leader's load (records.go): before a round destroys anything, write
	// out what ranges stand for. Other changes write their units' records,
	// newer than any range.
	if !destroys(round) {
		ph.done("materialize")
		t.writeRound(round, ph, finish)
		return
	}
	t.materialize(func(err error) {
		ph.done("materialize")
		if err != nil {
			answerAll(round, err)
			finish()
			return
		}
		t.writeRound(round, ph, finish)
	})
}

// writeRound validates the round, has its txn committed and, once it is
// durable, applies it and drops the files no unit names any more.
func (t *term) writeRound(round []*applyReq, ph *passPhases, finish func()) {
	p := t.validateRound(round)
	ph.done("validate")
	for _, a := range p.answered {
		a.req.res <- applyRes{err: a.err}
	}
	if len(p.accepted) == 0 {
		finish()
		return
	}
	t.roundOps(p)
	ph.done("ops")
	ph.note("ops", len(p.ops))
	tx, stored := t.roundTxn(p)
	tx.then = func(landed int, err error) {
		t.store.markStored(stored(landed))
		ph.done("commit")
		if err != nil {
			answerAll(p.accepted, err)
			finish()
			return
		}
		t.applyPlan(p)
		t.publishViews() // the readers waiting for the round (readViews)
		ph.done("apply")
		t.dropFiles(finish)
	}
	t.emit(tx)
}

// roundPlan is what a round of requests comes to. validateRound fills the
// first part, roundOps the second; nothing of it is in the term's memory
// until applyPlan.
type roundPlan struct {
	accepted []*applyReq
	answered []answer                      // the requests answered by validation alone
	recs     map[string]*unitRec           // the round's units after it; a nil value: destroyed
	machines map[string]map[string]*string // machines' overrides after the round
	drain    map[string]int                // machine -> its drain's parallel (0: not draining)
	options  *scheduler.Options            // a new placement policy
	// single holds the instances of a round of one request changing one
	// range (not destroying it), as flotilla start
	// 'web@{1..1000000}.service' is: validated by index, not into recs.
	single *rangeUnits
	// versions are the versions of unit files the round makes, deploys
	// the deployments it writes (nil: deleted).
	versions roundVersions
	deploys  map[string]*registry.Deployment

	ops       []registry.Op
	entries   []roundEntry    // the round's units, read once, applied in this order
	newRanges []*pendingRange // range records the round writes
	// newUnits sizes the map they join.
	newUnits int
}

func answerAll(reqs []*applyReq, err error) {
	for _, req := range reqs {
		req.res <- applyRes{err: err}
	}
}

// lookup finds a unit's record as the round has it so far: in the request's
// own changes (local), the round's earlier requests, or memory.
func (p *roundPlan) lookup(t *term) func(local map[string]*unitRec, name string) *unitRec {
	return func(local map[string]*unitRec, name string) *unitRec {
		if r, ok := local[name]; ok {
			return r
		}
		if r, ok := p.recs[name]; ok {
			return r
		}
		return t.units[name]
	}
}

// validateRound validates each request of the round against memory and the
// round's earlier requests; the answers of those refused (and of plans) are
// the plan's answered. It only reads the term's state.
func (t *term) validateRound(round []*applyReq) *roundPlan {
	p := &roundPlan{
		recs:     map[string]*unitRec{},
		machines: map[string]map[string]*string{},
		drain:    map[string]int{},
	}
	if uw, ok := round[0].w.(*unitsWrite); ok && len(round) == 1 && len(uw.changes) == 1 {
		if c := uw.changes[0]; c.Range != nil && !c.Destroy && c.File == nil && p.lookup(t)(nil, c.Name) != nil {
			n := max(c.Range.Len(), 0)
			p.single = &rangeUnits{curs: make([]*unitRec, n), nexts: make([]*unitRec, n)}
		}
	}
	for _, req := range round {
		var err error
		switch w := req.w.(type) {
		case *policyWrite:
			p.options = &w.options // the last one of the round wins, as if applied in order
		case *machineWrite:
			err = t.validateMachineWrite(p, w)
		case *unitsWrite:
			err = t.validateUnitsWrite(p, w)
		case *tagWrite:
			err = t.validateTag(p, w)
		case *versionsWrite:
			p.versions.keep = &w.keep
		case *deployCtl:
			err = t.validateDeployCtl(p, w)
		case *planWrite:
			if err = t.plan(w); err == nil {
				p.answered = append(p.answered, answer{req: req}) // a plan is never committed
				continue
			}
		}
		if err != nil {
			p.answered = append(p.answered, answer{req: req, err: err})
			continue
		}
		p.accepted = append(p.accepted, req)
	}
	return p
}

// answer is a request's answer known before any write: its rejection, or
// a plan's.
type answer struct {
	req *applyReq
	err error
}

// validateMachineWrite validates a change of a machine's metadata or drain.
func (t *term) validateMachineWrite(p *roundPlan, req *machineWrite) error {
	if t.machines[req.machine] == nil {
		return fmt.Errorf("%w: machine %s is not part of the cluster", ErrNotFound, req.machine)
	}
	ov, ok := p.machines[req.machine]
	if !ok {
		ov = t.overrides[req.machine]
	}
	ov = maps.Clone(ov)
	if ov == nil {
		ov = map[string]*string{}
	}
	for k, v := range req.patch {
		ov[k] = v
	}
	if err := t.checkMachineRecord(req.machine, req.patch, ov); err != nil {
		return err
	}
	p.machines[req.machine] = ov
	if _, ok := p.drain[req.machine]; !ok {
		p.drain[req.machine] = t.moves.drainMachines[req.machine]
	}
	if req.drain != nil {
		p.drain[req.machine] = 0
		if *req.drain {
			p.drain[req.machine] = req.parallel
		}
	}
	return nil
}

// validateUnitsWrite validates a request's changes of units, all or none.
func (t *term) validateUnitsWrite(p *roundPlan, req *unitsWrite) error {
	lookup := p.lookup(t)
	if err := t.checkIndex(p, req, lookup); err != nil {
		return err
	}
	var prev map[string]*unitRec // the units whose versions may change, before req
	for _, c := range req.changes {
		if c.Range == nil && !unit.IsInstance(c.Name) && (c.File != nil || c.Destroy) {
			if prev == nil {
				prev = map[string]*unitRec{}
			}
			prev[c.Name] = lookup(nil, c.Name)
		}
	}
	size := 0
	for _, c := range req.changes {
		if c.Range != nil {
			// Only a range whose template exists (or comes in the same
			// request) makes units: a range of a missing template is
			// refused by validateRange before it allocates anything.
			if c.Destroy || lookup(nil, c.Name) != nil || submits(req.changes, c.Name) {
				size += c.Range.Len()
			}
		} else {
			size++
		}
	}
	if p.single != nil {
		size = 0 // the range's units go to single
	}
	local := make(map[string]*unitRec, size) // a range of a million: grown once
	for i, c := range req.changes {
		var err error
		if c.Range != nil {
			if req.rangeNames == nil {
				req.rangeNames = make([][]string, len(req.changes))
			}
			req.rangeNames[i], err = t.validateRange(local, lookup, c, p.single)
		} else {
			err = t.validate(local, lookup, c)
		}
		if err != nil {
			return err
		}
	}
	if len(p.recs) == 0 {
		p.recs = local // the round's first request: no copy
	} else {
		for k, v := range local {
			p.recs[k] = v
		}
	}
	if req.deploy != nil {
		p.setDeploy(req.deploy.Unit, req.deploy)
	}
	if prev != nil {
		t.noteVersions(p, req, prev, t.now)
	}
	return nil
}

// roundOps derives the round's etcd operations from its outcome, one per
// key: etcd refuses a key twice in a transaction, and a unit may be changed
// by several requests of a round.
func (t *term) roundOps(p *roundPlan) {
	for id, ov := range p.machines {
		p.ops = append(p.ops, registry.PutMachine(t.keys, id, registry.MachineRecord{Metadata: ov, Drain: p.drain[id] > 0, MaxParallel: p.drain[id]}))
	}
	if p.options != nil {
		p.ops = append(p.ops, putOptions(t.keys, *p.options))
	}
	if p.single != nil {
		t.singleRangeEntries(p)
	} else {
		t.rangeEntries(p)
	}
	for _, en := range p.entries {
		t.entryOps(p, en)
	}
	t.versionOps(p)
	t.deployOps(p)
}

// singleRangeEntries reads the entries of a round of one range change: one
// range record when the range's instances all end it as it set them.
func (t *term) singleRangeEntries(p *roundPlan) {
	uw := p.accepted[0].w.(*unitsWrite)
	c, names := uw.changes[0], uw.rangeNames[0]
	var pr *pendingRange
	if content, ok := p.single.covers(c); ok {
		rr := rangeRecord(c, content)
		pr = newPendingRange(t.keys.Range(rr), c.Name, *c.Range)
		p.newRanges = append(p.newRanges, pr)
		p.ops = append(p.ops, registry.PutRange(t.keys, rr))
	}
	n := 0
	for _, r := range p.single.nexts {
		if r != nil {
			n++
		}
	}
	p.entries = make([]roundEntry, 0, n)
	for i, next := range p.single.nexts {
		if next != nil {
			p.entries = append(p.entries, roundEntry{name: names[i], cur: p.single.curs[i], next: next, pr: pr})
		}
	}
	p.single = nil
}

// rangeEntries reads the round's entries from recs. A range of instances is
// one key when every instance ends the round as the range set it;
// otherwise (another request of the round destroyed or changed one) its
// instances are written one by one.
func (t *term) rangeEntries(p *roundPlan) {
	var covered map[string]*pendingRange // nil: no range in the round
	var changed []bool                   // by a range's instance: whether the round changes it
	for _, req := range p.accepted {
		uw, ok := req.w.(*unitsWrite)
		if !ok {
			continue
		}
		for i, c := range uw.changes {
			if c.Range == nil || c.Destroy {
				continue
			}
			names := uw.rangeNames[i]
			if len(changed) < len(names) {
				changed = make([]bool, len(names))
			}
			content, ok := t.rangeCovers(c, names, p.recs, changed)
			if !ok {
				continue
			}
			rr := rangeRecord(c, content)
			pr := newPendingRange(t.keys.Range(rr), c.Name, *c.Range)
			p.newRanges = append(p.newRanges, pr)
			p.ops = append(p.ops, registry.PutRange(t.keys, rr))
			if covered == nil {
				covered = make(map[string]*pendingRange, len(p.recs))
			}
			for j, name := range names {
				if changed[j] {
					covered[name] = pr
				}
			}
		}
	}
	p.entries = make([]roundEntry, 0, len(p.recs))
	for name, next := range p.recs {
		p.entries = append(p.entries, roundEntry{name: name, cur: t.units[name], next: next, pr: covered[name]})
	}
}

// movesFirst reports whether a round's change of a unit moves it off its
// machine, to be placed again only once its copy there has stopped: a
// Singleton= unit whose new file places it again (validate) never runs on
// two machines at once. The move is recorded as a misfit's is (moves/),
// so a new leader waits for the old copy too.
func movesFirst(cur, next *unitRec) bool {
	return cur != nil && next != nil && cur.machine != "" && next.machine == "" && next.wanted() &&
		next.file.Fleet.Singleton && cur.file.Hash != next.file.Hash
}

// entryOps adds the operations one unit of the round needs.
func (t *term) entryOps(p *roundPlan, en roundEntry) {
	name, cur, next := en.name, en.cur, en.next
	if cur == nil && next != nil {
		p.newUnits++
	}
	if en.pr == nil {
		switch {
		case next == nil && cur == nil:
			return
		case next == nil:
			p.ops = append(p.ops, t.deleteRecord(name)...)
			if t.moves.recorded(name) {
				p.ops = append(p.ops, registry.DeleteMove(t.keys, name))
			}
		case cur == nil || cur.desired() != next.desired() || cur.file.Hash != next.file.Hash || cur.machine != next.machine || cur.content != next.content:
			p.ops = t.putRecord(p.ops, name, next)
		}
	}
	if cur != nil && cur.machine != "" && (next == nil || next.machine == "") {
		p.ops = append(p.ops, t.dropAssignment(cur.machine, name)...)
	}
	if movesFirst(cur, next) {
		p.ops = append(p.ops, registry.PutMove(t.keys, name, cur.machine))
	}
	if cur != nil && cur.file.Fleet.Global && (next == nil || !next.wanted()) {
		for id := range t.machines {
			p.ops = append(p.ops, t.dropAssignment(id, name)...)
		}
	}
}

// roundTxn is the txn of a round: the files of the versions it makes
// older, the files of its records, then its ops; a round whose ops are
// none (a request that changes nothing) confirms through etcd that this
// term still leads before it is acknowledged, as memory alone cannot
// tell. stored says which files it stored, by how many stages landed.
func (t *term) roundTxn(p *roundPlan) (tx *txn, stored func(landed int) storedFiles) {
	vf := t.versionFiles(p)
	if len(p.ops) == 0 {
		return &txn{stages: [][]registry.Op{vf.files}, confirm: true}, func(landed int) storedFiles {
			if landed < 1 {
				return storedFiles{}
			}
			return vf
		}
	}
	tx, records := t.recordsTxn(p.ops, func(yield func(*unitRec) bool) {
		for _, en := range p.entries {
			if !yield(en.next) {
				return
			}
		}
	})
	tx.stages = append([][]registry.Op{vf.files}, tx.stages...)
	return tx, func(landed int) storedFiles {
		if landed < 1 {
			return storedFiles{}
		}
		sf := records(landed - 1)
		return storedFiles{contents: append(slices.Clip(vf.contents), sf.contents...), files: append(slices.Clip(vf.files), sf.files...)}
	}
}

// applyPlan acknowledges a durable round and makes memory follow it.
func (t *term) applyPlan(p *roundPlan) {
	// The round is durable: acknowledge it now, rather than after the
	// apply below. A client that reads after the reply still sees its
	// change, as etcd's reads wait for its applied index: the loop answers
	// reads only once the apply is done (onLoop), views show the rounds
	// acknowledged (readViews), and the state's builder reads on the loop
	// too; and a stop of a million instances is answered once written, not
	// a second or two of applying later.
	t.acked.Add(1) // before the replies: a state read after one shows the round
	for _, req := range p.accepted {
		req.res <- applyRes{}
	}
	for id, ov := range p.machines {
		t.overrides[id] = ov
		if t.moves.setDrain(id, p.drain[id]) {
			t.placeDirty = true
			t.globalsDirty = true
			t.changed()
		}
	}
	if p.options != nil {
		t.options = *p.options
		t.sched.SetOptions(*p.options) // validated by SetScheduler
		t.placeDirty = true
		t.changed()
	}
	t.units = grown(t.units, p.newUnits)
	t.hold.start() // a stop of a million units: a message an agent, not a unit
	for _, en := range p.entries {
		name, rec := en.name, en.next
		if cur := en.cur; cur != nil && cur.machine != "" && (rec == nil || rec.machine == "") {
			t.sched.UnplaceUnit(cur.su)
		}
		if movesFirst(en.cur, rec) {
			t.moves.begin(name, en.cur.machine, t.now)
		}
		t.setUnitFrom(name, en.cur, rec)
		if pr := en.pr; pr != nil {
			t.store.standing.stand(pr, name)
		} else {
			t.store.written(name)
		}
	}
	t.standRanges(p.newRanges)
	t.applyVersions(p)
	t.applyDeploys(p)
	wakeAll(t.hold.release())
}

// standRanges makes the round's range records stand for their instances.
func (t *term) standRanges(newRanges []*pendingRange) {
	for _, pr := range newRanges {
		// A range record of the same instances as one still standing for
		// some (a range started, then stopped before every instance was
		// placed) has taken its key: it stands for those too, as they end
		// the round at its desired state (rangeCovers), and its key must
		// not be deleted while they need it.
		if old := t.store.ranges[pr.key]; old != nil && old != pr {
			for name := range old.names(old.template()) {
				if i, ok := pr.index(name); ok {
					pr.set(i)
				}
			}
			old.bits, old.left = nil, 0
			t.store.standing.remove(old)
		}
		t.store.ranges[pr.key] = pr
		t.store.standing.add(pr)
	}
}

// destroys reports whether a round destroys any unit.
func destroys(round []*applyReq) bool {
	for _, req := range round {
		uw, ok := req.w.(*unitsWrite)
		if !ok {
			continue
		}
		for _, c := range uw.changes {
			if c.Destroy {
				return true
			}
		}
	}
	return false
}

// roundEntry is a unit an apply round changes: its record as it was (cur)
// and as the round leaves it (next, nil when destroyed), and the range
// record written for it (nil: its own record is written).
type roundEntry struct {
	name      string
	cur, next *unitRec
	pr        *pendingRange
}

// rangeUnits are the units of a range change validated on their own: by
// instance index, the record as it is (curs) and as the change leaves it
// (nexts, nil: unchanged).
type rangeUnits struct {
	curs, nexts []*unitRec
}

// covers is rangeCovers for a range whose units are u.
func (u *rangeUnits) covers(c Change) (content string, ok bool) {
	for i, r := range u.nexts {
		changed := r != nil
		if !changed {
			r = u.curs[i]
		}
		if content, ok = coverOne(content, c, r, changed, u.curs[i] == nil); !ok {
			return "", false
		}
	}
	return content, content != ""
}

// coverOne folds one instance of range change c into rangeCovers' answer:
// r is the instance as the round leaves it, changed whether the round
// changes it, created whether the round creates it. The content is that of
// the instances the round creates, else of any.
func coverOne(content string, c Change, r *unitRec, changed, created bool) (string, bool) {
	if r == nil || r.desired() != c.DesiredState || r.content == "" {
		return "", false
	}
	if content == "" || (changed && r.content != content && created) {
		content = r.content
	}
	return content, true
}

// grown returns m, or when n is more than it holds a copy of it with room
// for n more: a map that takes a million units at once is made once, not
// split and rehashed as it grows. It runs on the loop.
func grown[K comparable, V any](m map[K]V, n int) map[K]V {
	if n <= len(m) {
		return m
	}
	g := make(map[K]V, len(m)+n)
	for k, v := range m {
		g[k] = v
	}
	return g
}

// rangeCovers reports whether range change c can be written as one range
// record: every instance it names ends the round (roundRecs, or as it
// was) with the range's desired state. It returns the content of the file
// instances it creates are made from. names are the range's; changed is
// set for those the round changes.
func (t *term) rangeCovers(c Change, names []string, roundRecs map[string]*unitRec, changed []bool) (content string, ok bool) {
	for i, name := range names {
		r, ch := roundRecs[name]
		changed[i] = ch
		if !ch {
			r = t.units[name]
		}
		if content, ok = coverOne(content, c, r, ch, t.units[name] == nil); !ok {
			return "", false
		}
	}
	return content, content != ""
}

// validateRange validates a range change as the change of each instance
// it names, and returns their names. It makes the records validate would,
// the work that is the same for every instance done once per range: a new
// instance of a template every instance shares a file of (unit.Shareable)
// is made from that file, its content key and its scheduler unit.
//
// With single (the round's only change), the records are put there, by
// index, instead of in local.
func (t *term) validateRange(local map[string]*unitRec, lookup func(map[string]*unitRec, string) *unitRec, c Change, single *rangeUnits) ([]string, error) {
	if c.File != nil {
		return nil, fmt.Errorf("%w: %s%s names a range of instances: it takes no file (submit the template %s)", ErrInvalid, c.Name, c.Range, c.Name)
	}
	if !c.Destroy && c.DesiredState == "" {
		return nil, fmt.Errorf("%w: the range of %s sets no desired state", ErrInvalid, c.Name)
	}
	if c.Range.Len() <= 0 {
		return nil, nil
	}
	// The template is the same for every instance: only instances are
	// changed below. Without it, a range that is not destroyed is refused
	// before its names are made (a million names take some 40 MB).
	tmpl := lookup(local, c.Name)
	if tmpl == nil && !c.Destroy {
		return nil, fmt.Errorf("%w: unit %s does not exist, nor does its template %s: submit the template first",
			ErrNotFound, instanceName(c.Name, c.Range.Instance(0)), c.Name)
	}
	names := rangeNames(c.Name, *c.Range)
	var (
		mk  = recMaker{t: t}
		now time.Time // when wanted: once for the range
		f   *unit.File
	)
	shared := tmpl != nil && unit.Shareable(tmpl.file)
	if c.DesiredState != unit.Inactive {
		now = t.now
	}
	// The names of a range are distinct: when the request changed no unit
	// before it, none of them is in local but those the loop puts there.
	before := local
	if len(local) == 0 {
		before = nil
	}
	put := func(i int, name string, r *unitRec) {
		if single != nil {
			single.nexts[i] = r
		} else {
			local[name] = r
		}
	}
	for i, name := range names {
		cur := lookup(before, name)
		if single != nil {
			single.curs[i] = cur
		}
		switch {
		case c.Destroy || (cur == nil && !shared):
			ic := Change{Name: name, DesiredState: c.DesiredState, Destroy: c.Destroy}
			if err := t.validate(local, lookup, ic); err != nil {
				return nil, err
			}
			if r, ok := local[name]; ok && single != nil {
				delete(local, name)
				single.nexts[i] = r // never nil: single destroys nothing
			}
		case cur == nil:
			if f == nil {
				var err error
				if f, err = t.store.instanceFile(tmpl.file, name); err != nil {
					return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
				}
			}
			r := mk.rec(name, f, unit.Inactive)
			if c.DesiredState != unit.Inactive {
				r.at, r.atPlaced = nanos(now), false
				r.setDesired(c.DesiredState)
			}
			put(i, name, r)
		case c.DesiredState != cur.desired():
			r := mk.slab.rec()
			*r = *cur
			if r.desired() == unit.Inactive {
				r.at, r.atPlaced = nanos(now), false
			}
			r.setDesired(c.DesiredState)
			if r.desired() == unit.Inactive {
				r.machine, r.reason = "", ""
			}
			put(i, name, r)
		}
	}
	return names, nil
}

// submits reports whether changes give the file of unit name.
func submits(changes []Change, name string) bool {
	for _, c := range changes {
		if c.File != nil && c.Name == name {
			return true
		}
	}
	return false
}

// validate checks one change against the state seen through lookup and
// records the resulting unit in local.
func (t *term) validate(local map[string]*unitRec, lookup func(map[string]*unitRec, string) *unitRec, c Change) error {
	cur := lookup(local, c.Name)
	if c.Destroy {
		if cur != nil {
			local[c.Name] = nil
		}
		return nil // destroying what is not there is done
	}
	next := cur
	switch {
	case c.File != nil && cur != nil && cur.file.Hash != c.File.Hash:
		if !c.Replace {
			return fmt.Errorf("%w: unit %s already exists with different contents (hash %s); destroy it before submitting a new version, or replace it through the API (?replace=true)",
				ErrConflict, c.Name, unit.ShortHash(cur.file.Hash))
		}
		su := scheduler.NewUnit(c.File)
		su.Name, su.ID = c.Name, cur.su.ID
		next = cur.with(func(r *unitRec) {
			r.file = c.File
			if r.content != "" {
				r.content = t.store.contentOf(c.File.Raw)
			}
			if !reflect.DeepEqual(*su, *r.su) {
				from := r.machine
				r.machine, r.reason = "", "" // placed again by the new constraints
				if from != "" && c.File.Fleet.Singleton {
					r.reason = "stopping on " + from + " before it moves" // movesFirst
				}
			}
			r.su = su
		})
	case c.File != nil && cur != nil:
	case c.File != nil:
		next = t.newRec(c.Name, c.File)
	case cur == nil:
		tmpl := lookup(local, unit.TemplateOf(c.Name))
		if tmpl == nil {
			return fmt.Errorf("%w: unit %s does not exist; submit its unit file first", ErrNotFound, c.Name)
		}
		f, err := t.store.instanceFile(tmpl.file, c.Name)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		next = t.newRec(c.Name, f)
	}
	if c.DesiredState != "" && c.DesiredState != next.desired() {
		if unit.IsTemplate(c.Name) && c.DesiredState != unit.Inactive {
			return fmt.Errorf("%w: %s is a template: it cannot be %s; start an instance of it, such as %s",
				ErrInvalid, c.Name, c.DesiredState, unit.Prefix(c.Name)+"@1.service")
		}
		next = next.with(func(r *unitRec) {
			if r.desired() == unit.Inactive {
				r.at, r.atPlaced = nanos(t.now), false
			}
			r.setDesired(c.DesiredState)
			if r.desired() == unit.Inactive {
				r.machine, r.reason = "", ""
			}
		})
	}
	if next != cur {
		if (cur == nil || cur.file != next.file) && next.content == "" {
			rec := registry.PutUnit(t.keys, record(c.Name, next))
			if err := registry.CheckRecord(fmt.Sprintf("unit %s (its file is %d bytes, escaped in JSON)", c.Name, len(next.file.Raw)), rec); err != nil {
				return fmt.Errorf("%w: %w", ErrInvalid, err)
			}
		}
		local[c.Name] = next
	}
	return nil
}

// checkMachineRecord refuses a metadata patch that would make the
// machine's record too large for etcd, naming the patch's largest value.
func (t *term) checkMachineRecord(id string, patch, ov map[string]*string) error {
	rec := registry.PutMachine(t.keys, id, registry.MachineRecord{Metadata: ov})
	if len(rec.Key)+len(rec.Value) <= registry.MaxRecordBytes {
		return nil
	}
	what := fmt.Sprintf("machine %s's metadata", id)
	big, n := "", -1
	for k, v := range patch {
		if v != nil && (len(*v) > n || len(*v) == n && k < big) {
			big, n = k, len(*v)
		}
	}
	if big != "" {
		what = fmt.Sprintf("machine %s's metadata (its value of %q is %d bytes)", id, big, n)
	}
	return fmt.Errorf("%w: %w", ErrInvalid, registry.CheckRecord(what, rec))
}
