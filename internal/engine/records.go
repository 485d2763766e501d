package engine

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/scheduler"
	"github.com/flotilla/flotilla/internal/unit"
)

// How units are stored (package registry): one record per unit under
// units/<name> holding its desired state and its machine, so that a unit
// started costs one write; the file of a template or an instance is stored
// once by content under files/, and a range of instances given a desired
// state at once is one key under ranges/ until each instance's record is
// written.
//
// The leader keeps, besides t.units:
//
//   - files: the stored files by content, with how many units name each;
//     a file is written before the first record that names it (in an
//     earlier commit, as the transactions of one commit land in any
//     order) and deleted after the last record naming it is gone;
//   - standing: the units whose record is missing or stale because a
//     range record stands for them, a bit each in the range's
//     pendingRange (standing.go). A later change of one of
//     them writes its record, newer than the range, which then stands for
//     it no more (registry.RangeRecord: records and ranges are ordered by
//     etcd's revisions); so does a pass placing one. A range that stands
//     for no unit any more is deleted (dropRanges). A million instances
//     stopped thus stay one key, however long they stay stopped. Only a
//     unit destroyed needs more: a range would create it again, so a round
//     that destroys anything first writes out every range (materialize).

// unitStore is how the term's units are stored, besides t.units: the files by
// content, the range records standing for units, and the units whose
// schedule/ key predates records holding the machine. The loop's.
//
// Its invariants (check):
//   - each file counts the units in t.units naming it and the versions
//     kept of it (refs), and the files of a unit's record exist;
//   - a file's content key is its text's (rawContent);
//   - the ranges and their index (standing) hold the same ranges, each
//     under its key, and each range counts the units it stands for
//     (left); each of those is a unit of t.units, and no other range
//     stands for it.
type unitStore struct {
	files      map[string]*storedFile
	rawContent map[string]string // file text -> content key
	legacy     map[string]bool
	ranges     map[string]*pendingRange
	standing   standing
	protos     map[*unit.File]*unit.File // template -> the instance its instances share
}

func newStore() unitStore {
	return unitStore{files: map[string]*storedFile{}, rawContent: map[string]string{}, legacy: map[string]bool{},
		ranges: map[string]*pendingRange{}, standing: standing{}, protos: map[*unit.File]*unit.File{}}
}

// storedFile is a unit file stored by content.
type storedFile struct {
	text   string
	refs   int  // units in t.units and versions kept naming it
	stored bool // written to etcd (or loaded from it)
}

// byContent reports whether a unit's file is stored by content: templates
// and their instances, whose files are shared.
func byContent(name string) bool { return unit.IsTemplate(name) || unit.IsInstance(name) }

// newRec returns the record of a new unit, inactive.
func (t *term) newRec(name string, f *unit.File) *unitRec {
	r := &unitRec{file: f, want: wantInactive, su: scheduler.NewUnit(f)}
	r.su.Name = name
	if byContent(name) {
		r.content = t.store.contentOf(f.Raw)
	}
	return r
}

// contentOf returns the content key of a file's text, computed once per
// text in use.
func (st *unitStore) contentOf(text string) string {
	if c, ok := st.rawContent[text]; ok {
		return c
	}
	c := registry.ContentOf(text)
	st.rawContent[text] = c
	return c
}

// instanceFile returns the file of instance name of template tmpl: parsed
// once per template and shared when every instance is alike
// (unit.Shareable), parsed for each instance otherwise. It runs on the
// loop (or the load, before it starts).
func (st *unitStore) instanceFile(tmpl *unit.File, name string) (*unit.File, error) {
	if !unit.Shareable(tmpl) {
		return unit.Instantiate(tmpl, unit.Instance(name))
	}
	if f := st.protos[tmpl]; f != nil {
		return f, nil
	}
	f, err := unit.Instantiate(tmpl, unit.Instance(name))
	if err != nil {
		return nil, err
	}
	st.protos[tmpl] = f
	return f, nil
}

// forgetProto forgets the instance the instances of template tmpl share:
// tmpl was replaced or destroyed.
func (st *unitStore) forgetProto(tmpl *unit.File) { delete(st.protos, tmpl) }

// record is unit name's stored record.
func record(name string, r *unitRec) registry.Record {
	rec := registry.Record{Name: name, DesiredState: string(r.desired()), Machine: r.machine}
	if r.content != "" {
		rec.Content = r.content
	} else {
		rec.File = r.file.Raw
	}
	return rec
}

