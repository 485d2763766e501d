package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/waitfor"
)

const sleeper = `[Unit]
Description=%s test unit

[Service]
ExecStart=/bin/sh -c 'echo hello from %s; exec sleep 600'
TimeoutStopSec=5
`

func unitStates(t *testing.T, nd *node) (map[string]apiv1.UnitState, error) {
	t.Helper()
	resp, err := http.Get("http://" + nd.api + "/v1/unit-states")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET /v1/unit-states: %s", resp.Status)
	}
	var l apiv1.UnitStateList
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return nil, err
	}
	m := map[string]apiv1.UnitState{}
	for _, s := range l.States {
		m[s.Name] = s
	}
	return m, nil
}

func leaderOf(t *testing.T, nd *node) (string, error) {
	ms, err := jsonCLI[[]machineRow](t, nd, "list-machines")
	if err != nil {
		return "", err
	}
	return leaderAmong(ms)
}

// leaderAmong returns the machine list-machines marks as the leader.
func leaderAmong(ms []machineRow) (string, error) {
	for _, m := range ms {
		if m.Leader {
			return m.Machine, nil
		}
	}
	return "", fmt.Errorf("no leader among %v", ms)
}

// TestClusterLifecycle runs a three-daemon cluster with embedded etcd
// members: units are started, listed, stopped and destroyed; the leader is
// killed with SIGKILL; a new leader takes over without restarting units on
// surviving machines, the lost machine's units come back up elsewhere, and
// the killed daemon rejoins when restarted on its data dir.
//
// It runs in both coordination modes: agents streaming to the leader (grpc)
// and agents coordinating through etcd (etcd, fleet's way).
func TestClusterLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-daemon cluster")
	}
	for _, reg := range []string{"grpc", "etcd"} {
		t.Run(reg, func(t *testing.T) { testClusterLifecycle(t, reg) })
	}
}

