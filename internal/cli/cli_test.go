package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/daemon/daemontest"
	"github.com/flotilla/flotilla/internal/version"
	"github.com/flotilla/flotilla/internal/waitfor"
)

const (
	m1 = "113f16a7c1a44b8f9d0e1a2b3c4d5e6f"
	m2 = "2c0ffee0aa44b8f9d0e1a2b3c4d5e6f7"
)

var testMachines = []apiv1.Machine{
	{ID: m1, IP: "172.17.8.101", Metadata: map[string]string{"role": "web", "az": "a"}, Leader: true, Version: "0.2.0+abc1234", Protocol: 2},
	{ID: m2, IP: "172.17.8.102"},
}

const helloFile = "[Unit]\nDescription=Hello World\n\n[Service]\nExecStart=/bin/sleep 1000\n"

type result struct {
	out, err string
	runErr   error
}

// run executes the flotilla commands with args against srv.
func run(t *testing.T, srv *testServer, args ...string) result {
	t.Helper()
	return runContext(context.Background(), t, srv, args...)
}

func runContext(ctx context.Context, t *testing.T, srv *testServer, args ...string) result {
	t.Helper()
	var out bytes.Buffer
	return runWriter(ctx, t, srv, &out, args...)
}

// runWriter is run with ctx, writing standard output to out.
func runWriter(ctx context.Context, t *testing.T, srv *testServer, out io.Writer, args ...string) result {
	t.Helper()
	root := &cobra.Command{Use: "flotilla", SilenceErrors: true}
	now := time.Date(2024, 5, 1, 12, 2, 3, 0, time.UTC)
	if srv != nil && !srv.now.IsZero() {
		now = srv.now
	}
	g := &Globals{
		pollMin: time.Millisecond,
		pollMax: 5 * time.Millisecond,
		now:     func() time.Time { return now },
	}
	g.AddFlags(root.PersistentFlags())
	root.AddCommand(Commands(g)...)
	endpoint := "http://127.0.0.1:1"
	if srv != nil {
		endpoint = srv.URL
	}
	root.SetArgs(append([]string{"--endpoint", endpoint}, args...))
	var errOut bytes.Buffer
	root.SetOut(out)
	root.SetErr(&errOut)
	err := root.ExecuteContext(ctx)
	return result{out: fmt.Sprint(out), err: errOut.String(), runErr: err}
}

func (r result) mustSucceed(t *testing.T) result {
	t.Helper()
	if r.runErr != nil {
		t.Fatalf("command failed: %v\nstdout:\n%s\nstderr:\n%s", r.runErr, r.out, r.err)
	}
	return r
}

func (r result) mustFail(t *testing.T, want string) result {
	t.Helper()
	if r.runErr == nil {
		t.Fatalf("command succeeded, want error %q\nstdout:\n%s\nstderr:\n%s", want, r.out, r.err)
	}
	if !strings.Contains(r.runErr.Error(), want) {
		t.Fatalf("error = %q, want it to contain %q", r.runErr, want)
	}
	return r
}

// writeUnits writes unit files into a new directory and returns it.
func writeUnits(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestStartSubmitsAndWaits(t *testing.T) {
	srv := newServer(t, testMachines[0])
	dir := writeUnits(t, map[string]string{"hello.service": helloFile, "web.service": "[Service]\nExecStart=/bin/web\n"})

	r := run(t, srv, "start", filepath.Join(dir, "hello.service"), filepath.Join(dir, "web.service")).mustSucceed(t)
	want := "Unit hello.service launched on 113f16a7.../172.17.8.101\nUnit web.service launched on 113f16a7.../172.17.8.101\n"
	if r.out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", r.out, want)
	}
	if n := srv.Requests("POST /v1/batch"); n != 1 {
		t.Errorf("%d batch requests, want 1", n)
	}
	if u, _ := srv.Unit(t, "hello.service"); u.File != helloFile {
		t.Errorf("submitted file = %q, want %q", u.File, helloFile)
	}

	// Starting again is idempotent and reports the state again.
	r = run(t, srv, "start", "hello").mustSucceed(t)
	if r.out != "Unit hello.service launched on 113f16a7.../172.17.8.101\n" {
		t.Errorf("second start: %q", r.out)
	}
}