// putRecord appends to ops the ops that write unit name's record (and
// delete its schedule/ key of an older layout). It runs on the loop.
func (t *term) putRecord(ops []registry.Op, name string, r *unitRec) []registry.Op {
	ops = append(ops, registry.PutUnit(t.keys, record(name, r)))
	if t.store.legacy[name] {
		ops = append(ops, registry.DeleteSchedule(t.keys, name))
	}
	return ops
}

// deleteRecord returns the ops that remove unit name's record.
func (t *term) deleteRecord(name string) []registry.Op {
	ops := []registry.Op{registry.DeleteUnit(t.keys, name)}
	if t.store.legacy[name] {
		ops = append(ops, registry.DeleteSchedule(t.keys, name))
	}
	return ops
}

// written notes that unit name's record was written or deleted: its
// schedule/ key is gone, and a range no longer stands for it.
func (st *unitStore) written(name string) {
	delete(st.legacy, name)
	st.standing.written(name)
}

// refFile counts the units naming each stored file as rec replaces old
// (either may be nil). It runs on the loop.
func (st *unitStore) refFile(old, rec *unitRec) {
	if rec != nil && rec.content != "" {
		f := st.files[rec.content]
		if f == nil {
			f = &storedFile{text: rec.file.Raw}
			st.files[rec.content] = f
		}
		f.refs++
	}
	if old != nil && old.content != "" {
		if f := st.files[old.content]; f != nil {
			f.refs--
		}
	}
}

// recordsTxn is a txn writing ops, the records of recs, after (its first
// stage) every file they name that etcd does not hold yet. stored says
// which files it stored, by how many of its stages landed, for the loop
// to mark (markStored), also when the records' stage failed.
func (t *term) recordsTxn(ops []registry.Op, recs func(yield func(*unitRec) bool)) (tx *txn, stored func(landed int) storedFiles) {
	var sf storedFiles
	seen := map[string]bool{}
	last := "" // the content of the record before: most often the same
	for r := range recs {
		if r == nil || r.content == "" || r.content == last || seen[r.content] {
			continue
		}
		last = r.content
		seen[r.content] = true
		if f := t.store.files[r.content]; f == nil || !f.stored {
			sf.files = append(sf.files, registry.PutFile(t.keys, r.file.Raw))
			sf.contents = append(sf.contents, r.content)
		}
	}
	return &txn{stages: [][]registry.Op{sf.files, ops}}, func(landed int) storedFiles {
		if landed < 1 {
			return storedFiles{}
		}
		return sf
	}
}

// storedFiles are files a commit stored: their contents, and the ops that
// wrote them.
type storedFiles struct {
	contents []string
	files    []registry.Op
}

// markStored notes files etcd now holds. It runs on the loop.
func (st *unitStore) markStored(sf storedFiles) {
	for i, c := range sf.contents {
		f := st.files[c]
		if f == nil {
			f = &storedFile{}
			st.files[c] = f
		}
		if f.text == "" {
			f.text = sf.files[i].Value
		}
		f.stored = true
	}
}

// dropFiles deletes the stored files no unit names any more, then runs
// done. It runs on the loop, after the records naming them are gone.
func (t *term) dropFiles(done func()) {
	var ops []registry.Op
	var gone []string
	for c, f := range t.store.files {
		if f.refs <= 0 {
			gone = append(gone, c)
			if f.stored {
				ops = append(ops, registry.DeleteFile(t.keys, c))
			}
		}
	}
	if len(gone) == 0 {
		done()
		return
	}
	t.emit(&txn{stages: [][]registry.Op{ops}, then: func(_ int, err error) {
		defer done()
		if err != nil {
			t.e.log.Warn("could not delete unit files no unit names", "err", err)
			return
		}
		for _, c := range gone {
			if f := t.store.files[c]; f != nil && f.refs <= 0 {
				delete(t.store.files, c)
				delete(t.store.rawContent, f.text)
			}
		}
	}})
}

// materialize writes the record of every unit a range record stands for,
// a slice a txn, then deletes the ranges, and runs done with the outcome.
// It runs on the loop goroutine.
func (t *term) materialize(done func(error)) {
	if len(t.store.ranges) == 0 {
		done(nil)
		return
	}
	var names []string
	for _, pr := range t.store.ranges {
		names = slices.AppendSeq(names, pr.names(pr.template()))
	}
	slices.Sort(names)
	var next func()
	next = func() {
		if len(names) == 0 {
			t.dropRanges(done)
			return
		}
		part := names[:min(len(names), placeSlice)]
		names = names[len(part):]
		var ops []registry.Op
		for _, name := range part {
			if r := t.units[name]; r != nil {
				ops = t.putRecord(ops, name, r)
			}
		}
		tx, stored := t.recordsTxn(ops, func(yield func(*unitRec) bool) {
			for _, name := range part {
				if !yield(t.units[name]) {
					return
				}
			}
		})
		tx.then = func(landed int, err error) {
			t.store.markStored(stored(landed))
			if err != nil {
				done(err)
				return
			}
			for _, name := range part {
				t.store.written(name)
			}
			next()
		}
		t.emit(tx)
	}
	next()
}