func testClusterLifecycle(t *testing.T, reg string) {
	c := newCluster(t, 3, func(i int) []string {
		return []string{"--metadata", fmt.Sprintf("idx=%d", i+1), "--registry", reg}
	})
	n1 := c.nodes[0]

	waitfor.Until(t, 60*time.Second, "three machines and a leader", func() error {
		ms, err := jsonCLI[[]machineRow](t, n1, "list-machines")
		if err != nil {
			return err
		}
		if len(ms) != 3 {
			return fmt.Errorf("machines = %v, want 3", ms)
		}
		_, err = leaderOf(t, n1)
		return err
	})

	dir := t.TempDir()
	var paths []string
	for i := 1; i <= 6; i++ {
		name := fmt.Sprintf("sleep%d.service", i)
		paths = append(paths, writeUnit(t, dir, name, fmt.Sprintf(sleeper, name, name)))
	}
	// Any daemon answers: send the start through a follower-or-leader alike.
	mustCLI(t, c.nodes[1], append([]string{"start"}, paths...)...)

	rows, err := jsonCLI[[]unitRow](t, n1, "list-units")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 6 {
		t.Fatalf("list-units = %v, want 6 units", rows)
	}
	perMachine := map[string]int{}
	for _, r := range rows {
		if r.Active != "active" || r.Sub != "running" {
			t.Errorf("unit %s is %s/%s after start returned, want active/running", r.Unit, r.Active, r.Sub)
		}
		perMachine[r.Machine]++
	}
	for m, n := range perMachine {
		if n != 2 {
			t.Errorf("machine %s runs %d units, want 2 (least-loaded spreads 6 units over 3 machines): %v", m, n, perMachine)
		}
	}
	states, err := unitStates(t, n1)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range states {
		if s.PID == 0 || !alive(s.PID) {
			t.Errorf("unit %s: pid %d is not a live process", name, s.PID)
		}
	}
	// Active comes when the process is started (Type=simple); what it
	// prints reaches the journal a moment later.
	waitfor.Until(t, 5*time.Second, "the unit's output in journal sleep1.service", func() error {
		if out := mustCLI(t, n1, "journal", "sleep1.service"); !strings.Contains(out, "hello from sleep1.service") {
			return fmt.Errorf("journal = %q", out)
		}
		return nil
	})
	if out := mustCLI(t, n1, "cat", "sleep1.service"); !strings.Contains(out, "exec sleep 600") {
		t.Errorf("cat sleep1.service = %q, want the unit file", out)
	}

	// Every daemon answers the read side: a follower forwards /v1/state and
	// /v1/events to the leader, and serves /metrics and /ui itself.
	leaderName, err := leaderOf(t, n1)
	if err != nil {
		t.Fatal(err)
	}
	var follower *node
	for _, nd := range c.nodes {
		if nd.name != leaderName {
			follower = nd
			break
		}
	}
	checkReadSide(t, follower, leaderName, 6)
	// The follower's engine stands by, prepared to lead with the six units
	// (in the etcd registry mode an engine follows no record, and says
	// nothing of a standby).
	waitfor.Until(t, 10*time.Second, follower.name+" prepared to lead", func() error {
		var st apiv1.Status
		if _, err := getJSON("http://"+follower.api+"/v1/status", &st); err != nil {
			return err
		}
		switch {
		case reg == "etcd" && (st.IsLeader || st.Standby != nil):
			return fmt.Errorf("status %+v, standby %+v; want a follower that says nothing of a standby", st, st.Standby)
		case reg == "grpc" && (st.IsLeader || st.Standby == nil || !st.Standby.Prepared || st.Standby.Units != 6):
			return fmt.Errorf("status %+v, standby %+v; want a standby prepared with 6 units", st, st.Standby)
		}
		return nil
	})

	// stop: the process ends, the unit stays loaded on its machine.
	stoppedPID := states["sleep6.service"].PID
	mustCLI(t, n1, "stop", "sleep6.service")
	waitfor.Until(t, 10*time.Second, "sleep6 process gone", func() error {
		if alive(stoppedPID) {
			return fmt.Errorf("pid %d still alive", stoppedPID)
		}
		return nil
	})
	files, err := jsonCLI[[]fileRow](t, n1, "list-unit-files")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.Unit == "sleep6.service" && (f.Dstate != "loaded" || f.State != "loaded") {
			t.Errorf("sleep6 after stop: dstate=%s state=%s, want loaded/loaded", f.Dstate, f.State)
		}
	}
	// destroy: gone from the cluster.
	mustCLI(t, n1, "destroy", "sleep6.service")
	waitfor.Until(t, 10*time.Second, "sleep6 destroyed", func() error {
		files, err := jsonCLI[[]fileRow](t, n1, "list-unit-files")
		if err != nil {
			return err
		}
		for _, f := range files {
			if f.Unit == "sleep6.service" {
				return fmt.Errorf("still listed: %+v", f)
			}
		}
		return nil
	})

	// Kill the leader.
	leader, err := leaderOf(t, n1)
	if err != nil {
		t.Fatal(err)
	}
	var dead, survivor *node
	for _, nd := range c.nodes {
		if nd.name == leader {
			dead = nd
		} else if survivor == nil {
			survivor = nd
		}
	}
	before, err := unitStates(t, survivor)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	dead.kill()

	var newLeader string
	waitfor.Until(t, 30*time.Second, "a new leader", func() error {
		l, err := leaderOf(t, survivor)
		if err != nil {
			return err
		}
		if l == leader {
			return fmt.Errorf("leader is still %s", l)
		}
		newLeader = l
		return nil
	})
	t.Logf("leader %s killed; %s leads after %v", leader, newLeader, time.Since(killed).Round(10*time.Millisecond))

	// Units of the surviving machines kept their processes; the lost
	// machine's units come back up on the survivors after the agent TTL.
	waitfor.Until(t, agentTTL+30*time.Second, "every unit active on a surviving machine", func() error {
		rows, err := jsonCLI[[]unitRow](t, survivor, "list-units")
		if err != nil {
			return err
		}
		if len(rows) != 5 {
			return fmt.Errorf("list-units = %v, want 5 units", rows)
		}
		for _, r := range rows {
			if strings.HasPrefix(r.Machine, leader) || r.Active != "active" {
				return fmt.Errorf("unit %s on %s is %s", r.Unit, r.Machine, r.Active)
			}
		}
		return nil
	})
	t.Logf("lost machine's units running elsewhere %v after the kill", time.Since(killed).Round(10*time.Millisecond))
	after, err := unitStates(t, survivor)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range before {
		if s.Machine == leader {
			// Units outlive their daemon: the killed daemon's supervisor
			// keeps them running, cut off, until a daemon on that data
			// dir adopts them.
			if !alive(s.PID) {
				t.Errorf("unit %s: pid %d of the killed machine died with its daemon", name, s.PID)
			}
			continue
		}
		if a := after[name]; a.PID != s.PID || a.Machine != s.Machine {
			t.Errorf("unit %s on surviving machine %s: pid %d -> %d on %s; a leader change must restart nothing", name, s.Machine, s.PID, a.PID, a.Machine)
		}
	}

	// The killed daemon restarts on its data dir and rejoins.
	dead.start(t)
	waitfor.Until(t, 60*time.Second, "the restarted machine rejoins", func() error {
		ms, err := jsonCLI[[]machineRow](t, survivor, "list-machines")
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(ms, func(m machineRow) bool { return m.Machine == dead.name }) {
			return fmt.Errorf("machines = %v, want %s among them", ms, dead.name)
		}
		return nil
	})

	// destroy everything: every process ends.
	var names []string
	for i := 1; i <= 5; i++ {
		names = append(names, fmt.Sprintf("sleep%d.service", i))
	}
	final, err := unitStates(t, survivor)
	if err != nil {
		t.Fatal(err)
	}
	mustCLI(t, survivor, append([]string{"destroy"}, names...)...)
	waitfor.Until(t, 15*time.Second, "every unit's process gone", func() error {
		for name, s := range final {
			if alive(s.PID) {
				return fmt.Errorf("unit %s pid %d still alive", name, s.PID)
			}
		}
		return nil
	})
	if out := mustCLI(t, survivor, "list-unit-files", "--output", "json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("list-unit-files after destroying everything = %s, want []", out)
	}
}

