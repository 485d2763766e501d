package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPlanAndVersions: plan of a changed template and its running
// instances lists what it would restart and exits 5; start with the
// plan's index replaces them; a stale index is refused with 409 and
// changes nothing; history lists the versions, --diff shows the change,
// tag keeps a version and revert returns to it.
func TestPlanAndVersions(t *testing.T) {
	srv := newServer(t, testMachines[0])
	strategy := "[X-Update]\nMaxParallel=2\nMinHealthyTime=50ms\n"
	v1 := "[Service]\nExecStart=/bin/sleep 1000\n" + strategy
	v2 := "[Service]\nExecStart=/bin/sleep 2000\n" + strategy
	dir := writeUnits(t, map[string]string{"web@.service": v1})
	t.Chdir(dir)
	run(t, srv, "start", "web@{1..2}.service").mustSucceed(t)

	// Unchanged: exit 0.
	r := run(t, srv, "plan", "web@.service", "web@{1..2}.service")
	if r.runErr != nil || ExitCode(r.runErr) != ExitOK {
		t.Fatalf("plan of unchanged units: %v\n%s", r.runErr, r.out)
	}
	if !strings.Contains(r.out, "= web@1.service (version 1): keeps running on "+m1) {
		t.Fatalf("plan of unchanged units:\n%s", r.out)
	}

	// Changed: the diff, the instances restarted, exit 5.
	if err := os.WriteFile(filepath.Join(dir, "web@.service"), []byte(v2), 0o644); err != nil {
		t.Fatal(err)
	}
	r = run(t, srv, "plan", "web@.service")
	if code := ExitCode(r.runErr); code != ExitPlanChanges {
		t.Fatalf("plan of changed units: exit %d (%v), want %d\n%s", code, r.runErr, ExitPlanChanges, r.out)
	}
	for _, want := range []string{
		"~ web@.service (version 1): stored\n",
		"-ExecStart=/bin/sleep 1000\n    +ExecStart=/bin/sleep 2000\n",
		"~ web@1.service (version 1): restarts on " + m1 + " with the new file (the deployment of web@.service version 2 replaces it, 2 at a time)\n",
		"~ web@2.service (version 1): restarts on " + m1 + " with the new file (the deployment of web@.service version 2 replaces it, 2 at a time)\n",
		"0 new, 3 changed, 0 unchanged; 0 would start, 2 restart, 0 move, 0 cannot be placed\n",
	} {
		if !strings.Contains(r.out, want) {
			t.Fatalf("plan of changed units lacks %q:\n%s", want, r.out)
		}
	}
	m := regexp.MustCompile(`Check index: (\d+) `).FindStringSubmatch(r.out)
	if m == nil {
		t.Fatalf("plan shows no check index:\n%s", r.out)
	}
	index := m[1]
	if n := srv.Requests("POST /v1/batch"); n != 1 {
		t.Fatalf("plan wrote: %d batches", n)
	}

	// Someone else changes the template: the plan's index is stale.
	other := "[Service]\nExecStart=/bin/sleep 3000\n" + strategy
	run(t, srv, "submit", "--replace", writeUnitsFile(t, "web@.service", other)).mustSucceed(t)
	r = run(t, srv, "submit", "--replace", "--check-index", index, "web@.service")
	r.mustFail(t, "check index "+index+" is stale: web@.service is at version 2")
	if u, _ := srv.Unit(t, "web@1.service"); !strings.Contains(u.File, "sleep 3000") { // the other's
		t.Fatalf("a refused write changed web@1.service: %q", u.File)
	}

	// Planned again, the write goes through.
	r = run(t, srv, "plan", "web@.service")
	index = regexp.MustCompile(`Check index: (\d+) `).FindStringSubmatch(r.out)[1]
	run(t, srv, "submit", "--replace", "--update", "Bogus=1", "web@.service").mustFail(t, `update: `)
	run(t, srv, "submit", "--replace", "--check-index", index, "--update", "MaxParallel=1", "web@.service").mustSucceed(t)
	r = run(t, srv, "deployment", "status", "web@.service").mustSucceed(t)
	if !strings.Contains(r.out, ": succeeded\n") || !strings.Contains(r.out, "Strategy: MaxParallel=1 MinHealthyTime=50ms") {
		t.Fatalf("deployment status:\n%s", r.out)
	}

	// history, --diff, tag, revert.
	r = run(t, srv, "history", "web@.service").mustSucceed(t)
	for _, want := range []string{"VERSION\tHASH", "1\t", "created", "2\t", "3*\t", "replaced"} {
		if !strings.Contains(strings.Join(strings.Fields(r.out), "\t"), strings.Join(strings.Fields(want), "\t")) {
			t.Fatalf("history lacks %q:\n%s", want, r.out)
		}
	}
	r = run(t, srv, "history", "web@.service", "--diff", "1", "3").mustSucceed(t)
	if want := "--- web@.service version 1\n+++ web@.service version 3\n@@ -1,5 +1,5 @@\n [Service]\n-ExecStart=/bin/sleep 1000\n+ExecStart=/bin/sleep 2000\n [X-Update]\n MaxParallel=2\n MinHealthyTime=50ms\n"; r.out != want {
		t.Fatalf("history --diff:\n%s\nwant:\n%s", r.out, want)
	}
	run(t, srv, "tag", "web@.service", "1", "first").mustSucceed(t)
	r = run(t, srv, "revert", "web@.service", "1").mustSucceed(t)
	if want := "Unit web@.service reverted to 1: now version 4\n"; !strings.HasPrefix(r.out, want) {
		t.Fatalf("revert: %q, want %q", r.out, want)
	}
	if !strings.Contains(r.out, "Deployment of web@.service version 4: succeeded, 2 of 2 done\n") {
		t.Fatalf("revert did not roll the instances:\n%s", r.out)
	}
	if u, _ := srv.Unit(t, "web@2.service"); !strings.Contains(u.File, "sleep 1000") {
		t.Fatalf("web@2.service after the revert: %q", u.File)
	}
	r = run(t, srv, "history", "web@1.service").mustSucceed(t)
	if !strings.HasPrefix(r.out, "web@1.service follows the versions of its template web@.service:\n") || !strings.Contains(r.out, "first") {
		t.Fatalf("history of an instance:\n%s", r.out)
	}
	run(t, srv, "revert", "web@.service", "9").mustFail(t, "has no version 9 (it keeps 1, 2, 3, 4)")
	run(t, srv, "tag", "web@.service", "2", "bad tag").mustFail(t, `tag "bad tag"`)
	r = run(t, srv, "history", "--keep", "5").mustSucceed(t)
	if r.out != "The cluster keeps 5 versions of each unit\n" {
		t.Fatalf("history --keep: %q", r.out)
	}
}

// writeUnitsFile writes one unit file into a new directory and returns its path.
func writeUnitsFile(t *testing.T, name, text string) string {
	t.Helper()
	return filepath.Join(writeUnits(t, map[string]string{name: text}), name)
}
