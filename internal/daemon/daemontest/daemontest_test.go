package daemontest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/daemon/daemontest"
	"github.com/flotilla/flotilla/internal/supervisor/supervisortest"
	"github.com/flotilla/flotilla/internal/waitfor"
)

func TestMain(m *testing.M) { supervisortest.Main(m) }

// TestStart: a cluster is up with its machines, their IPs and metadata, the
// first leading, and schedules a unit.
func TestStart(t *testing.T) {
	start := time.Now()
	c := daemontest.Start(t,
		daemontest.Machine{ID: "a", IP: "10.0.0.1", Metadata: map[string]string{"role": "web"}},
		daemontest.Machine{ID: "b", IP: "10.0.0.2"},
		daemontest.Machine{ID: "engine-only", NoAgent: true})
	t.Logf("cluster of 3 daemons up in %v", time.Since(start))
	if len(c.URLs) != 3 || c.URL != c.URLs[0] {
		t.Fatalf("URLs = %v, URL = %s", c.URLs, c.URL)
	}
	cl, err := client.New(c.URLs[1]) // any daemon forwards to the leader
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ml, err := cl.Machines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ml.Machines) != 2 || ml.Machines[0].ID != "a" || !ml.Machines[0].Leader || ml.Machines[0].IP != "10.0.0.1" ||
		ml.Machines[0].Metadata["role"] != "web" || ml.Machines[1].ID != "b" || ml.Machines[1].Leader {
		t.Fatalf("machines = %+v", ml.Machines)
	}
	file := "[Service]\nExecStart=/bin/web\n[X-Fleet]\nMachineMetadata=role=web\n"
	if _, err := cl.PutUnit(ctx, api.UnitChange{Name: "web.service", File: file, DesiredState: "launched"}); err != nil {
		t.Fatal(err)
	}
	daemontest.WaitUnit(t, cl, "web.service", func(u *api.Unit) bool {
		return u.Machine == "a" && u.State != nil && u.State.Active == "active"
	})
}

// TestFreeze: a frozen machine takes a unit but does not start it.
func TestFreeze(t *testing.T) {
	c := daemontest.Start(t, daemontest.Machine{ID: "a"}, daemontest.Machine{ID: "b", Exec: true})
	c.Freeze(t, 1)
	cl, err := client.New(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	file := "[Service]\nExecStart=/bin/sleep 1000\n[X-Fleet]\nMachineID=b\n"
	if _, err := cl.PutUnit(ctx, api.UnitChange{Name: "s.service", File: file, DesiredState: "launched"}); err != nil {
		t.Fatal(err)
	}
	daemontest.WaitUnit(t, cl, "s.service", func(u *api.Unit) bool { return u.Machine == "b" })
	// Nothing tells that b's agent has tried and failed to start it but
	// time: the unit is watched for half a second.
	waitfor.Holds(t, 500*time.Millisecond, "s.service placed on the frozen machine b and not launched", func() error {
		u, err := cl.Unit(ctx, "s.service")
		if err != nil {
			return err
		}
		if u.Machine != "b" || u.CurrentState == "launched" || (u.State != nil && u.State.Active == "active") {
			return fmt.Errorf("%+v", u)
		}
		return nil
	})
}
