package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/unit"
)

// validMoves returns units and moves that keep every invariant: a.service
// moves off m1, b.service (on m2) is handed over from m1 and held, and m1
// drains two instances at a time.
func validMoves(t *testing.T) (map[string]*unitRec, moves) {
	units := map[string]*unitRec{"a.service": testRec(t, "a.service"), "b.service": testRec(t, "b.service")}
	units["b.service"].machine = "m2"
	mv := newMoves()
	mv.begin("a.service", "m1", time.Unix(100, 0))
	mv.handOver("b.service", "m1")
	mv.hold(map[string]bool{"b.service": true})
	mv.setDrain("m1", 2)
	return units, mv
}

// TestMovesCheck: moves.check finds each invariant broken on purpose, and
// nothing in moves that keep them.
func TestMovesCheck(t *testing.T) {
	units, mv := validMoves(t)
	if err := mv.check(units); err != nil {
		t.Fatalf("valid moves: %v", err)
	}
	mv.begin("c.service", "m1", time.Unix(200, 0))
	units["c.service"] = testRec(t, "c.service")
	mv.end("c.service")
	mv.stopOld("b.service", "m1", false)
	if err := mv.check(units); err != nil {
		t.Fatalf("a move begun and ended, a handover stopping: %v", err)
	}
	for _, tt := range []struct {
		name, want string
		breakIt    func(units map[string]*unitRec, mv *moves)
	}{
		{"a move without its start", "1 moves, 0 starts", func(_ map[string]*unitRec, mv *moves) { delete(mv.movedAt, "a.service") }},
		{"a start of another unit", "has no start", func(_ map[string]*unitRec, mv *moves) {
			delete(mv.movedAt, "a.service")
			mv.movedAt["b.service"] = time.Unix(100, 0)
		}},
		{"a start at no time", "has no start", func(_ map[string]*unitRec, mv *moves) { mv.movedAt["a.service"] = time.Time{} }},
		{"a move off no machine", "moves off no machine", func(_ map[string]*unitRec, mv *moves) { mv.draining["a.service"] = "" }},
		{"a move of a unit destroyed", "has no record", func(units map[string]*unitRec, _ *moves) { delete(units, "a.service") }},
		{"a moving unit scheduled", "is scheduled to m3", func(units map[string]*unitRec, _ *moves) { units["a.service"].machine = "m3" }},
		{"a handover of a unit destroyed", "without an old machine or a record", func(units map[string]*unitRec, mv *moves) {
			mv.held = map[string]bool{}
			delete(units, "b.service")
		}},
		{"a handover from no machine", "without an old machine or a record", func(_ map[string]*unitRec, mv *moves) { mv.handOver("b.service", "") }},
		{"a unit destroyed held", "holds c.service", func(_ map[string]*unitRec, mv *moves) { mv.held["c.service"] = false }},
		{"a drain of none at a time", "drains 0 instances", func(_ map[string]*unitRec, mv *moves) { mv.drainMachines["m3"] = 0 }},
	} {
		units, mv := validMoves(t)
		tt.breakIt(units, &mv)
		if err := mv.check(units); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: check = %v; want an error saying %q", tt.name, err, tt.want)
		}
	}
}

// mirrorTerm returns a term whose mirror keeps every invariant: the
// scheduler has machine m1, where a.service is placed, and the wanted
// global unit g.service is placed on it.
func mirrorTerm(t *testing.T) *term {
	g, err := unit.Parse("g.service", []byte("[Service]\nExecStart=/bin/true\n[X-Fleet]\nGlobal=true\n"))
	if err != nil {
		t.Fatal(err)
	}
	tm := &term{ctx: context.Background(), deg: newDegradation(), decisionState: &decisionState{machines: map[string]*machineRec{}, sched: newMirror(), moves: newMoves(),
		units:   map[string]*unitRec{"a.service": testRec(t, "a.service"), "g.service": newTestRec("g.service", g, unit.Launched, "")},
		globals: map[string]struct{}{"g.service": {}}}}
	tm.machine("m1")
	tm.machine("m2")
	tm.units["a.service"].machine = "m1"
	tm.sched.setMachine("m1", schedMachine{})
	tm.sched.setMachine("m2", schedMachine{})
	tm.sched.drop("m2")
	tm.sched.Place(tm.units["a.service"].su, "m1")
	tm.sched.Place(tm.units["g.service"].su, "m1")
	tm.sched.globals["g.service"] = true
	return tm
}

