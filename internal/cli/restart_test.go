package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/daemon/daemontest"
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

// onMachine is file bound to machine by [X-Fleet] MachineID=.
func onMachine(file, machine string) string {
	return file + "[X-Fleet]\nMachineID=" + machine + "\n"
}

// runUnits sets up units launched and running on the machines, each name
// bound to its machine, and returns their main PIDs.
func runUnits(t *testing.T, srv *testServer, file string, on map[string]string) map[string]int {
	t.Helper()
	files := map[string]string{}
	for name, m := range on {
		files[name] = onMachine(file, m)
	}
	srv.put(t, stateLaunched, files)
	pids := map[string]int{}
	for name := range on {
		pids[name] = srv.waitUnit(t, name, running).State.PID
	}
	return pids
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

func batchSummaries(srv *testServer) []string {
	var s []string
	for _, b := range srv.Batches() {
		s = append(s, batchSummary(b))
	}
	return s
}

func TestRestartMachineByMachine(t *testing.T) {
	srv := newServer(t, restartMachines...)
	pids := runUnits(t, srv, webFile, map[string]string{
		"web@1.service": m2, "web@2.service": m1, "web@3.service": m3, "web@4.service": m1, "other.service": m1,
	})
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
			u, _ := srv.Unit(t, n)
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
	for _, n := range all {
		u, _ := srv.Unit(t, n)
		restarted := n != "other.service"
		if !running(u) || (u.State.PID != pids[n]) != restarted {
			t.Errorf("%s after restart: %s, %+v (restarted: %v)", n, u.CurrentState, u.State, restarted)
		}
	}
}

func TestRestartRefuses(t *testing.T) {
	srv := newServer(t, restartMachines...)
	runUnits(t, srv, webFile, map[string]string{"web.service": m1})
	srv.put(t, stateInactive, map[string]string{"idle.service": webFile})
	srv.put(t, stateLoaded, map[string]string{"stopped.service": onMachine(webFile, m2)})
	srv.put(t, stateLaunched, map[string]string{
		"db.service":  webFile + "[X-Fleet]\nMachineMetadata=role=db\n",
		"mon.service": webFile + "[X-Fleet]\nGlobal=true\n",
	})
	srv.waitUnit(t, "stopped.service", func(u apiv1.Unit) bool { return u.CurrentState == stateLoaded })
	srv.waitUnit(t, "db.service", func(u apiv1.Unit) bool { return u.Reason != "" })
	// The fake had a unit wanted launched, unplaced and without a reason
	// ("it is not scheduled to any machine yet"): the real engine places a
	// unit or says why at once, so that state cannot be set up here.

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{}, []string{"no units given (usage: flotilla restart"}},
		{[]string{"web", "nope.service"}, []string{"cannot restart: unit nope.service does not exist"}},
		{[]string{"nope", "gone", "web"}, []string{"cannot restart: units nope.service, gone.service do not exist"}},
		{[]string{"web", "idle"}, []string{"cannot restart idle.service: it is not launched (desired state inactive); start it instead"}},
		{[]string{"stopped.service", "web"}, []string{"cannot restart stopped.service: it is not launched (desired state loaded)"}},
		{[]string{"db.service"}, []string{"cannot restart db.service: it cannot be placed: no machine has role=db"}},
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
	// m2 runs real processes: bad.service runs now, but fails when started
	// again, in ExecStartPre= so that it never looks active (a main process
	// that exits at once is active for a moment, which a loaded machine may
	// report before its failure).
	ms := []daemontest.Machine{machine(restartMachines[0]), machine(restartMachines[1]), machine(restartMachines[2])}
	ms[2].Exec = true
	srv := newCluster(t, ms...)
	pids := runUnits(t, srv, webFile, map[string]string{"a.service": m1, "c.service": m3})
	flag := filepath.Join(t.TempDir(), "ran")
	runUnits(t, srv, "[Service]\nExecStartPre=/bin/sh -c 'if [ -e "+flag+" ]; then exit 1; fi; touch "+flag+"'\nExecStart=/bin/sleep 1000\n",
		map[string]string{"bad.service": m2})

	r := run(t, srv, "restart", "a", "bad", "c")
	r.mustFail(t, "rolling restart halted at bad.service on machine 2c0ffee0.../172.17.8.102: 1 of 1 units did not become launched: bad.service; the remaining machine 3ab0cafe.../172.17.8.103 was not touched")
	if strings.Contains(r.runErr.Error(), "left with desired state loaded") {
		t.Errorf("error %q says units were left stopped; they were started", r.runErr)
	}
	if want := "Unit bad.service failed on 2c0ffee0.../172.17.8.102 (Result: exit-code): ExecStartPre=/bin/sh: code=exited, status=1/FAILURE\n"; r.err != want {
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
	if c, _ := srv.Unit(t, "c.service"); c.State.PID != pids["c.service"] {
		t.Errorf("c.service was restarted: %+v", c.State)
	}
}

func TestRestartTimeoutLeavesUnitsLoaded(t *testing.T) {
	// m1 (restartMachines[1]) runs real processes, and then its
	// supervisor freezes: nothing stops its units.
	ms := []daemontest.Machine{machine(restartMachines[0]), machine(restartMachines[1]), machine(restartMachines[2])}
	ms[1].Exec = true
	srv := newCluster(t, ms...)
	runUnits(t, srv, "[Service]\nExecStart=/bin/sleep 1000\n", map[string]string{"a.service": m1, "b.service": m1})
	runUnits(t, srv, webFile, map[string]string{"c.service": m2, "d.service": m3})
	srv.cluster.Freeze(t, 1)

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
	srv := newServer(t, restartMachines...)
	file := "[Service]\nExecStart=/bin/web\n[X-Fleet]\nMachineMetadata=role=web\n"
	db, web := "db", "web"
	setRole := func(m string, role *string) {
		if _, err := srv.api.PatchMachine(context.Background(), m, apiv1.MachinePatch{Metadata: map[string]*string{"role": role}}); err != nil {
			t.Errorf("set role of %s: %v", m, err)
		}
	}
	// web.service starts on m1, the only machine that fits it then.
	setRole(m2, &db)
	setRole(m3, &db)
	srv.put(t, stateLaunched, map[string]string{"web.service": file})
	srv.waitUnit(t, "web.service", func(u apiv1.Unit) bool { return running(u) && u.Machine == m1 })
	setRole(m3, &web)
	srv.OnBatch(func(b apiv1.Batch) {
		if batchSummary(b) == "loaded: web.service" {
			// m1 stops fitting web.service: the scheduler moves it to
			// the only machine that fits, m3.
			setRole(m1, &db)
		}
	})
	r := run(t, srv, "restart", "web.service").mustSucceed(t)
	want := "Unit web.service stopped on 3ab0cafe.../172.17.8.103\n" +
		"Unit web.service restarted on 3ab0cafe.../172.17.8.103\n"
	if r.out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", r.out, want)
	}
	if u, _ := srv.Unit(t, "web.service"); u.Machine != m3 || u.State.Active != "active" {
		t.Errorf("web.service = %s on %s, %+v", u.CurrentState, u.Machine, u.State)
	}
}
