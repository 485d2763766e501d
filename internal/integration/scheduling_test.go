package integration

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/waitfor"
)

// placement returns unit -> machines running it (active), from list-units.
func placement(t *testing.T, nd *node) (map[string][]string, error) {
	rows, err := jsonCLI[[]unitRow](t, nd, "list-units")
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, r := range rows {
		if r.Active == "active" {
			out[r.Unit] = append(out[r.Unit], r.Machine)
		}
	}
	for _, ms := range out {
		sort.Strings(ms)
	}
	return out, nil
}

func wantPlacement(t *testing.T, nd *node, what string, want map[string]string) {
	t.Helper()
	waitfor.Until(t, 20*time.Second, what, func() error {
		got, err := placement(t, nd)
		if err != nil {
			return err
		}
		for u, ms := range want {
			if g := strings.Join(got[u], ","); g != ms {
				return fmt.Errorf("%s runs on %q, want %q (all: %v)", u, g, ms, got)
			}
		}
		return nil
	})
}

// TestClusterScheduling places units with fleet's [X-Fleet] options on a
// three-daemon cluster, through the CLI: metadata, MachineID, conflicts
// between template instances, MachineOf, global units, a metadata change
// that moves units, an unplaceable unit that says why, and a rolling restart.
func TestClusterScheduling(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-daemon cluster")
	}
	md := []string{"role=web,az=a", "role=web,az=b", "role=db,az=a"}
	c := newCluster(t, 3, func(i int) []string { return []string{"--metadata", md[i]} })
	n1 := c.nodes[0]
	waitfor.Until(t, 60*time.Second, "three machines", func() error {
		ms, err := jsonCLI[[]machineRow](t, n1, "list-machines")
		if err != nil || len(ms) != 3 {
			return fmt.Errorf("machines %v, %v", ms, err)
		}
		return nil
	})
	dir := t.TempDir()
	svc := "[Service]\nExecStart=/bin/sh -c 'echo %n up; exec sleep 600'\nTimeoutStopSec=5\n"
	files := map[string]string{
		"db.service":      svc + "[X-Fleet]\nMachineMetadata=role=db\n",
		"pinned.service":  svc + "[X-Fleet]\nMachineID=n2\n",
		"web@.service":    svc + "[X-Fleet]\nMachineMetadata=role=web role=db\nConflicts=web@*.service\n",
		"sidecar.service": svc + "[X-Fleet]\nMachineOf=db.service\n",
		"mon.service":     svc + "[X-Fleet]\nGlobal=true\nMachineMetadata=role=web\n",
		"cache.service":   svc + "[X-Fleet]\nMachineMetadata=role=cache\n",
	}
	paths := map[string]string{}
	for name, body := range files {
		paths[name] = writeUnit(t, dir, name, body)
	}
	mustCLI(t, n1, "start", paths["db.service"], paths["pinned.service"])
	mustCLI(t, n1, "submit", paths["web@.service"])
	mustCLI(t, n1, "start", "web@1.service", "web@2.service", "web@3.service")
	mustCLI(t, n1, "start", paths["sidecar.service"], paths["mon.service"])
	wantPlacement(t, n1, "constraints honoured", map[string]string{
		"db.service": "n3", "pinned.service": "n2", "sidecar.service": "n3", "mon.service": "n1,n2",
	})
	got, _ := placement(t, n1)
	var webs []string
	for _, u := range []string{"web@1.service", "web@2.service", "web@3.service"} {
		webs = append(webs, got[u]...)
	}
	sort.Strings(webs)
	if strings.Join(webs, ",") != "n1,n2,n3" {
		t.Errorf("web@1..3 run on %v, want one on each machine (Conflicts=web@*.service)", webs)
	}
	// A fourth instance conflicts everywhere: start says why and fails.
	out, err := cli(t, n1, "start", "web@4.service")
	if err == nil || !strings.Contains(out, "conflicts with web@") {
		t.Errorf("start web@4.service = %v, %q; want a failure naming the conflict", err, out)
	}
	// So does a unit whose metadata no machine has.
	out, err = cli(t, n1, "start", "--block-timeout", "30s", paths["cache.service"])
	if err == nil || !strings.Contains(out, "role=cache") {
		t.Errorf("start cache.service = %v, %q; want a failure naming role=cache", err, out)
	}
	mustCLI(t, n1, "destroy", "web@4.service", "cache.service")

	// Swap roles: n1 becomes the db machine, n3 a web machine. db and its
	// sidecar move to n1; the global unit follows the web role.
	mustCLI(t, n1, "set-metadata", "n3", "role=web")
	mustCLI(t, n1, "set-metadata", "n1", "role=db")
	wantPlacement(t, n1, "units follow the metadata change", map[string]string{
		"db.service": "n1", "sidecar.service": "n1", "mon.service": "n2,n3", "pinned.service": "n2",
	})

	// Rolling restart: every web instance gets a new process, one machine at a time.
	before, err := unitStates(t, n1)
	if err != nil {
		t.Fatal(err)
	}
	out = mustCLI(t, n1, "restart", "web@1.service", "web@2.service", "web@3.service")
	if n := strings.Count(out, "restarted on"); n != 3 {
		t.Errorf("restart printed %d 'restarted on' lines, want 3:\n%s", n, out)
	}
	after, err := unitStates(t, n1)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"web@1.service", "web@2.service", "web@3.service"} {
		if before[u].PID == after[u].PID || after[u].Active != "active" {
			t.Errorf("%s after restart: pid %d -> %d, %s; want a new, active process", u, before[u].PID, after[u].PID, after[u].Active)
		}
	}
	// %n in ExecStart= is expanded per instance, as systemd does.
	waitfor.Until(t, 5*time.Second, "the instance's own name in journal web@2.service", func() error {
		if out := mustCLI(t, n1, "journal", "web@2.service"); !strings.Contains(out, "web@2.service up") {
			return fmt.Errorf("journal = %q", out)
		}
		return nil
	})
}
