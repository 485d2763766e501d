package cli

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/client/clienttest"
)

const m3 = "3ab0cafe0044b8f9d0e1a2b3c4d5e6f8"

// restartMachines are three machines, listed out of ID order so that the
// tests see restart order them.
var restartMachines = []apiv1.Machine{
	{ID: m3, IP: "172.17.8.103", Metadata: map[string]string{"role": "web"}},
	{ID: m1, IP: "172.17.8.101", Metadata: map[string]string{"role": "web"}, Leader: true},
	{ID: m2, IP: "172.17.8.102", Metadata: map[string]string{"role": "web"}},
}

const webFile = "[Service]\nExecStart=/bin/web %i\n"

// runningUnit is a unit launched and running on machine.
func runningUnit(name, file, machine string, pid int) apiv1.Unit {
	return apiv1.Unit{
		Name: name, File: file, DesiredState: stateLaunched, CurrentState: stateLaunched, Machine: machine,
		State: &apiv1.UnitState{Name: name, Machine: machine, Load: "loaded", Active: "active", Sub: "running", PID: pid},
	}
}

// batchSummary is a batch as "state: unit unit...", for comparisons.
func batchSummary(b apiv1.Batch) string {
	var names []string
	state := ""
	for _, ch := range b.Units {
		state = ch.DesiredState
		names = append(names, ch.Name)
	}
	return state + ": " + strings.Join(names, " ")
}

func batchSummaries(srv *clienttest.Server) []string {
	var s []string
	for _, b := range srv.Batches() {
		s = append(s, batchSummary(b))
	}
	return s
}

func TestRestartMachineByMachine(t *testing.T) {
	srv := clienttest.NewServer(t, restartMachines...)
	srv.SetLag(2)
	srv.AddUnit(runningUnit("web@1.service", webFile, m2, 11))
	srv.AddUnit(runningUnit("web@2.service", webFile, m1, 12))
	srv.AddUnit(runningUnit("web@3.service", webFile, m3, 13))
	srv.AddUnit(runningUnit("web@4.service", webFile, m1, 14))
	srv.AddUnit(runningUnit("other.service", webFile, m1, 15))
	all := []string{"web@1.service", "web@2.service", "web@3.service", "web@4.service", "other.service"}

	// Whenever restart stops units, every other unit runs: one machine at
	// a time is down.
	var (
		mu         sync.Mutex
		violations []string
	)
	srv.OnBatch(func(b apiv1.Batch) {
		if len(b.Units) == 0 || b.Units[0].DesiredState != stateLoaded {
			return
		}
		inBatch := map[string]bool{}
		for _, ch := range b.Units {
			inBatch[ch.Name] = true
		}
		for _, n := range all {
			u, _ := srv.Unit(n)
			if !inBatch[n] && (u.CurrentState != stateLaunched || u.State == nil || u.State.Active != "active") {
				mu.Lock()
				violations = append(violations, fmt.Sprintf("%s is %s/%v while stopping %s", n, u.CurrentState, u.State, batchSummary(b)))
				mu.Unlock()
			}
		}
	})

	r := run(t, srv, "restart", "web@1", "web@2.service", "web@3.service", "web@4.service").mustSucceed(t)

	wantBatches := []string{
		"loaded: web@2.service web@4.service", // m1 = 113f16a7...
		"launched: web@2.service web@4.service",
		"loaded: web@1.service", // m2 = 2c0ffee0...
		"launched: web@1.service",
		"loaded: web@3.service", // m3 = 3ab0cafe...
		"launched: web@3.service",
	}
	if got := batchSummaries(srv); strings.Join(got, "\n") != strings.Join(wantBatches, "\n") {
		t.Errorf("batches:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantBatches, "\n"))
	}
	want := "Unit web@2.service stopped on 113f16a7.../172.17.8.101\n" +
		"Unit web@4.service stopped on 113f16a7.../172.17.8.101\n" +
		"Unit web@2.service restarted on 113f16a7.../172.17.8.101\n" +
		"Unit web@4.service restarted on 113f16a7.../172.17.8.101\n" +
		"Unit web@1.service stopped on 2c0ffee0.../172.17.8.102\n" +
		"Unit web@1.service restarted on 2c0ffee0.../172.17.8.102\n" +
		"Unit web@3.service stopped on 3ab0cafe.../172.17.8.103\n" +
		"Unit web@3.service restarted on 3ab0cafe.../172.17.8.103\n"
	if r.out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", r.out, want)
	}
	if r.err != "" {
		t.Errorf("stderr = %q", r.err)
	}
	for _, v := range violations {
		t.Error(v)
	}
	for i, n := range all {
		u, _ := srv.Unit(n)
		restarted := n != "other.service"
		if u.CurrentState != stateLaunched || u.State.Active != "active" || (u.State.PID != 11+i) != restarted {
			t.Errorf("%s after restart: %s, %+v (restarted: %v)", n, u.CurrentState, u.State, restarted)
		}
	}
}

