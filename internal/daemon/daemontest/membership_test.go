package daemontest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/daemon/daemontest"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// TestStopUnitsOnExit: a daemon run with --stop-units-on-exit and stopped
// cleanly stops its units (their processes are gone when it returns) and
// leaves the cluster; the leader starts them on another machine at once,
// a LostAfter=infinity unit (which a lost machine never gives up) and a
// singleton included.
func TestStopUnitsOnExit(t *testing.T) {
	c := daemontest.Start(t,
		daemontest.Machine{ID: "lead", NoAgent: true},
		daemontest.Machine{ID: "b", Exec: true, StopUnitsOnExit: true})
	cl, err := client.New(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	files := map[string]string{
		"web.service":   "[Service]\nExecStart=/bin/sleep 1000\n",
		"db.service":    "[Service]\nExecStart=/bin/sleep 1000\n[X-Fleet]\nSingleton=true\n",
		"batch.service": "[Service]\nExecStart=/bin/sleep 1000\n[X-Fleet]\nLostAfter=infinity\n",
	}
	pids := map[string]int{}
	for name, file := range files {
		if _, err := cl.PutUnit(ctx, api.UnitChange{Name: name, File: file, DesiredState: "launched"}); err != nil {
			t.Fatal(err)
		}
	}
	for name := range files {
		u := daemontest.WaitUnit(t, cl, name, func(u *api.Unit) bool { return running(u) && u.Machine == "b" })
		pids[name] = u.State.PID
	}
	c.Add(t, daemontest.Machine{ID: "c", Exec: true})
	waitfor.Until(t, 30*time.Second, "machine c joining", func() error {
		ml, err := cl.Machines(ctx)
		if err != nil {
			return err
		}
		if len(ml.Machines) != 2 {
			return fmt.Errorf("machines %+v", ml.Machines)
		}
		return nil
	})

	if err := c.Stop(t, 1); err != nil {
		t.Fatalf("daemon b stopped with %v", err)
	}
	for name, pid := range pids {
		if alive(pid) {
			t.Errorf("%s's process %d on b still runs after its daemon (--stop-units-on-exit) returned", name, pid)
		}
	}
	for name, pid := range pids {
		u := daemontest.WaitUnit(t, cl, name, func(u *api.Unit) bool { return running(u) && u.Machine == "c" })
		if u.State.PID == pid || !alive(u.State.PID) {
			t.Errorf("%s on c: pid %d (was %d on b), alive %v", name, u.State.PID, pid, alive(u.State.PID))
		}
	}
	ml, err := cl.Machines(ctx)
	if err != nil || len(ml.Machines) != 1 || ml.Machines[0].ID != "c" {
		t.Errorf("machines after b left = %+v, %v; want c alone", ml, err)
	}
	st, err := cl.UnitStates(ctx, client.UnitStateFilter{Machine: "b"})
	if err != nil || len(st.States) > 0 {
		t.Errorf("unit states of b after it left: %+v, %v; want none", st, err)
	}
}

// TestNameInUse: a daemon given the name of a live machine (fleet's
// TestDetectMachineId) stays up, answers its API with 503 naming that
// machine's IP and API address (on /fleet/v1 in fleetd's words), while the
// cluster keeps the first; once the first is gone it joins by itself.
func TestNameInUse(t *testing.T) {
	for _, reg := range []string{"grpc", "etcd"} {
		t.Run(reg, func(t *testing.T) { testNameInUse(t, reg) })
	}
}

func testNameInUse(t *testing.T, reg string) {
	c := daemontest.Start(t, daemontest.Machine{ID: "e", NoAgent: true, Registry: reg})
	first := c.Add(t, daemontest.Machine{ID: "a", IP: "10.0.0.1", Registry: reg})
	cl := mustClient(t, c.URL)
	ctx := context.Background()
	machines := func() string {
		ml, err := cl.Machines(ctx)
		if err != nil {
			return err.Error()
		}
		var out []string
		for _, m := range ml.Machines {
			out = append(out, m.ID+"@"+m.IP)
		}
		return strings.Join(out, ",")
	}
	waitfor.True(t, 20*time.Second, "a at 10.0.0.1", func() bool { return machines() == "a@10.0.0.1" })
	firstAPI := strings.TrimPrefix(c.URLs[first], "http://")

	second := c.Add(t, daemontest.Machine{ID: "a", IP: "10.0.0.2", Registry: reg})
	get := func(path string) (int, string) {
		resp, err := http.Get(c.URLs[second] + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitfor.True(t, 20*time.Second, "the second a answers 503", func() bool { code, _ := get("/v1/machines"); return code == 503 })
	if err, ended := c.Ended(t, second, 3*time.Second); ended {
		t.Fatalf("the second daemon named a ended: %v; want it to stay up", err)
	}
	for path, want := range map[string][]string{
		"/v1/machines":       {`has not joined the cluster as machine \"a\"`, `machine name \"a\" is already in use`, "10.0.0.1", firstAPI},
		"/fleet/v1/machines": {"fleet server unable to communicate with etcd", `machine name \"a\" is already in use`},
	} {
		code, body := get(path)
		for _, w := range want {
			if code != 503 || !strings.Contains(body, w) {
				t.Errorf("GET %s on the second a = %d %s; want 503 with %q", path, code, body, w)
			}
		}
	}
	if got := machines(); got != "a@10.0.0.1" {
		t.Fatalf("machines = %s; want a at 10.0.0.1", got)
	}

	// The first goes away: the second joins by itself.
	if err := c.Stop(t, first); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, 20*time.Second, "a held by the second daemon, at 10.0.0.2", func() bool { return machines() == "a@10.0.0.2" })
	waitfor.True(t, 20*time.Second, "the second a's API answers", func() bool { code, _ := get("/v1/machines"); return code == 200 })
}

func mustClient(t *testing.T, url string) *client.Client {
	t.Helper()
	cl, err := client.New(url)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// TestRestartSameName: a daemon restarted at once on its own data dir is
// the same instance: it is not refused, and adopts its running unit.
func TestRestartSameName(t *testing.T) {
	c := daemontest.Start(t, daemontest.Machine{ID: "a"}, daemontest.Machine{ID: "b", Exec: true})
	cl := mustClient(t, c.URL)
	ctx := context.Background()
	if _, err := cl.PutUnit(ctx, api.UnitChange{Name: "s.service", File: "[Service]\nExecStart=/bin/sleep 1000\n[X-Fleet]\nMachineID=b\n", DesiredState: "launched"}); err != nil {
		t.Fatal(err)
	}
	before := daemontest.WaitUnit(t, cl, "s.service", running)
	c.Restart(t, 1)
	if err, ended := c.Ended(t, 1, 2*time.Second); ended {
		t.Fatalf("the restarted daemon b ended: %v", err)
	}
	after := daemontest.WaitUnit(t, cl, "s.service", func(u *api.Unit) bool {
		return running(u) && u.State.Machine == "b" && u.State.PID == before.State.PID
	})
	if !alive(after.State.PID) {
		t.Fatalf("s.service's process %d is gone after b restarted", after.State.PID)
	}
}
