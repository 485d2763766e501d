package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// copies counts, per unit, the machines that report it running (active,
// activating, deactivating) and those that report it active.
func copies(states []apiv1.UnitState) (running, active map[string]int) {
	running, active = map[string]int{}, map[string]int{}
	for _, s := range states {
		switch s.Active {
		case "active":
			active[s.Name]++
			running[s.Name]++
		case "activating", "deactivating", "reloading":
			running[s.Name]++
		}
	}
	return running, active
}

// TestDrain drains a machine of a three-daemon cluster, as a user would,
// with the exec driver: its units run as real processes. A unit that fits
// on no other machine keeps running there, its PID unchanged, with its
// reason in drain's output, list-units and /v1/state, and drain exits 2;
// services never have zero active copies (the new one starts first), one
// instance of a template at a time; a Singleton= unit never runs twice.
// drain --cancel starts nothing again; a machine left empty exits 0.
func TestDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-daemon cluster")
	}
	c := newCluster(t, 3, func(i int) []string {
		role := "web"
		if i == 0 {
			role = "db"
		}
		return []string{"--metadata", "role=" + role}
	})
	n1 := c.nodes[0]
	waitfor.Until(t, 60*time.Second, "three machines and a leader", func() error {
		ms, err := jsonCLI[[]machineRow](t, n1, "list-machines")
		if err == nil && len(ms) != 3 {
			err = fmt.Errorf("machines = %v, want 3", ms)
		}
		if err == nil {
			_, err = leaderAmong(ms)
		}
		return err
	})
	dir := t.TempDir()
	const xfleet = "\n[X-Fleet]\n"
	db := writeUnit(t, dir, "db.service", fmt.Sprintf(sleeper, "db", "db")+xfleet+"MachineMetadata=role=db\n")
	api := writeUnit(t, dir, "api.service", fmt.Sprintf(sleeper, "api", "api"))
	solo := writeUnit(t, dir, "solo.service", fmt.Sprintf(sleeper, "solo", "solo")+xfleet+"Singleton=true\n")
	web := writeUnit(t, dir, "web@.service", fmt.Sprintf(sleeper, "web", "%n"))
	// Everything starts on n1: the others drain meanwhile.
	mustCLI(t, n1, "drain", "--no-block", "n2")
	mustCLI(t, n1, "drain", "--no-block", "n3")
	mustCLI(t, n1, "submit", web)
	mustCLI(t, n1, "start", db, api, solo, "web@1.service", "web@2.service", "web@3.service")
	mustCLI(t, n1, "drain", "--cancel", "n2")
	mustCLI(t, n1, "drain", "--cancel", "n3")
	before, err := unitStates(t, n1)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range before {
		if s.Machine != "n1" || !alive(s.PID) {
			t.Fatalf("%s before the drain: on %s, pid %d; want a live process on n1", name, s.Machine, s.PID)
		}
	}
	if len(before) != 6 {
		t.Fatalf("%d units run before the drain, want 6: %v", len(before), before)
	}

	// Watch the copies while n1 drains.
	stop := make(chan struct{})
	var watch sync.WaitGroup
	var problems []string
	watch.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			l, err := jsonGet[apiv1.UnitStateList](n1, "/v1/unit-states")
			if err != nil {
				continue
			}
			running, active := copies(l.States)
			for _, name := range []string{"api.service", "web@1.service", "web@2.service", "web@3.service", "db.service"} {
				if active[name] == 0 {
					problems = append(problems, name+" had no active copy")
				}
			}
			if running["solo.service"] > 1 {
				problems = append(problems, "solo.service (Singleton=) ran twice")
			}
			moving := 0
			for i := 1; i <= 3; i++ {
				if running[fmt.Sprintf("web@%d.service", i)] > 1 {
					moving++
				}
			}
			if moving > 1 {
				problems = append(problems, fmt.Sprintf("%d instances of web@.service mid-move at once", moving))
			}
		}
	})
	out, err := cli(t, n1, "drain", "n1")
	close(stop)
	watch.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Errorf("drain n1: %v, want exit status 2 (a unit stays); output:\n%s", err, out)
	}
	for _, want := range []string{
		"Units moved: 5, waiting: 0, staying: 1",
		"Unit db.service stays on n1: machine n1 is draining, and the unit fits nowhere else: no machine has role=db",
		"machine n1 is not empty: 1 of its units fit nowhere else and stay",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("drain n1 printed:\n%s\nwant a line %q", out, want)
		}
	}
	if len(problems) > 0 {
		t.Errorf("during the drain: %s", strings.Join(slices.Compact(slices.Sorted(slices.Values(problems))), "; "))
	}
	after, err := unitStates(t, n1)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range after {
		switch {
		case name == "db.service" && (s.Machine != "n1" || s.PID != before[name].PID || !alive(s.PID)):
			t.Errorf("db.service after the drain: on %s, pid %d; want it still running on n1 as pid %d", s.Machine, s.PID, before[name].PID)
		case name != "db.service" && (s.Machine == "n1" || alive(before[name].PID)):
			t.Errorf("%s after the drain: on %s, and its pid %d on n1 alive %v; want it moved off n1", name, s.Machine, before[name].PID, alive(before[name].PID))
		}
	}
	lu, err := exec.Command(flotillaBin, "--endpoint", "http://"+n1.api, "list-units").CombinedOutput()
	if err != nil || !strings.Contains(string(lu), "Unit db.service on n1: machine n1 is draining, and the unit fits nowhere else") {
		t.Errorf("list-units: %v\n%s\nwant db.service's reason", err, lu)
	}
	st, err := jsonGet[apiv1.State](n1, "/v1/state")
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range st.Units {
		if u.Name == "db.service" && !strings.Contains(u.Reason, "fits nowhere else") {
			t.Errorf("/v1/state shows db.service with reason %q", u.Reason)
		}
	}

	// Cancelling starts nothing again; a machine that empties exits 0.
	mustCLI(t, n1, "drain", "--cancel", "n1")
	// No event tells that the engine has passed over the cancelled drain
	// and decided nothing: db.service's process is watched for a pass or
	// two.
	waitfor.Holds(t, time.Second, fmt.Sprintf("db.service after drain --cancel: the same process, pid %d", before["db.service"].PID), func() error {
		st, err := unitStates(t, n1)
		if err != nil {
			return err
		}
		if st["db.service"].PID != before["db.service"].PID {
			return fmt.Errorf("%+v", st["db.service"])
		}
		return nil
	})
	mustCLI(t, n1, "destroy", "db.service")
	out, err = cli(t, n1, "drain", "n1")
	if err != nil || !strings.Contains(out, "Units moved: 0, waiting: 0, staying: 0") {
		t.Errorf("drain of an empty n1: %v, want exit status 0 and nothing moved; output:\n%s", err, out)
	}
	out = mustCLI(t, n1, "drain", "--cancel", "n1")
	if !strings.Contains(out, "false") {
		t.Errorf("drain --cancel n1 printed:\n%s\nwant the machine, not draining", out)
	}
}

// jsonGet decodes the answer to GET path from node nd's API.
func jsonGet[T any](nd *node, path string) (T, error) {
	var v T
	resp, err := http.Get("http://" + nd.api + path)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return v, json.NewDecoder(resp.Body).Decode(&v)
}