func TestStartManyFilesOneBatch(t *testing.T) {
	srv := newServer(t, testMachines[0])
	files := map[string]string{}
	var args []string
	for i := range 150 {
		name := fmt.Sprintf("u%03d.service", i)
		files[name] = fmt.Sprintf("[Service]\nExecStart=/bin/u %d\n", i)
		args = append(args, name)
	}
	dir := writeUnits(t, files)
	for i := range args {
		args[i] = filepath.Join(dir, args[i])
	}
	r := run(t, srv, append([]string{"start"}, args...)...).mustSucceed(t)
	if n := strings.Count(r.out, " launched on "); n != 150 {
		t.Errorf("%d launched lines, want 150", n)
	}
	if n := srv.Requests("POST /v1/batch"); n != 1 {
		t.Errorf("%d batch requests, want 1", n)
	}
	// The wait polls the list of units, not each unit: the cluster takes
	// as many polls as it needs, but never one request per unit.
	if n := srv.Requests("GET /v1/units"); n >= 150 {
		t.Errorf("%d unit list requests, want fewer than one per unit", n)
	}
	for _, r := range srv.Log() {
		if r.Method == "GET" && strings.HasPrefix(r.Path, "/v1/units/") {
			t.Errorf("the wait asked for one unit: GET %s", r.Path)
			break
		}
	}
}

func TestStartCannotBePlaced(t *testing.T) {
	srv := newServer(t, testMachines[0])
	dir := writeUnits(t, map[string]string{
		"db.service":    "[Service]\nExecStart=/bin/db\n[X-Fleet]\nMachineMetadata=role=db\n",
		"hello.service": helloFile,
	})
	r := run(t, srv, "start", filepath.Join(dir, "db.service"), filepath.Join(dir, "hello.service"))
	r.mustFail(t, "1 of 2 units did not become launched")
	if r.err != "Unit db.service cannot be placed: no machine has role=db\n" {
		t.Errorf("stderr = %q", r.err)
	}
	if !strings.Contains(r.out, "Unit hello.service launched on") {
		t.Errorf("stdout = %q, want hello.service launched", r.out)
	}
}

func TestStartFails(t *testing.T) {
	m := machine(testMachines[0])
	m.Exec = true // /bin/false really fails
	srv := newCluster(t, m)
	// It fails while activating (ExecStartPre=), so it is never active:
	// start waits until the unit runs or fails.
	dir := writeUnits(t, map[string]string{"bad.service": "[Service]\nExecStartPre=/bin/false\nExecStart=/bin/sleep 1000\n"})
	r := run(t, srv, "start", filepath.Join(dir, "bad.service"))
	r.mustFail(t, "1 of 1 units did not become launched")
	if want := "Unit bad.service failed on 113f16a7.../172.17.8.101 (Result: exit-code): ExecStartPre=/bin/false: code=exited, status=1/FAILURE\n"; r.err != want {
		t.Errorf("stderr = %q, want %q", r.err, want)
	}
}

func TestNoBlock(t *testing.T) {
	m := machine(testMachines[0])
	m.StartDelay = time.Hour
	srv := newCluster(t, m)
	dir := writeUnits(t, map[string]string{"hello.service": helloFile})
	r := run(t, srv, "start", "--no-block", filepath.Join(dir, "hello.service")).mustSucceed(t)
	if r.out != "Triggered unit hello.service start\n" {
		t.Errorf("stdout = %q", r.out)
	}
}

// newFrozen is a cluster of testMachines whose m2 cannot start or stop
// units: it runs real processes and its supervisor is frozen.
func newFrozen(t *testing.T) *testServer {
	t.Helper()
	ms := []daemontest.Machine{machine(testMachines[0]), machine(testMachines[1])}
	ms[1].Exec = true
	srv := newCluster(t, ms...)
	srv.cluster.Freeze(t, 1)
	return srv
}

func TestBlockTimeout(t *testing.T) {
	srv := newFrozen(t)
	dir := writeUnits(t, map[string]string{"hello.service": onMachine(helloFile, m2)})
	r := run(t, srv, "start", "--block-timeout", "50ms", filepath.Join(dir, "hello.service"))
	r.mustFail(t, "timed out after 50ms waiting for units to become launched: hello.service")
}