func TestRestartRefuses(t *testing.T) {
	srv := clienttest.NewServer(t, restartMachines...)
	srv.AddUnit(runningUnit("web.service", webFile, m1, 10))
	srv.AddUnit(apiv1.Unit{Name: "idle.service", File: webFile, DesiredState: stateInactive, CurrentState: stateInactive})
	srv.AddUnit(apiv1.Unit{Name: "stopped.service", File: webFile, DesiredState: stateLoaded, CurrentState: stateLoaded, Machine: m2})
	srv.AddUnit(apiv1.Unit{Name: "db.service", File: webFile, DesiredState: stateLaunched, CurrentState: stateInactive,
		Reason: "no machine matches MachineMetadata=role=db"})
	srv.AddUnit(apiv1.Unit{Name: "waiting.service", File: webFile, DesiredState: stateLaunched, CurrentState: stateInactive})
	srv.AddUnit(apiv1.Unit{Name: "mon.service", File: webFile + "[X-Fleet]\nGlobal=true\n", DesiredState: stateLaunched,
		CurrentState: stateLaunched, Global: true})

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{}, []string{"no units given (usage: flotilla restart"}},
		{[]string{"web", "nope.service"}, []string{"cannot restart: unit nope.service does not exist"}},
		{[]string{"nope", "gone", "web"}, []string{"cannot restart: units nope.service, gone.service do not exist"}},
		{[]string{"web", "idle"}, []string{"cannot restart idle.service: it is not launched (desired state inactive); start it instead"}},
		{[]string{"stopped.service", "web"}, []string{"cannot restart stopped.service: it is not launched (desired state loaded)"}},
		{[]string{"db.service"}, []string{"cannot restart db.service: it cannot be placed: no machine matches MachineMetadata=role=db"}},
		{[]string{"waiting.service"}, []string{"cannot restart waiting.service: it is not scheduled to any machine yet"}},
		{[]string{"mon.service"}, []string{"cannot restart mon.service: it is a global unit", "cannot be restarted one machine at a time"}},
		{
			[]string{"web", "idle", "nope", "mon"},
			[]string{"unit nope.service does not exist", "cannot restart idle.service", "cannot restart mon.service"},
		},
		{[]string{"--block-timeout", "-1s", "web"}, []string{"invalid --block-timeout -1s"}},
		{[]string{"--no-block", "web"}, []string{"unknown flag: --no-block"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := run(t, srv, append([]string{"restart"}, tc.args...)...)
			for _, w := range tc.want {
				r.mustFail(t, w)
			}
		})
	}
	if n := srv.Requests("POST /v1/batch"); n != 0 {
		t.Errorf("%d batch requests, want none: nothing may change", n)
	}
}

