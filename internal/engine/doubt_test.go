package engine

import (
	"fmt"
	"testing"
	"time"
)

// TestPlanDoubt: when a tenth of the machines (ten at least) fall silent
// at once, the leader holds their units where they are until the doubt
// has run its time; fewer silent machines, or a machine that left, lose
// their units as LostAfter= says.
func TestPlanDoubt(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	// cluster has heard machines and silent ones (heard last at 5s, so
	// lost from 26s), each running one unit named after it; the first
	// left silent machines left the cluster.
	cluster := func(heard, silent, left int) planInput {
		in := planInput{
			TermStart: t0, AgentTTL: 20 * time.Second, Grace: time.Second, DoubtFor: 60 * time.Second,
			Machines: map[string]planMachine{}, Check: map[string]string{}, Moves: map[string]string{},
			Unit:     func(name string) planUnit { return planUnit{Wanted: true} },
			Running:  func(string, string) bool { return true },
			Reported: func(string, string) bool { return true },
			Fits:     func(string, string) (bool, string) { return true, "" },
		}
		for i := range heard {
			in.Machines[fmt.Sprintf("up%02d", i)] = planMachine{Reachable: true, Streams: true, HeardAt: at(29)}
		}
		for i := range silent {
			id := fmt.Sprintf("down%02d", i)
			in.Machines[id] = planMachine{Streams: true, HeardAt: at(5), Left: i < left, Units: []string{"u-" + id}}
		}
		return in
	}
	lostFrom := func(p reconcilePlan) (lost int, left int) {
		for _, l := range p.Lost {
			lost++
			if l.Left {
				left++
			}
		}
		return lost, left
	}

	// Nine silent machines of 39: too few to doubt, however large a share.
	in := cluster(30, 9, 0)
	in.Now = at(30)
	if p := planReconcile(in); len(p.Lost) != 9 || !p.Doubt.IsZero() || p.Held != 0 {
		t.Errorf("9 of 39 silent: lost %d, doubt %v, held %d; want 9 lost, no doubt", len(p.Lost), p.Doubt, p.Held)
	}
	// Ten of 101: under a tenth.
	in = cluster(91, 10, 0)
	in.Now = at(30)
	if p := planReconcile(in); len(p.Lost) != 10 || !p.Doubt.IsZero() {
		t.Errorf("10 of 101 silent: lost %d, doubt %v; want 10 lost, no doubt", len(p.Lost), p.Doubt)
	}
	// Ten of 40 (a tenth, and more): the doubt begins, for DoubtFor; nothing is lost, and the
	// loop is to look again when it ends.
	in = cluster(30, 10, 0)
	in.Now = at(30)
	p := planReconcile(in)
	if len(p.Lost) != 0 || len(p.Place) != 0 || p.Held != 10 || !p.Doubt.Equal(at(90)) || p.Silent != 10 || p.Known != 40 {
		t.Errorf("10 of 40 silent: lost %d, place %v, held %d, doubt %v, silent %d of %d; want none lost, 10 held until 90s, 10 of 40",
			len(p.Lost), p.Place, p.Held, p.Doubt.Sub(t0), p.Silent, p.Known)
	}
	if !p.Recheck.Equal(at(90)) {
		t.Errorf("Recheck = %v after t0, want 90s, when the doubt ends", p.Recheck.Sub(t0))
	}
	// The next pass keeps the doubt begun, not a new one.
	in.Doubt, in.Now = p.Doubt, at(60)
	if p := planReconcile(in); !p.Doubt.Equal(at(90)) || len(p.Lost) != 0 {
		t.Errorf("within the doubt: doubt %v, lost %d; want 90s, none", p.Doubt.Sub(t0), len(p.Lost))
	}
	// Once it has run out with the machines still silent, their units are
	// lost; the doubt is kept, so that it does not begin again.
	in.Now = at(90)
	if p := planReconcile(in); len(p.Lost) != 10 || len(p.Place) != 10 || !p.Doubt.Equal(at(90)) {
		t.Errorf("after the doubt: lost %d, place %d, doubt %v; want 10 lost and placed, doubt kept", len(p.Lost), len(p.Place), p.Doubt.Sub(t0))
	}
	// Most machines heard again within it: the doubt holds the rest (the
	// slowest of the same trouble) until it runs out, then ends.
	in = cluster(35, 5, 0)
	in.Doubt, in.Now = at(90), at(60)
	if p := planReconcile(in); !p.Doubt.Equal(at(90)) || len(p.Lost) != 0 || p.Held != 5 {
		t.Errorf("5 of 40 silent within a doubt: doubt %v, lost %d, held %d; want 90s, none lost, 5 held", p.Doubt.Sub(t0), len(p.Lost), p.Held)
	}
	in.Now = at(90)
	if p := planReconcile(in); !p.Doubt.IsZero() || len(p.Lost) != 5 {
		t.Errorf("5 of 40 silent after a doubt: doubt %v, lost %d; want none, 5 lost", p.Doubt, len(p.Lost))
	}
	// A quarter silent, but none silent for long enough to lose a unit:
	// nothing to doubt yet.
	in = cluster(30, 10, 0)
	in.Now = at(20)
	if p := planReconcile(in); !p.Doubt.IsZero() || p.Held != 0 {
		t.Errorf("10 of 40 silent for 15s: doubt %v, held %d; want none", p.Doubt, p.Held)
	}
	// Machines that left are gone whatever the doubt.
	in = cluster(30, 12, 2)
	in.Now = at(30)
	p = planReconcile(in)
	if lost, left := lostFrom(p); lost != 2 || left != 2 || p.Held != 10 || p.Silent != 10 || p.Known != 40 {
		t.Errorf("12 silent of 42, 2 of them left: lost %d (%d left), held %d, silent %d of %d; want the 2 that left, 10 held, 10 of 40",
			lost, left, p.Held, p.Silent, p.Known)
	}
	// A unit moving off a silent machine waits for the doubt too.
	in = cluster(30, 10, 0)
	in.Now = at(30)
	in.Moves = map[string]string{"u-down00": "down00"}
	in.Machines["down00"] = planMachine{Streams: true, HeardAt: at(5)}
	in.Unit = func(name string) planUnit {
		if name == "u-down00" {
			return planUnit{Wanted: true, Machine: ""}
		}
		return planUnit{Wanted: true}
	}
	if p := planReconcile(in); p.Waiting["u-down00"] == "" || len(p.MoveDone) != 0 {
		t.Errorf("a move off a silent machine in doubt: waiting %v, done %v; want it waiting", p.Waiting, p.MoveDone)
	}
}