func TestInterruptWhileWaiting(t *testing.T) {
	srv := newFrozen(t)
	dir := writeUnits(t, map[string]string{"hello.service": onMachine(helloFile, m2)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// Interrupt once the command waits: once a request follows its
		// POST /v1/batch, which it sends only when the batch is answered.
		defer cancel()
		waitfor.Poll(10*time.Second, func() error {
			log := srv.Log()
			for i, r := range log {
				if r.Method == http.MethodPost && r.Path == "/v1/batch" && i < len(log)-1 {
					return nil
				}
			}
			return errors.New("not waiting yet")
		})
	}()
	r := runContext(ctx, t, srv, "start", filepath.Join(dir, "hello.service"))
	r.mustFail(t, "interrupted while waiting for units to become launched: hello.service")
}

func TestLifecycle(t *testing.T) {
	srv := newServer(t, testMachines[0])
	dir := writeUnits(t, map[string]string{"hello.service": helloFile})
	path := filepath.Join(dir, "hello.service")

	steps := []struct {
		args []string
		out  string
	}{
		{[]string{"submit", path}, "Unit hello.service inactive\n"},
		{[]string{"submit", path}, ""}, // already there: nothing to say
		{[]string{"load", "hello.service"}, "Unit hello.service loaded on 113f16a7.../172.17.8.101\n"},
		{[]string{"start", "hello.service"}, "Unit hello.service launched on 113f16a7.../172.17.8.101\n"},
		{[]string{"stop", "hello.service"}, "Unit hello.service loaded on 113f16a7.../172.17.8.101\n"},
		{[]string{"unload", "hello.service"}, "Unit hello.service inactive\n"},
		{[]string{"destroy", "hello.service"}, "Destroyed hello.service\n"},
	}
	for _, s := range steps {
		r := run(t, srv, s.args...).mustSucceed(t)
		if r.out != s.out {
			t.Errorf("%v: stdout = %q, want %q", s.args, r.out, s.out)
		}
	}
	if _, ok := srv.Unit(t, "hello.service"); ok {
		t.Error("hello.service still exists")
	}
}

func TestStateCommandErrors(t *testing.T) {
	srv := newServer(t, testMachines[0])
	srv.put(t, stateInactive, map[string]string{"idle.service": "[Service]\nExecStart=/bin/idle\n"})
	dir := writeUnits(t, map[string]string{"idle.service": "[Service]\nExecStart=/bin/different\n"})

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"start"}, "no units given (usage: flotilla start"},
		{[]string{"stop"}, "no units given"},
		{[]string{"stop", "idle.service"}, "cannot stop idle.service: not loaded on any machine"},
		{[]string{"stop", "nope.service", "gone"}, "units nope.service, gone.service do not exist"},
		{[]string{"unload", "nope.service"}, "unit nope.service does not exist"},
		{[]string{"start", "nope.service"}, "unit nope.service not found: it is neither in the cluster nor a file here"},
		{[]string{"start", "./nope.service"}, "unit file ./nope.service not found"},
		{[]string{"start", filepath.Join(dir, "idle.service")}, "unit idle.service already exists with different contents"},
		{[]string{"submit", filepath.Join(dir, "idle.service")}, "unit idle.service already exists with different contents"},
		{[]string{"start", "--block-timeout", "-1s", "idle.service"}, "invalid --block-timeout -1s"},
		{[]string{"start", "--block-timeout", "soon", "idle.service"}, `invalid argument "soon" for "--block-timeout"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			run(t, srv, tc.args...).mustFail(t, tc.want)
		})
	}
	if n := srv.Requests("POST /v1/batch"); n != 2 {
		t.Errorf("%d batch requests, want 2 (only the conflicting files reach the server)", n)
	}
}

func TestStartInstanceFromTemplate(t *testing.T) {
	srv := newServer(t, testMachines[0])
	tmpl := "[Service]\nExecStart=/bin/web %i\n"
	srv.put(t, stateInactive, map[string]string{"web@.service": tmpl})

	r := run(t, srv, "start", "web@1", "web@2.service").mustSucceed(t)
	if strings.Count(r.out, "launched on") != 2 {
		t.Errorf("stdout = %q", r.out)
	}
	for _, n := range []string{"web@1.service", "web@2.service"} {
		if u, ok := srv.Unit(t, n); !ok || u.File != tmpl {
			t.Errorf("%s = %+v, want the template's file", n, u)
		}
	}

	// A template file on disk serves for an instance path.
	dir := writeUnits(t, map[string]string{"api@.service": "[Service]\nExecStart=/bin/api\n"})
	run(t, srv, "submit", filepath.Join(dir, "api@7.service")).mustSucceed(t)
	if _, ok := srv.Unit(t, "api@7.service"); !ok {
		t.Error("api@7.service not submitted from its template file")
	}
	run(t, srv, "start", "db@1.service").mustFail(t, "its template db@.service is neither in the cluster nor a file here")
}

func TestDestroyMissing(t *testing.T) {
	srv := newServer(t, testMachines[0])
	srv.put(t, stateInactive, map[string]string{"a.service": "[Service]\nExecStart=/bin/a\n"})
	r := run(t, srv, "destroy", "a.service", "b.service").mustSucceed(t)
	if r.out != "Destroyed a.service\n" || r.err != "Unit b.service does not exist, nothing to destroy\n" {
		t.Errorf("stdout = %q, stderr = %q", r.out, r.err)
	}
	r = run(t, srv, "destroy", "b.service").mustSucceed(t)
	if srv.Requests("POST /v1/batch") != 1 {
		t.Error("destroy of nothing sent a batch")
	}
}

func TestConnectionRefusedMessage(t *testing.T) {
	r := run(t, nil, "list-units")
	r.mustFail(t, "cannot reach flotilla at http://127.0.0.1:1")
	r.mustFail(t, "flotilla dev")
}

// TestEndpointForms: HOST:PORT is taken as http://HOST:PORT, as etcdctl
// takes it, and a server that is not a Flotilla API is said to be one.
func TestEndpointForms(t *testing.T) {
	srv := newServer(t, testMachines[0])
	r := run(t, srv, "--endpoint", strings.TrimPrefix(srv.URL, "http://"), "list-machines", "--no-legend").mustSucceed(t)
	if !strings.Contains(r.out, "113f16a7...") {
		t.Errorf("list-machines through HOST:PORT:\n%s", r.out)
	}
	// Another service's port (etcd's, say) answers 404 to the API's paths.
	other := httptest.NewServer(http.NotFoundHandler())
	defer other.Close()
	for _, args := range [][]string{{"list-units"}, {"status", "hello.service"}, {"journal", "hello.service"}} {
		r = run(t, srv, append([]string{"--endpoint", other.URL}, args...)...)
		r.mustFail(t, other.URL+" is not a Flotilla API: GET /v1/")
	}
}

func TestGlobalFlagErrors(t *testing.T) {
	srv := newServer(t, testMachines[0])
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-o", "yaml", "list-units"}, `invalid --output "yaml": want table or json`},
		{[]string{"--endpoint", "127.0.0.1:port", "list-units"}, `invalid endpoint "127.0.0.1:port": want a URL such as http://127.0.0.1:7480, HOST:PORT, or a unix socket`},
		{[]string{"--request-timeout", "-1s", "list-units"}, "invalid --request-timeout -1s"},
		{[]string{"list-units", "--fields", "unit,nope"}, `invalid field "nope" in --fields: valid fields are unit, machine, load, active, sub, hash`},
		{[]string{"list-units", "--fields", ""}, "--fields is empty"},
		{[]string{"list-unit-files", "--fields", "unit,,hash"}, `invalid field "" in --fields`},
		{[]string{"list-machines", "--fields", "MACHINE"}, `invalid field "MACHINE"`},
		{[]string{"list-units", "extra"}, `unknown command "extra"`},
		{[]string{"journal"}, "journal takes exactly one unit, got 0"},
		{[]string{"journal", "a", "b"}, "journal takes exactly one unit, got 2"},
		{[]string{"journal", "-n", "-1", "a"}, "invalid --lines -1: must be 0 or more"},
		{[]string{"journal", "-n", "ten", "a"}, `invalid argument "ten" for "-n, --lines"`},
		{[]string{"cat"}, "cat takes exactly one unit, got 0"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			run(t, srv, tc.args...).mustFail(t, tc.want)
		})
	}
}

