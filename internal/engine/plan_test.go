package engine

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/unit"
)

// TestPlanReconcile checks the reconcile plan's buckets on tables of
// cluster states, as fleet's reconciler tests do. Times are seconds after
// the term started; the agent TTL is 20s and the grace 1s.
func TestPlanReconcile(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	ordinary := planUnit{Wanted: true}
	single := planUnit{Wanted: true, Singleton: true}
	never := planUnit{Wanted: true, LostAfter: unit.Infinity}
	quick := planUnit{Wanted: true, LostAfter: 5 * time.Second}
	// Launched units, as a drain sees them: a service, a singleton, and
	// instances of web@.service.
	service := planUnit{Wanted: true, Launched: true}
	lonely := planUnit{Wanted: true, Launched: true, Singleton: true}
	web := planUnit{Wanted: true, Launched: true}
	webOn := func(machine string) planUnit { u := web; u.Machine = machine; return u }
	tests := []struct {
		name     string
		now      float64
		machines map[string]planMachine
		units    map[string]planUnit
		moves    map[string]string
		check    map[string]string
		misfits  map[string]string // unit -> why it does not fit
		running  map[string]string // unit -> machine reporting it running
		// unreported are units no machine has reported this term;
		// movedAt is when a recorded move began, in seconds.
		unreported map[string]bool
		movedAt    map[string]float64
		active     map[string]string // unit -> machine reporting it active
		nowhere    map[string]string // unit -> why it fits on no other machine
		handover   map[string]handover
		stayed     map[string]string // unit -> the reason it stayed last pass
		dirty      bool              // something placement depends on changed
		backlog    []string
		// reconnect is the term's reconnect grace, in seconds.
		reconnect float64
		want      string
	}{{
		name:     "an unreachable machine's ordinary unit waits the agent TTL and grace from when it was last heard",
		now:      30,
		machines: map[string]planMachine{"m1": {HeardAt: at(9.5), Units: []string{"web"}}},
		units:    map[string]planUnit{"web": ordinary},
		want:     "place=[]",
	}, {
		name:     "then it is lost and placed elsewhere",
		now:      31,
		machines: map[string]planMachine{"m1": {HeardAt: at(9.5), Units: []string{"web"}}},
		units:    map[string]planUnit{"web": ordinary},
		want:     "lost=[web@m1 after 21.5s] place=[web]",
	}, {
		name:     "a machine last heard by a former leader counts from the term's start",
		now:      20.5,
		machines: map[string]planMachine{"m1": {HeardAt: at(-100), Units: []string{"web"}}},
		units:    map[string]planUnit{"web": ordinary},
		want:     "place=[]",
	}, {
		name:     "a singleton unit counts from the last message sent to its machine, plus the margin",
		now:      35.4,
		machines: map[string]planMachine{"m1": {HeardAt: at(10), SentAt: at(15), Units: []string{"db", "web"}}},
		units:    map[string]planUnit{"db": single, "web": ordinary},
		want:     "lost=[web@m1 after 25.4s] place=[web]",
	}, {
		name:     "and is lost once its machine has surely killed it",
		now:      35.6,
		machines: map[string]planMachine{"m1": {HeardAt: at(10), SentAt: at(15), Units: []string{"db", "web"}}},
		units:    map[string]planUnit{"db": single, "web": ordinary},
		want:     "lost=[db@m1 after 25.6s web@m1 after 25.6s] place=[db web]",
	}, {
		name:     "LostAfter=infinity is never lost; LostAfter=5s is lost after 6s",
		now:      6.5,
		machines: map[string]planMachine{"m1": {Units: []string{"batch", "quick"}}},
		units:    map[string]planUnit{"batch": never, "quick": quick},
		want:     "lost=[quick@m1 after 6.5s] place=[quick]",
	}, {
		name:     "a reachable machine's units stay; an unwanted lost unit is not placed",
		now:      100,
		machines: map[string]planMachine{"m1": {Reachable: true, Units: []string{"web"}}, "m2": {Units: []string{"old"}}},
		units:    map[string]planUnit{"web": ordinary, "old": {}},
		want:     "lost=[old@m2 after 1m40s] place=[]",
	}, {
		name:     "a unit that no longer fits waits for its copy to stop",
		now:      1,
		machines: map[string]planMachine{"m1": {Reachable: true}},
		units:    map[string]planUnit{"db": ordinary},
		check:    map[string]string{"db": "m1"},
		misfits:  map[string]string{"db": "needs disk=ssd"},
		running:  map[string]string{"db": "m1"},
		want:     "misfit=[db@m1: needs disk=ssd] waiting=[db: stopping on m1 before it moves] place=[]",
	}, {
		name:     "a unit that no longer fits and is not running is placed at once",
		now:      1,
		machines: map[string]planMachine{"m1": {Reachable: true}},
		units:    map[string]planUnit{"db": ordinary},
		check:    map[string]string{"db": "m1"},
		misfits:  map[string]string{"db": "needs disk=ssd"},
		want:     "misfit=[db@m1: needs disk=ssd] place=[db]",
	}, {
		name:       "a unit that no longer fits, its machine not having reported it yet, waits to hear from it",
		now:        1,
		machines:   map[string]planMachine{"m1": {Reachable: true, Streams: true, HeardAt: at(1)}},
		units:      map[string]planUnit{"db": ordinary},
		check:      map[string]string{"db": "m1"},
		misfits:    map[string]string{"db": "needs disk=ssd"},
		unreported: map[string]bool{"db": true},
		want:       "misfit=[db@m1: needs disk=ssd] waiting=[db: stopping on m1 before it moves] place=[]",
	}, {
		name:       "a recorded move of a unit never reported waits until its machine is heard after it began",
		now:        1.2,
		machines:   map[string]planMachine{"m1": {Reachable: true, Streams: true, HeardAt: at(1.2)}},
		units:      map[string]planUnit{"db": ordinary},
		moves:      map[string]string{"db": "m1"},
		unreported: map[string]bool{"db": true},
		movedAt:    map[string]float64{"db": 1},
		want:       "waiting=[db: stopping on m1 before it moves] place=[]",
	}, {
		name:       "and completes once it has been, without a word of the unit",
		now:        1.5,
		machines:   map[string]planMachine{"m1": {Reachable: true, Streams: true, HeardAt: at(1.5)}},
		units:      map[string]planUnit{"db": ordinary},
		moves:      map[string]string{"db": "m1"},
		unreported: map[string]bool{"db": true},
		movedAt:    map[string]float64{"db": 1},
		want:       "done=[db] place=[db]",
	}, {
		name:     "a recorded move completes when the old machine reports the unit stopped",
		now:      1,
		machines: map[string]planMachine{"m1": {Reachable: true}},
		units:    map[string]planUnit{"db": ordinary},
		moves:    map[string]string{"db": "m1"},
		want:     "done=[db] place=[db]",
	}, {
		name:     "a move off a machine not heard this term waits for its cut-off policy",
		now:      15,
		machines: map[string]planMachine{},
		units:    map[string]planUnit{"db": ordinary},
		moves:    map[string]string{"db": "m1"},
		want:     "waiting=[db: stopping on m1 before it moves] place=[]",
	}, {
		name:     "and completes once it has passed",
		now:      21.5,
		machines: map[string]planMachine{},
		units:    map[string]planUnit{"db": ordinary},
		moves:    map[string]string{"db": "m1"},
		want:     "done=[db] place=[db]",
	}, {
		name:     "a draining machine's units move off it, stopped first",
		now:      1,
		machines: map[string]planMachine{"m1": {Reachable: true, Draining: true, Units: []string{"a", "b"}}},
		units:    map[string]planUnit{"a": ordinary, "b": ordinary},
		running:  map[string]string{"a": "m1"},
		want:     "misfit=[a@m1: machine m1 is draining b@m1: machine m1 is draining] waiting=[a: stopping on m1 before it moves] place=[b]",
	}, {
		name:     "a draining machine's service is handed over: started elsewhere before it stops there",
		now:      1,
		machines: map[string]planMachine{"m1": {Reachable: true, Draining: true, Units: []string{"a"}}},
		units:    map[string]planUnit{"a": service},
		running:  map[string]string{"a": "m1"},
		want:     "handover=[a@m1] place=[]",
	}, {
		name:     "a singleton of a draining machine is stopped first, as every move",
		now:      1,
		machines: map[string]planMachine{"m1": {Reachable: true, Draining: true, Units: []string{"db"}}},
		units:    map[string]planUnit{"db": lonely},
		running:  map[string]string{"db": "m1"},
		want:     "misfit=[db@m1: machine m1 is draining] waiting=[db: stopping on m1 before it moves] place=[]",
	}, {
		name:     "a unit that fits nowhere else stays where it runs, singleton or not, with its reason",
		now:      1,
		machines: map[string]planMachine{"m1": {Reachable: true, Draining: true, Units: []string{"a", "db"}}},
		units:    map[string]planUnit{"a": service, "db": lonely},
		running:  map[string]string{"a": "m1", "db": "m1"},
		nowhere:  map[string]string{"a": "no machine has role=db", "db": "no machines available"},
		want:     "stay=[a: machine m1 is draining, and the unit fits nowhere else: no machine has role=db db: machine m1 is draining, and the unit fits nowhere else: no machines available] place=[]",
	}, {
		name:     "a unit that stayed stays without asking where else it fits, until placement changes",
		now:      1,
		machines: map[string]planMachine{"m1": {Reachable: true, Draining: true, Units: []string{"a", "b"}}},
		units:    map[string]planUnit{"a": service, "b": service},
		stayed:   map[string]string{"a": "machine m1 is draining, and the unit fits nowhere else: no machines available"},
		nowhere:  map[string]string{"b": "no machine has role=db"},
		want:     "stay=[a: machine m1 is draining, and the unit fits nowhere else: no machines available b: machine m1 is draining, and the unit fits nowhere else: no machine has role=db] place=[]",
	}, {
		name:     "then it is asked again",
		now:      1,
		machines: map[string]planMachine{"m1": {Reachable: true, Draining: true, Units: []string{"a"}}},
		units:    map[string]planUnit{"a": service},
		stayed:   map[string]string{"a": "machine m1 is draining, and the unit fits nowhere else: no machines available"},
		dirty:    true,
		want:     "handover=[a@m1] place=[]",
	}, {
		name:     "one instance of a template moves off a draining machine at a time by default",
		now:      1,
		machines: map[string]planMachine{"m1": {Reachable: true, Draining: true, Units: []string{"web@1.service", "web@2.service", "web@3.service", "x"}}},
		units:    map[string]planUnit{"web@1.service": web, "web@2.service": web, "web@3.service": web, "x": service},
		want:     "handover=[web@1.service@m1 x@m1] queued=[web@2.service: machine m1 is draining; waiting for its turn (1 of web@.service moving at a time) web@3.service: machine m1 is draining; waiting for its turn (1 of web@.service moving at a time)] place=[]",
	}, {
		name:     "MaxParallel instances at a time, counting those mid-move; one that fits nowhere takes no turn",
		now:      1,
		machines: map[string]planMachine{"m1": {Reachable: true, Draining: true, MaxParallel: 2, Units: []string{"web@2.service", "web@3.service", "web@4.service"}}, "m2": {Reachable: true}},
		units:    map[string]planUnit{"web@1.service": webOn("m2"), "web@2.service": web, "web@3.service": web, "web@4.service": web},
		handover: map[string]handover{"web@1.service": {From: "m1", Stopping: true}},
		running:  map[string]string{"web@1.service": "m1"},
		nowhere:  map[string]string{"web@2.service": "conflicts with web@1.service on m2"},
		want:     "handover=[web@3.service@m1] stay=[web@2.service: machine m1 is draining, and the unit fits nowhere else: conflicts with web@1.service on m2] queued=[web@4.service: machine m1 is draining; waiting for its turn (2 of web@.service moving at a time)] place=[]",
	}, {
		name:     "a handover keeps the old copy until the new one is active, not only running",
		now:      1,
		machines: map[string]planMachine{"m1": {Reachable: true, Draining: true}, "m2": {Reachable: true}},
		units:    map[string]planUnit{"web@1.service": webOn("m2")},
		handover: map[string]handover{"web@1.service": {From: "m1"}},
		running:  map[string]string{"web@1.service": "m1"},
		want:     "place=[]",
	}, {
		name:     "then the old copy is stopped",
		now:      1,
		machines: map[string]planMachine{"m1": {Reachable: true, Draining: true}, "m2": {Reachable: true}},
		units:    map[string]planUnit{"web@1.service": webOn("m2")},
		handover: map[string]handover{"web@1.service": {From: "m1"}},
		running:  map[string]string{"web@1.service": "m1"},
		active:   map[string]string{"web@1.service": "m2"},
		want:     "handoverStop=[web@1.service] place=[]",
	}, {
		name:     "and the handover forgotten once it has",
		now:      1,
		machines: map[string]planMachine{"m1": {Reachable: true, Draining: true}, "m2": {Reachable: true}},
		units:    map[string]planUnit{"web@1.service": webOn("m2"), "web@2.service": webOn("m2")},
		handover: map[string]handover{"web@1.service": {From: "m1", Stopping: true}, "web@2.service": {From: "m1", Stopping: true}},
		running:  map[string]string{"web@1.service": "m1"},
		active:   map[string]string{"web@1.service": "m2", "web@2.service": "m2"},
		want:     "handoverDone=[web@2.service] place=[]",
	}, {
		name:     "a handover whose old machine is not heard this term waits for it, until the new copy is active",
		now:      1,
		machines: map[string]planMachine{"m2": {Reachable: true}},
		units:    map[string]planUnit{"a": webOn("m2"), "b": webOn("m2")},
		handover: map[string]handover{"a": {From: "m1"}, "b": {From: "m1"}},
		active:   map[string]string{"b": "m2"},
		want:     "handoverDone=[b] place=[]",
	}, {
		name:     "a handover's old copy stops when the unit is stopped or placed back, at once if its machine left",
		now:      1,
		machines: map[string]planMachine{"m1": {Reachable: true, Draining: true}, "m3": {Left: true, HeardAt: at(0.5)}},
		units:    map[string]planUnit{"a": {Machine: "m2"}, "b": {Wanted: true, Machine: "m2"}, "c": webOn("m2"), "d": webOn("m1")},
		handover: map[string]handover{"a": {From: "m1"}, "b": {From: "m1"}, "c": {From: "m3"}, "d": {From: "m1"}},
		running:  map[string]string{"a": "m1", "b": "m1", "c": "m3", "d": "m1"},
		want:     "handoverStop=[a b] handoverDone=[c d] gone=[m3] place=[]",
	}, {
		name:     "a handover whose new copy's machine was lost keeps the old copy while the unit waits for a machine",
		now:      1,
		machines: map[string]planMachine{"m1": {Reachable: true, Draining: true}},
		units:    map[string]planUnit{"a": service},
		handover: map[string]handover{"a": {From: "m1"}},
		running:  map[string]string{"a": "m1"},
		want:     "place=[]",
	}, {
		name:     "a draining machine's units are not checked against it",
		now:      1,
		machines: map[string]planMachine{"m1": {Reachable: true, Draining: true}},
		units:    map[string]planUnit{"a": service},
		check:    map[string]string{"a": "m1"},
		misfits:  map[string]string{"a": "machine m1 is not available"},
		want:     "place=[]",
	}, {
		name:     "the backlog is placed, but not a unit still moving",
		now:      1,
		machines: map[string]planMachine{"m1": {Reachable: true}},
		units:    map[string]planUnit{"a": ordinary, "b": ordinary},
		moves:    map[string]string{"b": "m1"},
		running:  map[string]string{"b": "m1"},
		backlog:  []string{"a", "b"},
		want:     "waiting=[b: stopping on m1 before it moves] place=[a]",
	}, {
		name:     "a machine that left the cluster: every unit is lost at once, singletons and LostAfter=infinity included",
		now:      3,
		machines: map[string]planMachine{"m1": {Left: true, HeardAt: at(2.5), SentAt: at(2.9), Units: []string{"batch", "db", "old", "web"}}},
		units:    map[string]planUnit{"batch": never, "db": single, "old": {}, "web": ordinary},
		want:     "lost=[batch@m1 after 500ms db@m1 after 500ms old@m1 after 500ms web@m1 after 500ms] place=[batch db web]",
	}, {
		name:     "a unit moving off a machine that left is placed at once",
		now:      3,
		machines: map[string]planMachine{"m1": {Left: true, HeardAt: at(2.5)}},
		units:    map[string]planUnit{"db": single},
		moves:    map[string]string{"db": "m1"},
		want:     "done=[db] gone=[m1] place=[db]",
	}, {
		name:     "a machine that left with no unit is forgotten at once",
		now:      3,
		machines: map[string]planMachine{"m1": {Left: true, HeardAt: at(2.5)}, "m2": {HeardAt: at(2.5)}},
		want:     "gone=[m1] place=[]",
	}, {
		name:     "a machine unreachable past the agent TTL with no units is forgotten",
		now:      25,
		machines: map[string]planMachine{"m1": {HeardAt: at(2)}, "m2": {HeardAt: at(10)}},
		want:     "gone=[m1] place=[]",
	}, {
		name:      "machines not yet reconnected to a new term have its reconnect grace before their silence counts",
		now:       100,
		machines:  map[string]planMachine{"m1": {HeardAt: at(-5), Units: []string{"web"}}},
		units:     map[string]planUnit{"web": ordinary},
		reconnect: 80,
		want:      "place=[]",
	}, {
		name:      "and after it, their units' LostAfter= and the grace",
		now:       101.5,
		machines:  map[string]planMachine{"m1": {HeardAt: at(-5), Units: []string{"web"}}},
		units:     map[string]planUnit{"web": ordinary},
		reconnect: 80,
		want:      "lost=[web@m1 after 21.5s] place=[web]",
	}, {
		name:      "a singleton too, counted from the grace's end, plus the margin",
		now:       100.6,
		machines:  map[string]planMachine{"m1": {HeardAt: at(-5), SentAt: at(-5), Units: []string{"db"}}},
		units:     map[string]planUnit{"db": single},
		reconnect: 80,
		want:      "lost=[db@m1 after 20.6s] place=[db]",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := planInput{
				Now: at(tt.now), TermStart: t0, Reconnect: time.Duration(tt.reconnect * float64(time.Second)), AgentTTL: 20 * time.Second, Grace: time.Second,
				Machines: tt.machines, Unit: unitsFrom(tt.units), Moves: tt.moves, Check: tt.check, Backlog: tt.backlog,
				Fits: func(name, machine string) (bool, string) {
					why, misfit := tt.misfits[name]
					return !misfit, why
				},
				Running: func(name, machine string) bool {
					return tt.running[name] == machine || tt.active[name] == machine
				},
				Reported:  func(name, machine string) bool { return !tt.unreported[name] },
				MovedAt:   map[string]time.Time{},
				Active:    func(name, machine string) bool { return tt.active[name] == machine },
				Handovers: tt.handover, Stayed: tt.stayed, PlaceDirty: tt.dirty,
				Elsewhere: func(name string) (bool, string) {
					why, nowhere := tt.nowhere[name]
					return !nowhere, why
				},
			}
			for name, sec := range tt.movedAt {
				in.MovedAt[name] = at(sec)
			}
			if got := renderPlan(planReconcile(in)); got != tt.want {
				t.Errorf("planReconcile =\n  %s\nwant\n  %s", got, tt.want)
			}
		})
	}
}

