package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/unit"
)

// Versions of unit files (registry.VersionLog). A round that creates a unit
// or changes its file appends a version to the unit's log, in the same
// round as its record; a destroyed unit's log goes with it. Templates and
// plain units have logs; a template's instances follow their template's.
//
// The logs and every file they name are the leader's memory (a version's
// file is a stored file, counted in storedFile.refs), so history, diff and
// revert read memory, and a plan's check index is known without etcd.

// versionsState is the term's versions: the loop's.
type versionsState struct {
	logs  map[string]registry.VersionLog
	index int64 // the cluster's version index: the newest version's
	keep  int   // versions kept of each unit (registry.VersionsConfig)
}

// loadVersions takes the logs, the index and the setting from the record,
// counting the files the logs name.
func (t *term) loadVersions(snap *registry.Snapshot) {
	t.versions = versionsState{logs: snap.Versions, index: snap.VersionIndex, keep: registry.DefaultKeepVersions}
	if t.versions.logs == nil {
		t.versions.logs = map[string]registry.VersionLog{}
	}
	if len(snap.VersionsConfig) > 0 {
		var c registry.VersionsConfig
		if err := json.Unmarshal(snap.VersionsConfig, &c); err != nil || c.Check() != nil {
			t.e.log.Error("the stored versions setting does not decode; keeping the default", "value", string(snap.VersionsConfig))
		} else {
			t.versions.keep = c.KeepOrDefault()
		}
	}
	for name, l := range t.versions.logs {
		t.refVersions(name, nil, &l)
		for _, c := range heldContents(name, l) {
			if f := t.store.files[c]; f == nil || !f.stored {
				t.e.log.Warn("a version's file is missing from etcd: it cannot be shown or reverted to", "unit", name, "file", t.keys.File(c))
			}
		}
	}
}

// heldContents are the contents of the files l names that are stored under
// files/ for it: every version's but the current one of a plain unit, whose
// file is in its record.
func heldContents(name string, l registry.VersionLog) []string {
	vs := l.Versions
	if !byContent(name) && len(vs) > 0 {
		vs = vs[:len(vs)-1]
	}
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		out = append(out, v.Content)
	}
	return out
}

// refVersions counts the files of unit name's log as it changes from old
// to next (either may be nil). It runs on the loop.
func (t *term) refVersions(name string, old, next *registry.VersionLog) {
	if next != nil {
		for _, c := range heldContents(name, *next) {
			f := t.store.files[c]
			if f == nil {
				f = &storedFile{}
				t.store.files[c] = f
			}
			f.refs++
		}
	}
	if old != nil {
		for _, c := range heldContents(name, *old) {
			if f := t.store.files[c]; f != nil {
				f.refs--
			}
		}
	}
}

// logOwner is the unit whose log holds name's versions: its template's for
// an instance.
func logOwner(name string) string {
	if unit.IsInstance(name) {
		return unit.TemplateOf(name)
	}
	return name
}

// roundVersions is what a round changes of the versions.
type roundVersions struct {
	logs  map[string]*registry.VersionLog // by unit; nil: deleted
	index int64                           // the index after the round (0: unchanged)
	keep  *int                            // a new setting
	files []registry.Op                   // versions' files etcd lacks, stored first
	texts map[string]bool                 // contents of files
}

// roundLog returns unit name's log as the round has it so far.
func (t *term) roundLog(p *roundPlan, name string) (registry.VersionLog, bool) {
	if l, ok := p.versions.logs[name]; ok {
		if l == nil {
			return registry.VersionLog{}, false
		}
		return *l, true
	}
	l, ok := t.versions.logs[name]
	return l, ok
}

// indexOf is the version index of unit name as the round has it: its
// current version's (its template's for an instance), 0 when it has none.
func (t *term) indexOf(p *roundPlan, name string) int64 {
	l, _ := t.roundLog(p, logOwner(name))
	return l.Current().Index
}