// TestMirrorCheck: mirror.check finds each invariant broken on purpose,
// and nothing in a mirror that keeps them; checkTerm panics with what
// check finds.
func TestMirrorCheck(t *testing.T) {
	if err := mirrorTerm(t).sched.check(mirrorTerm(t)); err != nil {
		t.Fatalf("a valid mirror: %v", err)
	}
	for _, tt := range []struct {
		name, want string
		breakIt    func(tm *term)
	}{
		{"a machine both the scheduler's and dropped", "dropped too true", func(tm *term) { tm.sched.gone["m1"] = schedMachine{} }},
		{"a machine the term forgot", "the term's false", func(tm *term) { delete(tm.machines, "m1") }},
		{"a machine the scheduler lacks", "the scheduler's false", func(tm *term) { tm.sched.RemoveMachine("m1") }},
		{"a global unit placed, not noted", "global unit g.service is placed in the scheduler on [m1], and not noted", func(tm *term) {
			delete(tm.sched.globals, "g.service")
		}},
		{"a unit noted as global that is none", "a.service is noted as placed in the scheduler as a global unit", func(tm *term) {
			tm.sched.globals["a.service"] = true
		}},
		{"a global unit noted, not wanted", "g.service is noted as placed in the scheduler as a global unit, and is no wanted", func(tm *term) {
			tm.units["g.service"].setDesired(unit.Inactive)
		}},
		{"a placed unit the scheduler does not place", `a.service is placed on "" in the scheduler, its record says "m1"`, func(tm *term) {
			tm.sched.Unplace("a.service")
		}},
		{"an unscheduled unit the scheduler places", `a.service is placed on "m1" in the scheduler, its record says ""`, func(tm *term) {
			tm.units["a.service"].machine = ""
		}},
		{"a unit placed with no record", "places 3 units on m1, the records 2", func(tm *term) {
			tm.sched.Place(testRec(t, "x.service").su, "m1")
		}},
	} {
		tm := mirrorTerm(t)
		tt.breakIt(tm)
		if err := tm.sched.check(tm); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: check = %v; want an error saying %q", tt.name, err, tt.want)
		}
	}

	// Global units are checked once synced, placements in a term that
	// decides.
	tm := mirrorTerm(t)
	tm.units["g.service"].setDesired(unit.Inactive)
	tm.globalsDirty = true
	tm.sched.Unplace("a.service")
	tm.deg.since.Store(1)
	if err := tm.sched.check(tm); err != nil {
		t.Errorf("a degraded term with globals to sync: %v", err)
	}

	tm = mirrorTerm(t)
	tm.moves.begin("a.service", "m2", time.Unix(100, 0))
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(error).Error(), "a.service moves off m2, and is scheduled to m1") {
			t.Errorf("checkTerm of a moving unit scheduled panicked with %v", r)
		}
	}()
	tm.checkTerm()
}

// validStore returns units, version logs and a store that keep every
// invariant: a@1.service, named by a range of a@.service, has its file
// by content, and b.service keeps an older version's file.
func validStore(t *testing.T) (map[string]*unitRec, map[string]registry.VersionLog, unitStore) {
	st := newStore()
	c1 := st.contentOf("x")
	a := testRec(t, "a@1.service")
	a.content = c1
	units := map[string]*unitRec{"a@1.service": a, "b.service": testRec(t, "b.service")}
	logs := map[string]registry.VersionLog{"b.service": {Versions: []registry.Version{{Content: "c2"}, {Content: "c3"}}}}
	st.files[c1] = &storedFile{text: "x", refs: 1, stored: true}
	st.files["c2"] = &storedFile{refs: 1}
	pr := newPendingRange("k1", "a@.service", unit.Range{From: 1, To: 3})
	st.ranges["k1"] = pr
	st.standing.add(pr)
	st.standing.stand(pr, "a@1.service")
	return units, logs, st
}

// TestStoreCheck: unitStore.check finds each invariant broken on purpose,
// and nothing in a store that keeps them.
func TestStoreCheck(t *testing.T) {
	units, logs, st := validStore(t)
	if err := st.check(units, logs); err != nil {
		t.Fatalf("a valid store: %v", err)
	}
	c1 := registry.ContentOf("x")
	for _, tt := range []struct {
		name, want string
		breakIt    func(units map[string]*unitRec, st *unitStore)
	}{
		{"a file miscounted", "counts 2 units and versions naming it; 1 do", func(_ map[string]*unitRec, st *unitStore) { st.files[c1].refs = 2 }},
		{"a version's file not kept", "file c2 is named, and not kept", func(_ map[string]*unitRec, st *unitStore) { delete(st.files, "c2") }},
		{"a text under another's key", "not its own", func(_ map[string]*unitRec, st *unitStore) { st.rawContent["y"] = c1 }},
		{"a range not indexed", "1 ranges, 0 indexed", func(_ map[string]*unitRec, st *unitStore) { delete(st.standing, "a@") }},
		{"a range under another key", "is indexed under", func(_ map[string]*unitRec, st *unitStore) { st.ranges["k1"].key = "k9" }},
		{"a range miscounting its units", "range k1 counts 2 units; it stands for 1", func(_ map[string]*unitRec, st *unitStore) { st.ranges["k1"].left = 2 }},
		{"two ranges standing for a unit", "ranges k2 and k1 stand for a@1.service", func(_ map[string]*unitRec, st *unitStore) {
			pr := newPendingRange("k2", "a@.service", unit.Range{From: 1, To: 3})
			pr.set(0)
			st.ranges["k2"] = pr
			st.standing.add(pr)
		}},
		{"a range standing for a unit destroyed", "range k1 stands for a@1.service, which has no record", func(units map[string]*unitRec, st *unitStore) {
			delete(units, "a@1.service")
			st.files[c1].refs = 0
		}},
	} {
		units, logs, st := validStore(t)
		tt.breakIt(units, &st)
		if err := st.check(units, logs); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: check = %v; want an error saying %q", tt.name, err, tt.want)
		}
	}
}