func TestListCommands(t *testing.T) {
	srv := newServer(t, testMachines...)
	dir := writeUnits(t, map[string]string{
		"hello.service": helloFile,
		"db.service":    "[Service]\nExecStart=/bin/db\n[X-Fleet]\nMachineMetadata=role=db\n",
		"idle.service":  "[Service]\nExecStart=/bin/idle\n",
	})
	run(t, srv, "start", filepath.Join(dir, "hello.service"))
	run(t, srv, "start", "--no-block", filepath.Join(dir, "db.service"))
	run(t, srv, "submit", filepath.Join(dir, "idle.service"))
	hello, _ := srv.Unit(t, "hello.service")
	db, _ := srv.Unit(t, "db.service")
	idle, _ := srv.Unit(t, "idle.service")

	r := run(t, srv, "list-units").mustSucceed(t)
	want := "UNIT\t\tMACHINE\t\t\t\tACTIVE\tSUB\tHEALTH\n" +
		"db.service\t-\t\t\t\t-\t-\t-\n" +
		"hello.service\t113f16a7.../172.17.8.101\tactive\trunning\thealthy\n"
	if r.out != want {
		t.Errorf("list-units:\n%q\nwant:\n%q", r.out, want)
	}

	r = run(t, srv, "list-unit-files").mustSucceed(t)
	want = "UNIT\t\tHASH\tDSTATE\t\tSTATE\t\tTARGET\n" +
		"db.service\t" + db.Hash[:7] + "\tlaunched\tinactive\t-\n" +
		"hello.service\t" + hello.Hash[:7] + "\tlaunched\tlaunched\t113f16a7.../172.17.8.101\n" +
		"idle.service\t" + idle.Hash[:7] + "\tinactive\tinactive\t-\n"
	if r.out != want {
		t.Errorf("list-unit-files:\n%q\nwant:\n%q", r.out, want)
	}
	if r.err != "Unit db.service cannot be placed: no machine has role=db\n" {
		t.Errorf("list-unit-files stderr = %q", r.err)
	}
	r = run(t, srv, "list-unit-files", "--no-legend", "--fields", "unit,reason").mustSucceed(t)
	if r.err != "" || !strings.Contains(r.out, "db.service\tno machine has role=db\n") {
		t.Errorf("list-unit-files --fields unit,reason: stdout %q stderr %q", r.out, r.err)
	}

	r = run(t, srv, "list-machines").mustSucceed(t)
	v := version.Get().Short() // what the test's daemons report
	want = "MACHINE\t\tIP\t\tMETADATA\tDRIVERS\tVERSION\n" +
		"113f16a7...\t172.17.8.101\taz=a,role=web\tsim\t" + v + "\n" +
		"2c0ffee0...\t172.17.8.102\t-\t\tsim\t" + v + "\n"
	if r.out != want {
		t.Errorf("list-machines:\n%q\nwant:\n%q", r.out, want)
	}

	// JSON keys are fleetctl's field names, with full IDs and hashes.
	for _, tc := range []struct {
		cmd  string
		keys string
	}{
		{"list-units", "active,hash,load,machine,sub,unit"},
		{"list-unit-files", "desc,dstate,hash,reason,state,tmachine,unit"},
		{"list-machines", "drivers,ip,leader,machine,metadata,protocol,units,version"},
	} {
		r := run(t, srv, "-o", "json", tc.cmd).mustSucceed(t)
		var objs []map[string]any
		if err := json.Unmarshal([]byte(r.out), &objs); err != nil {
			t.Fatalf("%s -o json: %v\n%s", tc.cmd, err, r.out)
		}
		if len(objs) == 0 {
			t.Fatalf("%s -o json: empty", tc.cmd)
		}
		for _, o := range objs {
			var keys []string
			for k := range o {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			if got := strings.Join(keys, ","); got != tc.keys {
				t.Errorf("%s -o json keys = %s, want %s", tc.cmd, got, tc.keys)
			}
		}
	}
	r = run(t, srv, "-o", "json", "list-units").mustSucceed(t)
	if !strings.Contains(r.out, `"machine": "`+m1+`"`) || !strings.Contains(r.out, `"hash": "`+hello.Hash+`"`) {
		t.Errorf("list-units -o json lacks full machine ID or hash:\n%s", r.out)
	}
	r = run(t, srv, "-o", "json", "list-machines").mustSucceed(t)
	if !strings.Contains(r.out, `"metadata": {
      "az": "a",
      "role": "web"
    }`) || !strings.Contains(r.out, `"metadata": {}`) {
		t.Errorf("list-machines -o json metadata:\n%s", r.out)
	}
}

func TestListEmpty(t *testing.T) {
	// A leader without an agent: a cluster with no machines.
	srv := newCluster(t, daemontest.Machine{ID: "m1", NoAgent: true})
	for _, cmd := range []string{"list-units", "list-unit-files", "list-machines"} {
		if r := run(t, srv, "-o", "json", cmd).mustSucceed(t); r.out != "[]\n" {
			t.Errorf("%s -o json = %q, want []", cmd, r.out)
		}
		if r := run(t, srv, cmd, "--no-legend").mustSucceed(t); r.out != "" {
			t.Errorf("%s --no-legend = %q, want nothing", cmd, r.out)
		}
	}
}

// journalOf returns the last n lines of the unit's journal as the API
// gives them, once it holds a line of the unit's own that ends with last.
func journalOf(t *testing.T, srv *testServer, name string, n int, last string) string {
	t.Helper()
	var journal string
	waitfor.Until(t, 30*time.Second, fmt.Sprintf("a line %q of %s in its journal", last, name), func() error {
		// Until the unit runs there may be no journal.
		rc, err := srv.api.Journal(context.Background(), name, client.JournalOptions{Lines: n})
		if err != nil {
			return err
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return err
		}
		if journal = string(b); !strings.Contains(journal, name+"[") || !strings.Contains(journal, "]: "+last+"\n") {
			return fmt.Errorf("journal %q", journal)
		}
		return nil
	})
	return journal
}

// The journal lines are the product's: "TIME UNIT[PID]: TEXT" for the
// unit's output, among the daemon's own lines ("flotilla[PID]: Started
// ..."). status shows the last ten as the API gives them.
func TestStatus(t *testing.T) {
	m := machine(testMachines[0])
	m.Exec = true
	srv := newCluster(t, m)
	file := "[Unit]\nDescription=Hello World\n\n[Service]\nExecStart=/bin/sh -c 'echo one; echo two; exec sleep 1000'\n"
	dir := writeUnits(t, map[string]string{"hello.service": file})
	run(t, srv, "start", filepath.Join(dir, "hello.service")).mustSucceed(t)
	journal := journalOf(t, srv, "hello.service", statusJournalLines, "two")
	if !strings.Contains(journal, "]: one\n") {
		t.Errorf("journal = %q, want the unit's one and two", journal)
	}
	hello, _ := srv.Unit(t, "hello.service")

	since, _ := time.Parse(time.RFC3339, hello.State.Since)
	srv.now = since.Add(2*time.Minute + 2*time.Second)
	r := run(t, srv, "status", "hello").mustSucceed(t)
	want := "● hello.service - Hello World\n" +
		"   Loaded: loaded\n" +
		"   Active: active (running) since " + since.Local().Format("Mon 2006-01-02 15:04:05 MST") + "; 2min 2s ago\n" +
		"   Health: healthy\n" +
		fmt.Sprintf(" Main PID: %d\n", hello.State.PID) +
		"  Machine: " + m1 + "/172.17.8.101\n" +
		"  Desired: launched\n" +
		"\n" +
		journal
	if r.out != want {
		t.Errorf("status:\n%s\nwant:\n%s", r.out, want)
	}

	r = run(t, srv, "status", "hello.service", "nope.service")
	r.mustFail(t, "unit nope.service does not exist")
	if !strings.HasPrefix(r.out, "● hello.service") {
		t.Errorf("status of a found and a missing unit: stdout = %q", r.out)
	}

	r = run(t, srv, "-o", "json", "status", "hello.service").mustSucceed(t)
	var units []apiv1.Unit
	if err := json.Unmarshal([]byte(r.out), &units); err != nil || len(units) != 1 || units[0].State == nil {
		t.Errorf("status -o json = %s (%v)", r.out, err)
	}
}

func TestCat(t *testing.T) {
	srv := newServer(t, testMachines[0])
	srv.put(t, stateInactive, map[string]string{"hello.service": "[Service]\nExecStart=/bin/x"})
	if r := run(t, srv, "cat", "hello").mustSucceed(t); r.out != "[Service]\nExecStart=/bin/x" {
		t.Errorf("cat = %q", r.out)
	}
	run(t, srv, "cat", "nope.service").mustFail(t, "unit nope.service not found")
}

// The journal lines are the product's (see TestStatus); journal prints
// them as the API gives them.
func TestJournal(t *testing.T) {
	m := machine(testMachines[0])
	m.Exec = true
	srv := newCluster(t, m)
	goFile := filepath.Join(t.TempDir(), "go")
	file := "[Service]\nExecStart=/bin/sh -c 'echo l1; echo l2; echo l3; echo l4; while [ ! -e " + goFile +
		" ]; do sleep 0.05; done; echo new; exec sleep 1000'\n"
	srv.put(t, stateLaunched, map[string]string{"hello.service": file})
	all := journalOf(t, srv, "hello.service", 100, "l4")
	lines := strings.SplitAfter(all, "\n")
	lines = lines[:len(lines)-1]

	if r := run(t, srv, "journal", "-n", "2", "hello.service").mustSucceed(t); r.out != strings.Join(lines[len(lines)-2:], "") {
		t.Errorf("journal -n 2 = %q, want the last two of %q", r.out, all)
	}
	r := run(t, srv, "journal", "hello.service").mustSucceed(t)
	if r.out != journalOf(t, srv, "hello.service", 10, "l4") {
		t.Errorf("journal = %q, want the last ten of %q", r.out, all)
	}
	var text []string
	for _, l := range strings.Split(r.out, "\n") {
		if _, after, ok := strings.Cut(l, "hello.service["); ok {
			_, after, _ = strings.Cut(after, "]: ")
			text = append(text, after)
		}
	}
	if strings.Join(text, ",") != "l1,l2,l3,l4" {
		t.Errorf("journal = %q, want the unit's l1 to l4", r.out)
	}
	// A unit that does not exist is said not to, as status says; one that
	// runs nowhere has no journal.
	run(t, srv, "journal", "nope.service").mustFail(t, "unit nope.service does not exist")
	srv.put(t, stateInactive, map[string]string{"idle.service": helloFile})
	run(t, srv, "journal", "idle.service").mustFail(t, "unit idle.service is not running on any machine, so it has no journal to show")

	// -f follows until interrupted, and then ends cleanly: the unit writes
	// "new" once the journal is followed.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &watchWriter{
		done:    func(s string) bool { return strings.HasSuffix(s, "]: new\n") },
		onWrite: func() { os.WriteFile(goFile, nil, 0o644) },
		cancel:  cancel,
	}
	r = runWriter(ctx, t, srv, out, "journal", "-f", "-n", "1", "hello.service").mustSucceed(t)
	if !strings.HasPrefix(r.out, lines[len(lines)-1]) || !strings.HasSuffix(r.out, "]: new\n") {
		t.Errorf("journal -f = %q, want %q then new lines up to the unit's new", r.out, lines[len(lines)-1])
	}
}