// TestDevRestart: flotilla dev restarted on its data dir still has every
// unit, and its launched unit ran on through the restart: the same
// process, adopted.
func TestDevRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts flotilla dev twice")
	}
	nd := startDev(t)
	dir := t.TempDir()
	p := writeUnit(t, dir, "web.service", fmt.Sprintf(sleeper, "web", "web"))
	q := writeUnit(t, dir, "idle.service", fmt.Sprintf(sleeper, "idle", "idle"))
	mustCLI(t, nd, "start", p)
	mustCLI(t, nd, "submit", q)
	st, err := unitStates(t, nd)
	if err != nil {
		t.Fatal(err)
	}
	oldPID := st["web.service"].PID

	nd.stop(t)
	if !alive(oldPID) {
		t.Fatalf("web.service pid %d died with flotilla dev; units must outlive the daemon", oldPID)
	}
	nd.start(t)
	waitfor.Until(t, 30*time.Second, "web.service adopted", func() error {
		rows, err := jsonCLI[[]unitRow](t, nd, "list-units")
		if err != nil {
			return err
		}
		if len(rows) != 1 || rows[0].Unit != "web.service" || rows[0].Active != "active" {
			return fmt.Errorf("list-units = %+v", rows)
		}
		return nil
	})
	if st, err := unitStates(t, nd); err != nil || st["web.service"].PID != oldPID {
		t.Errorf("web.service after the restart: %+v, %v; want the same pid %d, adopted", st["web.service"], err, oldPID)
	}
	files, err := jsonCLI[[]fileRow](t, nd, "list-unit-files")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range files {
		got[f.Unit] = f.Dstate
	}
	if got["web.service"] != "launched" || got["idle.service"] != "inactive" {
		t.Errorf("unit files after restart = %v, want web launched and idle inactive", got)
	}
}

// checkReadSide checks /v1/state, /v1/events, /metrics and /ui on nd.
func checkReadSide(t *testing.T, nd *node, leader string, units int) {
	t.Helper()
	// A read may get the state as it was and start a fresh one.
	waitfor.Until(t, 10*time.Second, "GET /v1/state on "+nd.name, func() error {
		var st apiv1.State
		resp, err := getJSON("http://"+nd.api+"/v1/state", &st)
		if err != nil {
			return err
		}
		if resp.StatusCode != 200 || st.Leader != leader || len(st.Units) != units || len(st.Machines) != 3 || resp.Header.Get("ETag") == "" {
			return fmt.Errorf("%d, leader %q, %d units, %d machines, ETag %q; want the leader's state", resp.StatusCode, st.Leader, len(st.Units), len(st.Machines), resp.Header.Get("ETag"))
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+nd.api+"/v1/events?since=0.0", nil)
	eresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(eresp.Body)
	first := ""
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "event: ") {
			first = sc.Text()
			break
		}
	}
	eresp.Body.Close()
	if first != "event: reset" {
		t.Errorf("GET /v1/events?since=0.0 on %s: first event %q, want a reset (an unknown position) forwarded from the leader", nd.name, first)
	}
	for path, want := range map[string]string{"/metrics": "flotilla_leader_changes_total", "/ui/": "<html"} {
		resp, err := http.Get("http://" + nd.api + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("GET %s on %s = %d without %q", path, nd.name, resp.StatusCode, want)
		}
	}
}

// getJSON gets url and decodes its body into v (left as it is if the body
// is not JSON of it: the caller checks what it holds).
func getJSON(url string, v any) (*http.Response, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	json.NewDecoder(resp.Body).Decode(v)
	return resp, nil
}