// dropRanges deletes the range records whose units all have their
// records, and runs done with the outcome.
func (t *term) dropRanges(done func(error)) {
	var ops []registry.Op
	var dropped []string
	for key, pr := range t.store.ranges {
		if pr.left <= 0 {
			ops = append(ops, registry.DeleteRange(key))
			dropped = append(dropped, key)
		}
	}
	if len(ops) == 0 {
		done(nil)
		return
	}
	t.emit(&txn{stages: [][]registry.Op{ops}, then: func(_ int, err error) {
		if err == nil {
			for _, key := range dropped {
				t.store.standing.remove(t.store.ranges[key])
				delete(t.store.ranges, key)
			}
		}
		done(err)
	}})
}

// loadRanges applies the range records of a snapshot over its units: a
// range stands for each instance it names whose record is older than it
// (registry.RangeRecord), and of several ranges the newest: the instance
// takes the range's desired state, and one without a record is created
// from the range's file. Called from newTerm, before anything runs.
func (t *term) loadRanges(snap *registry.Snapshot) {
	if len(snap.Ranges) == 0 {
		return
	}
	revs := make(map[string]int64, len(snap.Units))
	for i := range snap.Units {
		if unit.IsInstance(snap.Units[i].Name) {
			revs[snap.Units[i].Name] = snap.Units[i].Rev
		}
	}
	for _, rr := range snap.Ranges { // oldest first
		ds, err := unit.ParseDesiredState(rr.DesiredState)
		if err != nil {
			t.e.log.Error("a stored range has a bad desired state; leaving it out", "key", rr.Key, "err", err)
			continue
		}
		text := snap.Files[rr.Content]
		tmpl, err := unit.Parse(rr.Template, []byte(text))
		if err != nil {
			t.e.log.Error("the file of a stored range no longer parses; leaving it out", "key", rr.Key, "err", err)
			continue
		}
		r := unit.Range{From: rr.From, To: rr.To, Width: rr.Width}
		pr := newPendingRange(rr.Key, rr.Template, r)
		if old := t.store.ranges[rr.Key]; old != nil {
			t.store.standing.remove(old)
		}
		t.store.ranges[rr.Key] = pr
		t.store.standing.add(pr)
		for i := range r.Len() {
			name := unit.RangeName(rr.Template, r, i)
			rec := t.units[name]
			if rec != nil && revs[name] > rr.Rev {
				continue // changed since: its record says how
			}
			if rec == nil {
				f, err := t.store.instanceFile(tmpl, name)
				if err != nil {
					t.e.log.Error("an instance of a stored range does not parse; leaving it out", "unit", name, "err", err)
					continue
				}
				rec = t.newRec(name, f)
				t.store.refFile(nil, rec)
				t.keep(name, nil, rec)
			}
			rec.setDesired(ds)
			if !rec.wanted() {
				rec.machine = ""
			}
			t.store.standing.stand(pr, name)
		}
	}
}

// rangeOf describes a range change for its record.
func rangeRecord(c Change, content string) registry.RangeRecord {
	return registry.RangeRecord{Template: c.Name, From: c.Range.From, To: c.Range.To, Width: c.Range.Width,
		Content: content, DesiredState: string(c.DesiredState)}
}

// slabSize is how many records (or names) of a range are allocated at
// once: a million instances are a thousand allocations, not a million,
// while a record kept alive keeps at most a slab's worth of others' memory.
const slabSize = 1024

// recSlab hands out records allocated slabSize at a time.
type recSlab struct {
	recs []unitRec
	sus  []scheduler.Unit
}

// rec returns a new zero record.
func (s *recSlab) rec() *unitRec {
	if len(s.recs) == 0 {
		s.recs = make([]unitRec, slabSize)
	}
	r := &s.recs[0]
	s.recs = s.recs[1:]
	return r
}

// su returns a new copy of u.
func (s *recSlab) su(u *scheduler.Unit) *scheduler.Unit {
	if len(s.sus) == 0 {
		s.sus = make([]scheduler.Unit, slabSize)
	}
	su := &s.sus[0]
	s.sus = s.sus[1:]
	*su = *u
	return su
}