// checkIndex refuses a write whose units changed since index was read
// (?check-index=): the newest version of any of them, or of the template
// of an instance, must not be newer than it, and a unit the plan saw
// (index at least its version) must still exist.
func (t *term) checkIndex(p *roundPlan, req *unitsWrite, lookup func(map[string]*unitRec, string) *unitRec) error {
	if req.check == nil {
		return nil
	}
	var changed []string
	seen := map[string]bool{}
	for _, c := range req.changes {
		name := logOwner(c.Name)
		if c.Range != nil {
			name = c.Name
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		if idx := t.indexOf(p, name); idx > *req.check {
			l, _ := t.roundLog(p, name)
			cur := l.Current()
			changed = append(changed, fmt.Sprintf("%s is at version %d (index %d, %s)", name, cur.Version, idx, cur.Change))
		}
	}
	if len(changed) == 0 {
		return nil
	}
	slices.Sort(changed)
	return fmt.Errorf("%w: check index %d is stale: %s since; plan again", ErrConflict, *req.check, strings.Join(changed, "; "))
}

// noteVersions records in the round the versions req makes: a new version
// for each unit it creates or gives another file, the log of each unit it
// destroys gone. prev is the units as they were before req.
func (t *term) noteVersions(p *roundPlan, req *unitsWrite, prev map[string]*unitRec, now time.Time) {
	for _, c := range req.changes {
		if c.Range != nil || unit.IsInstance(c.Name) || (c.File == nil && !c.Destroy) {
			continue
		}
		next, ok := p.recs[c.Name]
		if !ok {
			continue // unchanged
		}
		old, had := t.roundLog(p, c.Name)
		if next == nil {
			if had {
				p.versions.setLog(c.Name, nil)
			}
			if _, ok := t.deployOf(p, c.Name); ok {
				p.setDeploy(c.Name, nil)
			}
			continue
		}
		if had && old.Current().Hash == next.file.Hash {
			continue
		}
		l := registry.VersionLog{Versions: slices.Clone(old.Versions)}
		change := "created"
		if cur := prev[c.Name]; cur != nil {
			change = "replaced"
			if !had { // a unit from before versions were kept: its file is the first
				l.Versions = append(l.Versions, t.version(p, cur, 1, time.Time{}, "", "submitted before versions were kept"))
			}
			t.keepFile(p, c.Name, cur)
		}
		if req.revertTo > 0 {
			change = fmt.Sprintf("reverted to %d", req.revertTo)
		}
		n := 1
		if len(l.Versions) > 0 {
			n = l.Current().Version + 1
		}
		l.Versions = append(l.Versions, t.version(p, next, n, now, req.by, change))
		l = l.Trim(t.keepOf(p))
		p.versions.setLog(c.Name, &l)
		if cur := prev[c.Name]; cur != nil && (unit.IsTemplate(c.Name) || deployable(cur, next)) {
			skip := make(map[string]*unitRec, len(req.changes))
			for _, o := range req.changes {
				if o.Range == nil {
					skip[o.Name] = nil
				}
			}
			t.noteDeployment(p, c.Name, next, l, skip, req, now)
		}
	}
}

// version makes version n of unit r, taking the round's next index.
func (t *term) version(p *roundPlan, r *unitRec, n int, at time.Time, by, change string) registry.Version {
	if p.versions.index == 0 {
		p.versions.index = t.versions.index
	}
	p.versions.index++
	content := r.content
	if content == "" {
		content = registry.ContentOf(r.file.Raw)
	}
	return registry.Version{Version: n, Hash: r.file.Hash, Content: content, Index: p.versions.index,
		Time: at.UTC().Truncate(time.Millisecond), By: by, Change: change}
}

// keepFile stores the file of plain unit name's current version, r's,
// which its record holds until now: it becomes an older version.
func (t *term) keepFile(p *roundPlan, name string, r *unitRec) {
	if byContent(name) {
		return // stored by content already
	}
	c := registry.ContentOf(r.file.Raw)
	if f := t.store.files[c]; (f != nil && f.stored) || p.versions.texts[c] {
		return
	}
	if p.versions.texts == nil {
		p.versions.texts = map[string]bool{}
	}
	p.versions.texts[c] = true
	p.versions.files = append(p.versions.files, registry.PutFile(t.keys, r.file.Raw))
}

func (v *roundVersions) setLog(name string, l *registry.VersionLog) {
	if v.logs == nil {
		v.logs = map[string]*registry.VersionLog{}
	}
	v.logs[name] = l
}

func (t *term) keepOf(p *roundPlan) int {
	if p.versions.keep != nil {
		return *p.versions.keep
	}
	return t.versions.keep
}

// versionOps adds the round's versions to its operations.
func (t *term) versionOps(p *roundPlan) {
	for name, l := range p.versions.logs {
		if l == nil {
			p.ops = append(p.ops, registry.DeleteVersionLog(t.keys, name))
		} else {
			p.ops = append(p.ops, registry.PutVersionLog(t.keys, name, *l))
		}
	}
	if p.versions.index > t.versions.index {
		p.ops = append(p.ops, registry.PutVersionIndex(t.keys, p.versions.index))
	}
	if p.versions.keep != nil {
		p.ops = append(p.ops, registry.PutVersionsConfig(t.keys, registry.VersionsConfig{Keep: *p.versions.keep}))
	}
}

// versionFiles are the files of the versions a round makes older, which
// its txn stores before the logs naming them (transactions of one commit
// land in any order).
func (t *term) versionFiles(p *roundPlan) storedFiles {
	sf := storedFiles{files: p.versions.files}
	for _, op := range p.versions.files {
		sf.contents = append(sf.contents, strings.TrimPrefix(op.Key, t.keys.Files()))
	}
	return sf
}

// applyVersions makes memory follow a durable round. It runs on the loop.
func (t *term) applyVersions(p *roundPlan) {
	for name, l := range p.versions.logs {
		if old, ok := t.versions.logs[name]; ok {
			t.refVersions(name, &old, nil)
		}
		if l == nil {
			delete(t.versions.logs, name)
			continue
		}
		t.refVersions(name, nil, l)
		t.versions.logs[name] = *l
	}
	t.versions.index = max(t.versions.index, p.versions.index)
	if p.versions.keep != nil {
		t.versions.keep = *p.versions.keep
	}
}

// tagWrite names a version of a unit, keeping it however many versions
// follow (tag ""): removes the version's tag).
type tagWrite struct {
	name    string
	version int
	tag     string
}

// versionsWrite sets how many versions of each unit are kept.
type versionsWrite struct {
	keep int
}

func (*tagWrite) isWrite()      {}
func (*versionsWrite) isWrite() {}

var tagPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// validateTag validates a tag and records the log it leaves.
func (t *term) validateTag(p *roundPlan, w *tagWrite) error {
	if w.tag != "" && !tagPattern.MatchString(w.tag) {
		return fmt.Errorf("%w: tag %q: want 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalid, w.tag)
	}
	l, ok := t.roundLog(p, w.name)
	if !ok {
		return t.noLog(w.name)
	}
	at := -1
	for i, v := range l.Versions {
		if v.Version == w.version {
			at = i
		} else if w.tag != "" && v.Tag == w.tag {
			return fmt.Errorf("%w: version %d of %s is already tagged %s; untag it first", ErrConflict, v.Version, w.name, w.tag)
		}
	}
	if at < 0 {
		return noVersion(w.name, w.version, l)
	}
	l = registry.VersionLog{Versions: slices.Clone(l.Versions)}
	l.Versions[at].Tag = w.tag
	l = l.Trim(t.keepOf(p))
	p.versions.setLog(w.name, &l)
	return nil
}

func (t *term) noLog(name string) error {
	if unit.IsInstance(name) {
		return fmt.Errorf("%w: %s is an instance: it follows the versions of its template %s", ErrInvalid, name, unit.TemplateOf(name))
	}
	if t.units[name] == nil {
		return fmt.Errorf("%w: unit %s does not exist", ErrNotFound, name)
	}
	return fmt.Errorf("%w: unit %s has no versions recorded yet", ErrNotFound, name)
}

func noVersion(name string, n int, l registry.VersionLog) error {
	have := make([]string, 0, len(l.Versions))
	for _, v := range l.Versions {
		have = append(have, fmt.Sprint(v.Version))
	}
	return fmt.Errorf("%w: unit %s has no version %d (it keeps %s)", ErrNotFound, name, n, strings.Join(have, ", "))
}

// VersionInfo is one version of a unit's file, as Versions returns it.
type VersionInfo struct {
	registry.Version
	// File is the version's unit file ("" when etcd lost it).
	File string
	// Current is set on the version the unit runs now.
	Current bool
}

// UnitVersions is a unit's versions, oldest first.
type UnitVersions struct {
	// Unit is the unit asked about; Log the unit whose versions these are
	// (its template for an instance).
	Unit, Log string
	Versions  []VersionInfo
	// Index is the log's current version's index (a plan's check index).
	Index int64
}

// Versions returns the versions of unit name's file (its template's for an
// instance), each with its file. Current marks the version whose file the
// unit has (for an instance: the version its file was made from).
func (e *Engine) Versions(name string) (UnitVersions, error) {
	t := e.leader()
	if t == nil {
		return UnitVersions{}, ErrNotLeader
	}
	return readOnLoop(t, func() (UnitVersions, error) { return t.unitVersions(name) })
}

// unitVersions is Versions on the loop.
func (t *term) unitVersions(name string) (UnitVersions, error) {
	owner := logOwner(name)
	l, ok := t.versions.logs[owner]
	if !ok {
		if t.units[name] == nil {
			return UnitVersions{}, fmt.Errorf("%w: unit %s does not exist", ErrNotFound, name)
		}
		return UnitVersions{}, fmt.Errorf("%w: unit %s has no versions recorded yet (it was submitted before this version of Flotilla kept them; its next change makes them)", ErrNotFound, name)
	}
	cur := t.units[name]
	out := UnitVersions{Unit: name, Log: owner, Index: l.Current().Index, Versions: make([]VersionInfo, 0, len(l.Versions))}
	for i, v := range l.Versions {
		vi := VersionInfo{Version: v}
		if f := t.store.files[v.Content]; f != nil && f.stored {
			vi.File = f.text
		} else if i == len(l.Versions)-1 && t.units[owner] != nil {
			vi.File = t.units[owner].file.Raw
		}
		out.Versions = append(out.Versions, vi)
	}
	for i := len(out.Versions) - 1; i >= 0 && cur != nil; i-- { // the newest with the unit's file
		if v := &out.Versions[i]; fileOf(owner, name, v) == cur.file.Hash {
			v.Current = true
			break
		}
	}
	return out, nil
}

// fileOf is the hash of the file unit name has at version v of owner's log
// (owner is name, or its template).
func fileOf(owner, name string, v *VersionInfo) string {
	if owner == name || v.File == "" {
		return v.Hash
	}
	tf, err := unit.Parse(owner, []byte(v.File))
	if err != nil {
		return ""
	}
	inf, err := unit.Instantiate(tf, unit.Instance(name))
	if err != nil {
		return ""
	}
	return inf.Hash
}

// Revert gives unit name the file of one of its versions (0: the newest
// earlier one with another file), as a replace does, making a new version,
// once allow (nil: anything) lets that file run. It is refused if the
// unit's versions changed since they were read. It returns the version
// reverted to.
func (e *Engine) Revert(ctx context.Context, name string, version int, opts ApplyOptions, allow func(*unit.File) error) (int, error) {
	if unit.IsInstance(name) {
		return 0, fmt.Errorf("%w: %s is an instance: revert its template %s", ErrInvalid, name, unit.TemplateOf(name))
	}
	vs, err := e.Versions(name)
	if err != nil {
		return 0, err
	}
	cur := vs.Versions[len(vs.Versions)-1]
	var to *VersionInfo
	for i := range vs.Versions {
		v := &vs.Versions[i]
		if (version == 0 && v.Hash != cur.Hash) || (version != 0 && v.Version.Version == version) {
			to = v
		}
	}
	if to == nil {
		if version == 0 {
			return 0, fmt.Errorf("%w: unit %s has no earlier version with another file", ErrNotFound, name)
		}
		l := registry.VersionLog{}
		for _, v := range vs.Versions {
			l.Versions = append(l.Versions, v.Version)
		}
		return 0, noVersion(name, version, l)
	}
	if to.File == "" {
		return 0, fmt.Errorf("%w: the file of version %d of %s is missing from etcd", ErrNotFound, to.Version.Version, name)
	}
	if to.Hash == cur.Hash {
		return to.Version.Version, nil // already its file
	}
	f, err := unit.Parse(name, []byte(to.File))
	if err != nil {
		return 0, fmt.Errorf("%w: version %d of %s no longer parses: %w", ErrInvalid, to.Version.Version, name, err)
	}
	if allow != nil {
		if err := allow(f); err != nil {
			return 0, err
		}
	}
	idx := vs.Index
	opts.CheckIndex = &idx
	if _, err := unit.OverrideUpdate(unit.DefaultUpdate, opts.Update); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	err = e.submit(ctx, &unitsWrite{changes: []Change{{Name: name, File: f, Replace: true}},
		by: opts.By, check: opts.CheckIndex, revertTo: to.Version.Version, update: opts.Update})
	return to.Version.Version, err
}

// Tag names version of unit name tag, which keeps it however many versions
// follow; tag "" removes the version's tag.
func (e *Engine) Tag(ctx context.Context, name string, version int, tag string) error {
	return e.submit(ctx, &tagWrite{name: name, version: version, tag: tag})
}

// SetKeepVersions sets how many versions of each unit are kept (0: the
// default). Units keep their longer logs until their next change.
func (e *Engine) SetKeepVersions(ctx context.Context, keep int) error {
	if err := (registry.VersionsConfig{Keep: keep}).Check(); err != nil {
		return fmt.Errorf("%w: versions: %w", ErrInvalid, err)
	}
	return e.submit(ctx, &versionsWrite{keep: registry.VersionsConfig{Keep: keep}.KeepOrDefault()})
}

// KeepVersions returns how many versions of each unit are kept.
func (e *Engine) KeepVersions() (int, error) {
	t := e.leader()
	if t == nil {
		return 0, ErrNotLeader
	}
	v, err := t.readViews()
	if err != nil {
		return 0, err
	}
	return v.keep, nil
}