// watchWriter collects output, calls onWrite after each write and cancel
// once done says the output is complete.
type watchWriter struct {
	mu      sync.Mutex
	b       bytes.Buffer
	done    func(string) bool
	onWrite func()
	cancel  context.CancelFunc
}

func (w *watchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.b.Write(p)
	w.onWrite()
	if w.done(w.b.String()) {
		w.cancel()
	}
	return n, err
}

func (w *watchWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestStartRange: a range of instances is one short request; start waits
// until every instance is active, stop until none runs, destroy removes
// them all.
func TestStartRange(t *testing.T) {
	srv := newServer(t, testMachines[0])
	srv.put(t, stateInactive, map[string]string{"web@.service": "[Service]\nExecStart=/bin/web\n"})

	r := run(t, srv, "start", "web@{1..50}.service").mustSucceed(t)
	if r.out != "Units web@{1..50}.service launched (50 units)\n" {
		t.Errorf("start: stdout = %q", r.out)
	}
	if n := srv.Requests("POST /v1/batch"); n != 1 {
		t.Errorf("%d batch requests, want 1", n)
	}
	for _, n := range []string{"web@1.service", "web@50.service"} {
		if u, ok := srv.Unit(t, n); !ok || u.DesiredState != stateLaunched {
			t.Errorf("%s = %+v, want launched", n, u)
		}
	}
	if _, ok := srv.Unit(t, "web@51.service"); ok {
		t.Error("web@51.service exists")
	}
	r = run(t, srv, "stop", "web@{1..50}").mustSucceed(t)
	if r.out != "Units web@{1..50}.service loaded (50 units)\n" {
		t.Errorf("stop: stdout = %q", r.out)
	}
	run(t, srv, "destroy", "web@{1..50}.service").mustSucceed(t)
	if _, ok := srv.Unit(t, "web@7.service"); ok {
		t.Error("web@7.service survived destroy of its range")
	}
	run(t, srv, "start", "web@{5..1}.service").mustFail(t, "TO (1) is below FROM (5)")
	run(t, srv, "start", "web{1..3}.service").mustFail(t, "must follow the \"@\"")
}
