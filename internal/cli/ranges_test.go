package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// conflictingWeb is a template of which no two instances share a machine.
const conflictingWeb = "[Service]\nExecStart=/bin/web %i\n\n[X-Fleet]\nConflicts=web@*\n"

// newThree is a cluster of three machines.
func newThree(t *testing.T) *testServer {
	t.Helper()
	return newServer(t, testMachines[0], testMachines[1], apiv1.Machine{ID: "3a0ffee0aa44b8f9d0e1a2b3c4d5e6f8", IP: "172.17.8.103"})
}

// TestStartRangeCannotBePlaced: an instance of a range that fits nowhere is
// reported with its reason, as a single unit is, and start exits 2 once the
// others run, instead of waiting for ever.
func TestStartRangeCannotBePlaced(t *testing.T) {
	srv := newThree(t)
	srv.put(t, stateInactive, map[string]string{"web@.service": conflictingWeb})
	dir := writeUnits(t, map[string]string{"db.service": "[Service]\nExecStart=/bin/db\n"})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := runContext(ctx, t, srv, "start", filepath.Join(dir, "db.service"), "web@{1..4}.service")
	r.mustFail(t, "1 of 5 units did not become launched: web@")
	if code := ExitCode(r.runErr); code != ExitNotStarted {
		t.Errorf("exit code = %d, want %d", code, ExitNotStarted)
	}
	if !strings.Contains(r.err, ".service cannot be placed: ") || strings.Count(r.err, "cannot be placed") != 1 {
		t.Errorf("stderr = %q, want one instance that cannot be placed, with its reason", r.err)
	}
	if !strings.Contains(r.out, "Unit db.service launched on") {
		t.Errorf("stdout = %q, want db.service launched", r.out)
	}

	// load of the range says the same.
	r = runContext(ctx, t, srv, "load", "web@{1..4}.service")
	r.mustFail(t, "1 of 4 units did not become loaded")
	if code := ExitCode(r.runErr); code != ExitNotStarted || strings.Count(r.err, "cannot be placed") != 1 {
		t.Errorf("load: exit code %d, stderr %q; want %d and one instance that cannot be placed", code, r.err, ExitNotStarted)
	}

	// Of many, the first ten are reported one by one, the others counted.
	r = runContext(ctx, t, srv, "start", "web@{1..15}.service")
	r.mustFail(t, "12 of 15 units did not become launched: ")
	r.mustFail(t, ", 2 more of web@{1..15}.service (flotilla list-unit-files")
	if n := strings.Count(r.err, "cannot be placed"); n != maxRangeLines {
		t.Errorf("%d instances reported one by one, want %d:\n%s", n, maxRangeLines, r.err)
	}
}

// TestStartRangeSubmitsTemplate: a range whose template the cluster lacks
// submits the template file of the current directory (or of the range's
// directory), as starting a single instance does.
func TestStartRangeSubmitsTemplate(t *testing.T) {
	srv := newServer(t, testMachines[0])
	dir := writeUnits(t, map[string]string{"rng@.service": "[Service]\nExecStart=/bin/rng %i\n"})
	t.Chdir(dir)
	r := run(t, srv, "start", "rng@{1..3}.service").mustSucceed(t)
	if r.out != "Units rng@{1..3}.service launched (3 units)\n" {
		t.Errorf("start: stdout = %q", r.out)
	}
	if u, ok := srv.Unit(t, "rng@.service"); !ok || u.File != "[Service]\nExecStart=/bin/rng %i\n" {
		t.Errorf("template = %+v, want the file of the current directory", u)
	}
	if n := srv.Requests("POST /v1/batch"); n != 1 {
		t.Errorf("%d batch requests, want 1 (the template with the range)", n)
	}

	other := writeUnits(t, map[string]string{"api@.service": "[Service]\nExecStart=/bin/api %i\n"})
	run(t, srv, "load", filepath.Join(other, "api@{1..2}.service")).mustSucceed(t)
	if u, ok := srv.Unit(t, "api@2.service"); !ok || u.DesiredState != stateLoaded {
		t.Errorf("api@2.service = %+v, want it loaded from its template file", u)
	}
	run(t, srv, "start", "db@{1..2}.service").mustFail(t, "units db@{1..2}.service not found: their template db@.service is neither in the cluster nor a file here")
	run(t, srv, "start", filepath.Join(other, "db@{1..2}.service")).mustFail(t, "nor its template "+filepath.Join(other, "db@.service"))
}

// TestRangeWaitBounds: --no-block, --block-attempts, --block-timeout and an
// interrupt end a range's wait as a single unit's.
func TestRangeWaitBounds(t *testing.T) {
	srv := newFrozen(t)
	srv.put(t, stateInactive, map[string]string{"slow@.service": onMachine(helloFile, m2)})

	r := run(t, srv, "start", "--no-block", "slow@{1..2}.service").mustSucceed(t)
	if r.out != "Triggered units slow@{1..2}.service start (2 units)\n" {
		t.Errorf("--no-block: stdout = %q", r.out)
	}
	run(t, srv, "start", "--block-attempts", "2", "slow@{1..2}.service").
		mustFail(t, "gave up after 2 attempts (--block-attempts) waiting for units to become launched: slow@{1..2}.service (0 of 2 active)")
	run(t, srv, "start", "--block-timeout", "50ms", "slow@{1..2}.service").
		mustFail(t, "timed out after 50ms waiting for units to become launched: slow@{1..2}.service")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// Interrupt once the command has counted the range.
		if waitfor.Poll(10*time.Second, func() error {
			if n := len(srv.Batches()); n < 4 {
				return fmt.Errorf("%d batches", n)
			}
			return nil
		}) != nil {
			return // the command's failure below tells
		}
		polled := srv.Requests("GET /v1/state")
		waitfor.Poll(10*time.Second, func() error {
			if n := srv.Requests("GET /v1/state"); n < polled+6 {
				return fmt.Errorf("%d polls", n-polled)
			}
			return nil
		})
		cancel()
	}()
	r = runContext(ctx, t, srv, "start", "slow@{1..2}.service")
	r.mustFail(t, "interrupted while waiting for units to become launched: slow@{1..2}.service (0 of 2 active) (their desired state is set)")
	if code := ExitCode(r.runErr); code != ExitError {
		t.Errorf("exit code after an interrupt = %d, want %d", code, ExitError)
	}
}

// TestStateShowsWrite: once a write's request has returned, GET /v1/state
// shows it (range waits count there): here right after each of a series of
// batches, with the state read, and so published, in between.
func TestStateShowsWrite(t *testing.T) {
	srv := newServer(t, testMachines[0])
	ctx := context.Background()
	srv.put(t, stateInactive, map[string]string{"w@.service": "[Service]\nExecStart=/bin/w %i\n"})
	for i := 1; i <= 20; i++ {
		if _, err := srv.api.State(ctx, client.StateFilter{}); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("w@{1..%d}.service", i)
		if _, err := srv.api.Batch(ctx, apiv1.Batch{Units: []apiv1.UnitChange{{Name: name, DesiredState: stateLoaded}}}); err != nil {
			t.Fatal(err)
		}
		st, err := srv.api.State(ctx, client.StateFilter{Unit: name, State: stateLoaded, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if st.Total != i {
			t.Fatalf("GET /v1/state right after %s was loaded counts %d loaded, want %d", name, st.Total, i)
		}
	}
}