// unitsFrom describes units from a map, as planInput.Unit.
func unitsFrom(units map[string]planUnit) func(string) planUnit {
	return func(name string) planUnit { return units[name] }
}

func renderPlan(p reconcilePlan) string {
	var parts []string
	if len(p.Lost) > 0 {
		var l []string
		for _, u := range p.Lost {
			l = append(l, fmt.Sprintf("%s@%s after %v", u.Name, u.Machine, u.Unheard))
		}
		parts = append(parts, "lost=["+strings.Join(l, " ")+"]")
	}
	if len(p.Misfit) > 0 {
		var l []string
		for _, u := range p.Misfit {
			l = append(l, fmt.Sprintf("%s@%s: %s", u.Name, u.Machine, u.Reason))
		}
		parts = append(parts, "misfit=["+strings.Join(l, " ")+"]")
	}
	if len(p.Waiting) > 0 {
		var l []string
		for _, name := range slices.Sorted(maps.Keys(p.Waiting)) {
			l = append(l, name+": "+p.Waiting[name])
		}
		parts = append(parts, "waiting=["+strings.Join(l, " ")+"]")
	}
	if len(p.Handover) > 0 {
		var l []string
		for _, u := range p.Handover {
			l = append(l, u.Name+"@"+u.Machine)
		}
		parts = append(parts, "handover=["+strings.Join(l, " ")+"]")
	}
	if len(p.HandoverStop) > 0 {
		parts = append(parts, fmt.Sprintf("handoverStop=%v", p.HandoverStop))
	}
	if len(p.HandoverDone) > 0 {
		parts = append(parts, fmt.Sprintf("handoverDone=%v", p.HandoverDone))
	}
	for _, b := range []struct {
		name string
		m    map[string]string
	}{{"stay", p.Stay}, {"queued", p.Queued}} {
		if len(b.m) > 0 {
			var l []string
			for _, name := range slices.Sorted(maps.Keys(b.m)) {
				l = append(l, name+": "+b.m[name])
			}
			parts = append(parts, b.name+"=["+strings.Join(l, " ")+"]")
		}
	}
	if len(p.MoveDone) > 0 {
		parts = append(parts, fmt.Sprintf("done=%v", p.MoveDone))
	}
	if len(p.Gone) > 0 {
		parts = append(parts, fmt.Sprintf("gone=%v", p.Gone))
	}
	parts = append(parts, fmt.Sprintf("place=%v", p.Place))
	return strings.Join(parts, " ")
}

