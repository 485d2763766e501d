package execdriver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// TestHandoverValidate: a handover that cannot be adopted is refused with
// an error naming what is wrong; a good one survives its encoding.
func TestHandoverValidate(t *testing.T) {
	web := newUnit("web.service", []string{"/bin/sleep", "300"}, nil)
	good := func() *Handover {
		return &Handover{Format: HandoverFormat, Dir: "/d", LockFD: 3, Units: []UnitState{
			{Name: "web.service", File: web, Cur: web, Phase: "running", Env: &EnvState{Dir: "/"},
				Main:   &ProcState{PID: 100, Label: "ExecStart", Argv: []string{"/bin/sleep", "300"}},
				Groups: []GroupState{{PGID: 100, Start: 7}},
				Pipes:  []PipeState{{FD: 4, PID: 100, Main: true, Rest: []byte("half a ")}}},
			{Name: "idle.service", File: newUnit("idle.service", []string{"/bin/true"}, nil), Phase: "dead"},
		}}
	}
	b, err := json.Marshal(good())
	if err != nil {
		t.Fatal(err)
	}
	var back Handover
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if err := back.Validate(); err != nil {
		t.Fatalf("a good handover, encoded and decoded: %v", err)
	}
	if u := back.Units[0]; u.Main.PID != 100 || string(u.Pipes[0].Rest) != "half a " || u.Cur.Hash != web.Hash {
		t.Errorf("decoded unit %+v lost what was encoded", u)
	}

	for _, tc := range []struct {
		want string
		edit func(*Handover)
	}{
		{"format 2", func(h *Handover) { h.Format = 2 }},
		{"phase \"stop-sigterm\"", func(h *Handover) { h.Units[0].Phase = "stop-sigterm" }},
		{"running without a main process", func(h *Handover) { h.Units[0].Main = nil; h.Units[0].Pipes[0].Main = false }},
		{"without the run's definition", func(h *Handover) { h.Units[0].Env = nil }},
		{"dead with a run", func(h *Handover) { h.Units[1].Cur = web }},
		{"listed twice", func(h *Handover) { h.Units[1] = h.Units[0] }},
		{"pipe descriptor 3", func(h *Handover) { h.Units[0].Pipes[0].FD = 3 }},
		{"no unit file of that name", func(h *Handover) { h.Units[1].File = web }},
		{"process group 1", func(h *Handover) { h.Units[0].Groups[0].PGID = 1 }},
		{"cannot be used as a file name", func(h *Handover) { h.Units[1].Name = "../x"; h.Units[1].File = &unit.File{Name: "../x"} }},
	} {
		h := good()
		tc.edit(h)
		if err := h.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate of a handover with %s: %v", tc.want, err)
		}
	}
}

// TestHandoverResume: Handover freezes the units and describes them, the
// start of a line a process wrote included; Load is refused meanwhile.
// Resumed (the execve failed), they go on as before: the line is logged
// whole, a unit that is killed is restarted.
func TestHandoverResume(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	part := newUnit("part.service", nil, func(s *unit.Service) {
		s.ExecStart = []unit.Command{sh("printf 'first\\nhalf-'; sleep 0.5; printf 'line\\n'; exec sleep 300")}
		s.Restart = "always"
		s.RestartSec = 50 * time.Millisecond
	})
	mustLoadStart(t, d, part)
	st := rec.waitState(t, "part.service", "active", "running")
	waitLog(t, d, "part.service", "part.service["+fmt.Sprint(st.PID)+"]: first")

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	h, resume, err := d.Handover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Validate(); err != nil {
		t.Errorf("Validate of what Handover made: %v", err)
	}
	if len(h.Units) != 1 {
		t.Fatalf("handover of %d units, want 1: %+v", len(h.Units), h.Units)
	}
	u := h.Units[0]
	if u.Phase != "running" || u.Main == nil || u.Main.PID != st.PID || len(u.Pipes) != 1 || !u.Pipes[0].Main {
		t.Errorf("handed over %+v, want running with main pid %d and its pipe", u, st.PID)
	}
	if len(u.Pipes) == 1 && string(u.Pipes[0].Rest) != "half-" {
		t.Errorf("the pipe's unlogged bytes: %q, want %q", u.Pipes[0].Rest, "half-")
	}
	if err := d.Load(newUnit("new.service", []string{"/bin/true"}, nil)); !errors.Is(err, ErrHandingOver) {
		t.Errorf("Load during a handover: %v, want ErrHandingOver", err)
	}
	resume()

	waitLog(t, d, "part.service", "part.service["+fmt.Sprint(st.PID)+"]: half-line")
	killGroup(st.PID)
	rec.wait(t, "part.service", "restarted", func(s unit.Status) bool { return s.Active == "active" && s.PID != 0 && s.PID != st.PID })
	if err := d.Load(newUnit("new.service", []string{"/bin/true"}, nil)); err != nil {
		t.Errorf("Load after the handover was resumed: %v", err)
	}
}

// TestHandoverBusy: a unit that stays starting makes Handover fail with
// ErrBusy once its context ends, and every unit goes on.
func TestHandoverBusy(t *testing.T) {
	t.Parallel()
	d, rec := newTestDriver(t, nil)
	mustLoadStart(t, d, newUnit("web.service", nil, func(s *unit.Service) {
		s.ExecStart = []unit.Command{sh("while :; do echo tick; sleep 0.05; done")}
	}))
	web := rec.waitState(t, "web.service", "active", "running")
	mustLoadStart(t, d, newUnit("slow.service", []string{"/bin/sleep", "300"}, func(s *unit.Service) {
		s.ExecStartPre = []unit.Command{cmd("/bin/sleep", "300")}
	}))
	rec.waitState(t, "slow.service", "activating", "start-pre")

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, _, err := d.Handover(ctx); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "slow.service is activating/start-pre") {
		t.Fatalf("Handover with a unit in start-pre: %v, want ErrBusy naming it", err)
	}
	ticks := strings.Count(journal(t, d, "web.service"), "tick")
	waitfor.True(t, waitTimeout, "web.service's log to go on after a failed handover", func() bool {
		return strings.Count(journal(t, d, "web.service"), "tick") > ticks+3
	})
	for _, st := range d.States() {
		if st.Name == "web.service" && (st.PID != web.PID || st.Active != "active") {
			t.Errorf("web.service after a failed handover: %+v, want active with pid %d", st, web.PID)
		}
	}
	if err := d.Stop("slow.service"); err != nil {
		t.Errorf("Stop after a failed handover: %v", err)
	}
	rec.waitEnded(t, "slow.service", "inactive")
}
