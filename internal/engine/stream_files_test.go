package engine

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/flotilla/flotilla/internal/scheduler"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// TestTakeFilesByKey: to an agent that takes files by key, the instances of
// a template are sent its text once a stream (again after a full set, or
// once the table is full), and every other file whole; an older agent gets
// every file whole.
func TestTakeFilesByKey(t *testing.T) {
	shared := &unit.File{Raw: "[Service]\nExecStart=/bin/sleep 100\n", Hash: "h1"}
	own := &unit.File{Raw: "[Service]\nExecStart=/bin/echo %i\n", Hash: "h2"}
	rec := func(name string, f *unit.File, content string) *unitRec {
		return &unitRec{file: f, content: content, su: &scheduler.Unit{Name: name}, want: wantLaunched}
	}
	take := func(c *agentConn, recs ...*unitRec) *agentpb.Assignments {
		for _, r := range recs {
			c.pending[r.name()] = r
		}
		return c.take(1).GetAssignments()
	}
	byName := func(as *agentpb.Assignments) map[string]*agentpb.Assignment {
		m := map[string]*agentpb.Assignment{}
		for _, a := range as.Units {
			m[a.Name] = a
		}
		return m
	}

	c := newAgentConn("m1")
	c.byHash, c.full = true, true
	as := take(c, rec("web@1.service", shared, "c1"), rec("web@2.service", shared, "c1"), rec("echo@1.service", own, "c2"), rec("db.service", shared, ""))
	if len(as.Files) != 2 || !slices.Contains(slices.Collect(maps.Values(as.Files)), shared.Raw) || !slices.Contains(slices.Collect(maps.Values(as.Files)), own.Raw) {
		t.Fatalf("files of the first (full) message = %v, want each template's text once", as.Files)
	}
	units := byName(as)
	for _, n := range []string{"web@1.service", "web@2.service", "echo@1.service"} {
		if a := units[n]; a.File != "" || as.Files[a.FileKey] != a.File+map[bool]string{true: own.Raw, false: shared.Raw}[n == "echo@1.service"] {
			t.Errorf("%s: file %q key %q, want the key of its template's text alone", n, a.File, a.FileKey)
		}
	}
	if a := units["web@1.service"]; a.Hash != "" {
		t.Errorf("web@1: hash %q sent with its file's key; the agent hashes the file itself", a.Hash)
	}
	if units["web@1.service"].FileKey != units["web@2.service"].FileKey {
		t.Errorf("web@1 and web@2 have keys %q and %q, want one", units["web@1.service"].FileKey, units["web@2.service"].FileKey)
	}
	if a := units["db.service"]; a.FileKey != "" || a.File != shared.Raw { // not stored by content
		t.Errorf("db.service: file %q key %q, want its file whole", a.File, a.FileKey)
	}
	key := units["web@1.service"].FileKey

	as = take(c, rec("web@3.service", shared, "c1"))
	if len(as.Files) != 0 || as.Units[0].FileKey != key || as.Units[0].File != "" {
		t.Fatalf("a later message: files %v, unit %v; want the key alone, its text sent before", as.Files, as.Units[0])
	}
	c.full = true
	if as = take(c, rec("web@3.service", shared, "c1")); as.Files[as.Units[0].FileKey] != shared.Raw {
		t.Fatalf("a full set after: files %v, want the text again", as.Files)
	}
	for i := range maxSentFiles {
		c.texts[strconv.Itoa(-i)] = "x"
	}
	if as = take(c, rec("web@4.service", shared, "c1")); !as.FilesReset || as.Files[as.Units[0].FileKey] != shared.Raw {
		t.Fatalf("past %d texts: reset %v files %v, want a reset and the text again", maxSentFiles, as.FilesReset, as.Files)
	}

	old := newAgentConn("m2") // an agent that did not say files_by_hash
	old.full = true
	as = take(old, rec("web@1.service", shared, "c1"))
	if len(as.Files) != 0 || as.Units[0].File != shared.Raw || as.Units[0].FileKey != "" {
		t.Fatalf("to an older agent: files %v, unit %v; want the file whole", as.Files, as.Units[0])
	}
}