// TestPlanRecheck: a pass says when the next unit will be lost by time
// alone, so the loop runs then rather than up to a heartbeat later.
func TestPlanRecheck(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	in := planInput{
		Now: t0.Add(10 * time.Second), TermStart: t0, AgentTTL: 20 * time.Second, Grace: time.Second,
		Machines: map[string]planMachine{
			"m1": {HeardAt: t0.Add(5 * time.Second), SentAt: t0.Add(7 * time.Second), Units: []string{"db", "web", "batch"}},
		},
		Unit:     unitsFrom(map[string]planUnit{"db": {Wanted: true, Singleton: true}, "web": {Wanted: true}, "batch": {Wanted: true, LostAfter: unit.Infinity}}),
		Fits:     func(string, string) (bool, string) { return true, "" },
		Running:  func(string, string) bool { return false },
		Reported: func(string, string) bool { return true },
	}
	p := planReconcile(in)
	if want := t0.Add(26 * time.Second); !p.Recheck.Equal(want) {
		t.Errorf("Recheck = %v after t0, want 26s (web: heard at 5s + 20s + 1s grace; db later, at 27.5s; batch never)", p.Recheck.Sub(t0))
	}
	in.Now = t0.Add(26*time.Second + time.Millisecond)
	p = planReconcile(in)
	if want := t0.Add(27500 * time.Millisecond); len(p.Lost) != 1 || !p.Recheck.Equal(want) {
		t.Errorf("after web is lost: lost %v, Recheck %v after t0, want [web] and 27.5s", p.Lost, p.Recheck.Sub(t0))
	}
}