func TestRestartStopsAtFailure(t *testing.T) {
	srv := clienttest.NewServer(t, restartMachines...)
	srv.AddUnit(runningUnit("a.service", webFile, m1, 10))
	// bad.service runs now, but fails when started again.
	srv.AddUnit(runningUnit("bad.service", "[Service]\nExecStart=/bin/false\n", m2, 20))
	srv.AddUnit(runningUnit("c.service", webFile, m3, 30))

	r := run(t, srv, "restart", "a", "bad", "c")
	r.mustFail(t, "rolling restart halted at bad.service on machine 2c0ffee0.../172.17.8.102: 1 of 1 units did not become launched: bad.service; the remaining machine 3ab0cafe.../172.17.8.103 was not touched")
	if strings.Contains(r.runErr.Error(), "left with desired state loaded") {
		t.Errorf("error %q says units were left stopped; they were started", r.runErr)
	}
	if want := "Unit bad.service failed on 2c0ffee0.../172.17.8.102 (Result: exit-code)\n"; r.err != want {
		t.Errorf("stderr = %q, want %q", r.err, want)
	}
	want := "Unit a.service stopped on 113f16a7.../172.17.8.101\n" +
		"Unit a.service restarted on 113f16a7.../172.17.8.101\n" +
		"Unit bad.service stopped on 2c0ffee0.../172.17.8.102\n"
	if r.out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", r.out, want)
	}
	wantBatches := "loaded: a.service\nlaunched: a.service\nloaded: bad.service\nlaunched: bad.service"
	if got := strings.Join(batchSummaries(srv), "\n"); got != wantBatches {
		t.Errorf("batches:\n%s\nwant:\n%s", got, wantBatches)
	}
	if c, _ := srv.Unit("c.service"); c.State.PID != 30 {
		t.Errorf("c.service was restarted: %+v", c.State)
	}
}

func TestRestartTimeoutLeavesUnitsLoaded(t *testing.T) {
	srv := clienttest.NewServer(t, restartMachines...)
	srv.SetLag(1 << 30)
	srv.AddUnit(runningUnit("a.service", webFile, m1, 10))
	srv.AddUnit(runningUnit("b.service", webFile, m1, 11))
	srv.AddUnit(runningUnit("c.service", webFile, m2, 12))
	srv.AddUnit(runningUnit("d.service", webFile, m3, 13))

	r := run(t, srv, "restart", "--block-timeout", "30ms", "a", "b", "c", "d")
	r.mustFail(t, "rolling restart halted at a.service, b.service on machine 113f16a7.../172.17.8.101: "+
		"timed out after 30ms waiting for units to become loaded: a.service, b.service; "+
		"a.service, b.service left with desired state loaded: start them with `flotilla start a.service b.service`; "+
		"the 2 remaining machines 2c0ffee0.../172.17.8.102, 3ab0cafe.../172.17.8.103 were not touched")
	if got := strings.Join(batchSummaries(srv), "\n"); got != "loaded: a.service b.service" {
		t.Errorf("batches:\n%s", got)
	}
}

// A unit that moves while restarting is waited for on its new machine.
func TestRestartUnitMoves(t *testing.T) {
	srv := clienttest.NewServer(t, restartMachines...)
	file := "[Service]\nExecStart=/bin/web\n[X-Fleet]\nMachineMetadata=role=web\n"
	srv.AddUnit(runningUnit("web.service", file, m1, 10))
	db := "db"
	srv.OnBatch(func(b apiv1.Batch) {
		if batchSummary(b) == "loaded: web.service" {
			// m1 stops fitting web.service: the scheduler moves it to the
			// first machine that fits, m3.
			srv.SetMetadata(m1, map[string]*string{"role": &db})
		}
	})
	r := run(t, srv, "restart", "web.service").mustSucceed(t)
	want := "Unit web.service stopped on 3ab0cafe.../172.17.8.103\n" +
		"Unit web.service restarted on 3ab0cafe.../172.17.8.103\n"
	if r.out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", r.out, want)
	}
	if u, _ := srv.Unit("web.service"); u.Machine != m3 || u.State.Active != "active" {
		t.Errorf("web.service = %s on %s, %+v", u.CurrentState, u.Machine, u.State)
	}
}