// BenchmarkTakeFull makes and encodes the full set of 10,000 instances of
// the bench's template for an agent that takes files by key and for one
// that does not: the leader's side of what files by key save.
func BenchmarkTakeFull(b *testing.B) {
	f := &unit.File{Raw: "[Unit]\nDescription=flotilla bench unit\n\n[Service]\nExecStart=/bin/sleep infinity\n", Hash: strings.Repeat("a", 40)}
	recs := make([]*unitRec, 10000)
	for i := range recs {
		recs[i] = &unitRec{file: f, content: "c1", su: &scheduler.Unit{Name: "bench@" + strconv.Itoa(i+1) + ".service"}, want: wantLaunched}
	}
	for _, byKey := range []bool{false, true} {
		b.Run("byKey="+strconv.FormatBool(byKey), func(b *testing.B) {
			size := 0
			for b.Loop() {
				c := newAgentConn("m1")
				c.byHash, c.full = byKey, true
				for _, r := range recs {
					c.pending[r.name()] = r
				}
				msg, err := proto.Marshal(c.take(1))
				if err != nil {
					b.Fatal(err)
				}
				size = len(msg)
			}
			b.ReportMetric(float64(size)/float64(len(recs)), "B/unit")
		})
	}
}

// TestFullSetUnchanged: an agent whose Hello sums up the very set the
// leader would send (a new leader's agents, most often) is told its set is
// unchanged, not sent it; one whose sum differs, or that gave none, gets
// the set whole; removals after an unchanged set are named.
func TestFullSetUnchanged(t *testing.T) {
	tm := publishTerm(t, 4, 1)
	m := tm.machines["m00000"]
	sum := func(launched ...string) *agentpb.Hello {
		var d agentpb.WantsDigest
		for _, name := range launched {
			r := tm.units[name]
			d.Add(name, r.file.Hash, string(unit.Launched), false)
		}
		return &agentpb.Hello{WantsCount: d.Count, WantsDigest: d.Sum}
	}
	all := []string{"bench@0.service", "bench@1.service", "bench@2.service", "bench@3.service"}
	full := func(h *agentpb.Hello) *agentpb.Assignments {
		t.Helper()
		m.conn.hello, m.needFull = h, true
		tm.sendFull()
		return m.conn.take(1).GetAssignments()
	}
	if as := full(sum(all...)); !as.Full || !as.Unchanged || len(as.Units) != 0 || len(as.Removed) != 0 {
		t.Fatalf("the agent holds the set: sent full %v unchanged %v, %d units, removed %v; want it told unchanged, nothing listed",
			as.Full, as.Unchanged, len(as.Units), as.Removed)
	}
	for _, c := range []struct {
		why   string
		hello *agentpb.Hello
	}{
		{"one unit short", sum(all[:3]...)},
		{"no sum (an older agent, or one just started)", &agentpb.Hello{}},
		{"another count, the same sum", &agentpb.Hello{WantsCount: 5, WantsDigest: sum(all...).WantsDigest}},
	} {
		if as := full(c.hello); !as.Full || as.Unchanged || len(as.Units) != 4 {
			t.Errorf("%s: sent full %v unchanged %v, %d units; want the set whole", c.why, as.Full, as.Unchanged, len(as.Units))
		}
	}
	// A unit the agent runs is to be only loaded now: the sums differ.
	r := tm.units["bench@2.service"]
	tm.keep("bench@2.service", r, r.with(func(r *unitRec) { r.want = wantOf(unit.Loaded) }))
	if as := full(sum(all...)); as.Unchanged || len(as.Units) != 4 {
		t.Errorf("a desired state changed: unchanged %v, %d units; want the set whole", as.Unchanged, len(as.Units))
	}
	tm.keep("bench@2.service", tm.units["bench@2.service"], r)
	m.conn.hello, m.needFull = sum(all...), true
	tm.sendFull()
	m.conn.mu.Lock()
	m.conn.pending["bench@3.service"] = nil // gone after the set was decided
	m.conn.mu.Unlock()
	if as := m.conn.take(1).GetAssignments(); !as.Unchanged || !slices.Equal(as.Removed, []string{"bench@3.service"}) {
		t.Errorf("a removal after an unchanged set: unchanged %v, removed %v; want it named", as.Unchanged, as.Removed)
	}
	if as := m.conn.take(1).GetAssignments(); as != nil {
		t.Errorf("the next message %v, want none", as)
	}
}