// recMaker makes new records in slabs, with their scheduler units made
// from the last file's: a million instances of a template share one file,
// so its scheduler unit and content key are made once, not a million
// times. For a term's load and a range's new instances.
type recMaker struct {
	t         *term
	slab      recSlab
	file      *unit.File
	su        *scheduler.Unit
	byContent bool // whether the file's units are stored by content
	content   string
}

// rec returns a new record of unit name with file f and desired state ds.
func (m *recMaker) rec(name string, f *unit.File, ds unit.DesiredState) *unitRec {
	if f != m.file {
		// A file shared by several units is an instance's, shared by
		// instances of one template: byContent holds for all or none.
		m.file, m.su, m.content, m.byContent = f, scheduler.NewUnit(f), "", byContent(name)
	}
	r := m.slab.rec()
	*r = unitRec{file: f, want: wantOf(ds), su: m.slab.su(m.su)}
	r.su.Name = name
	if m.byContent {
		if m.content == "" {
			m.content = m.t.store.contentOf(f.Raw)
		}
		r.content = m.content
	}
	return r
}

// instanceName is the name of template's instance inst: web@.service and
// 7 make web@7.service.
func instanceName(template, inst string) string {
	dot := strings.LastIndexByte(template, '.')
	return template[:dot] + inst + template[dot:]
}

// rangeNames returns the names of the instances of template in r, as
// unit.RangeName, each name made once and slabSize names to a string.
func rangeNames(template string, r unit.Range) []string {
	prefix := unit.Prefix(template) + "@"
	suffix := template[strings.LastIndexByte(template, '.'):]
	names := make([]string, max(r.Len(), 0))
	var buf []byte
	var tmp [24]byte
	ends := make([]int, slabSize)
	for from := 0; from < len(names); from += slabSize {
		part := names[from:min(len(names), from+slabSize)]
		buf = buf[:0]
		for i := range part {
			buf = append(buf, prefix...)
			n := strconv.AppendInt(tmp[:0], int64(r.From+from+i), 10)
			for range r.Width - len(n) {
				buf = append(buf, '0')
			}
			buf = append(buf, n...)
			buf = append(buf, suffix...)
			ends[i] = len(buf)
		}
		s, start := string(buf), 0
		for i := range part {
			part[i] = s[start:ends[i]]
			start = ends[i]
		}
	}
	return names
}

// check returns an error naming the first invariant (see unitStore) that
// does not hold; units are the term's records and logs its versions.
func (st *unitStore) check(units map[string]*unitRec, logs map[string]registry.VersionLog) error {
	refs := map[string]int{}
	for _, r := range units {
		if r.content != "" {
			refs[r.content]++
		}
	}
	for name, l := range logs {
		for _, c := range heldContents(name, l) {
			refs[c]++
		}
	}
	for c, f := range st.files {
		if f.refs != refs[c] {
			return fmt.Errorf("engine: file %s counts %d units and versions naming it; %d do", c, f.refs, refs[c])
		}
		delete(refs, c)
	}
	for c := range refs {
		return fmt.Errorf("engine: file %s is named, and not kept", c)
	}
	for text, c := range st.rawContent {
		if registry.ContentOf(text) != c {
			return fmt.Errorf("engine: a text's content key is %s, not its own", c)
		}
	}
	return st.checkRanges(units)
}

// checkRanges is check's part for the ranges.
func (st *unitStore) checkRanges(units map[string]*unitRec) error {
	indexed := 0
	for prefix, l := range st.standing {
		for _, pr := range l {
			if pr.prefix != prefix || st.ranges[pr.key] != pr {
				return fmt.Errorf("engine: range %s is indexed under %q, and is not the one kept under its key", pr.key, prefix)
			}
		}
		indexed += len(l)
	}
	if indexed != len(st.ranges) {
		return fmt.Errorf("engine: %d ranges, %d indexed", len(st.ranges), indexed)
	}
	for key, pr := range st.ranges {
		if pr.key != key {
			return fmt.Errorf("engine: range %s is kept as %s", pr.key, key)
		}
		n := 0
		for name := range pr.names(pr.template()) {
			n++
			if owner, _ := st.standing.of(name); owner != pr {
				return fmt.Errorf("engine: ranges %s and %s stand for %s", key, owner.key, name)
			}
			if units[name] == nil {
				return fmt.Errorf("engine: range %s stands for %s, which has no record", key, name)
			}
		}
		if n != pr.left {
			return fmt.Errorf("engine: range %s counts %d units; it stands for %d", key, pr.left, n)
		}
	}
	return nil
}
