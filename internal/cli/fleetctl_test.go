package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	apiv1 "github.com/flotilla/flotilla/api"
)

// runNoEndpoint runs the commands with no --endpoint flag, as a user
// relying on the environment does.
func runNoEndpoint(t *testing.T, args ...string) result {
	t.Helper()
	root := &cobra.Command{Use: "flotilla", SilenceErrors: true}
	g := &Globals{pollMin: time.Millisecond, pollMax: 5 * time.Millisecond}
	g.AddFlags(root.PersistentFlags())
	root.AddCommand(Commands(g)...)
	root.SetArgs(args)
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	err := root.ExecuteContext(context.Background())
	return result{out: out.String(), err: errOut.String(), runErr: err}
}

func TestEndpoints(t *testing.T) {
	srv := newServer(t, testMachines[0])
	sock := srv.cluster.Socket
	for _, ep := range []string{
		"unix://" + sock,
		sock,
		"http://127.0.0.1:1, " + srv.URL, // the first does not answer
		"unix:///nonexistent/fleet.sock,unix://" + sock, // nor here
		srv.URL + ",http://127.0.0.1:1",
	} {
		t.Run(ep, func(t *testing.T) {
			r := run(t, srv, "--endpoint", ep, "list-machines", "--no-legend").mustSucceed(t)
			if !strings.Contains(r.out, "113f16a7...") {
				t.Errorf("list-machines through %s:\n%s", ep, r.out)
			}
		})
	}
	r := run(t, srv, "--endpoint", "http://127.0.0.1:1,unix:///nonexistent/fleet.sock", "list-machines")
	r.mustFail(t, "none of the 2 endpoints of --endpoint answers")
	if !strings.Contains(r.runErr.Error(), "http://127.0.0.1:1") || !strings.Contains(r.runErr.Error(), "unix:///nonexistent/fleet.sock") {
		t.Errorf("error %q does not name both endpoints", r.runErr)
	}
	if code := ExitCode(r.runErr); code != ExitUnavailable {
		t.Errorf("exit code when no endpoint answers = %d, want %d", code, ExitUnavailable)
	}
	run(t, srv, "--endpoint", "unix://fleet.sock", "list-machines").mustFail(t, "three slashes")
	run(t, srv, "--endpoint", " , ", "list-machines").mustFail(t, "names no endpoint")
}

func TestFleetctlEndpointEnv(t *testing.T) {
	srv := newServer(t, testMachines[0])
	t.Setenv(EndpointEnv, "")
	os.Unsetenv(EndpointEnv)
	t.Setenv(FleetctlEndpointEnv, "unix://"+srv.cluster.Socket)
	r := runNoEndpoint(t, "list-machines", "--no-legend").mustSucceed(t)
	if !strings.Contains(r.out, "113f16a7...") {
		t.Errorf("list-machines through $FLEETCTL_ENDPOINT:\n%s", r.out)
	}
	// --endpoint wins over it.
	runNoEndpoint(t, "--endpoint", "http://127.0.0.1:1", "list-machines").mustFail(t, "cannot reach flotilla at http://127.0.0.1:1")
	// $FLOTILLA_ENDPOINT set (cmd/flotilla makes it the flag's value): $FLEETCTL_ENDPOINT is ignored.
	t.Setenv(EndpointEnv, "http://127.0.0.1:1")
	runNoEndpoint(t, "--endpoint", "http://127.0.0.1:1", "list-machines").mustFail(t, "cannot reach flotilla at http://127.0.0.1:1")
}

func TestBlockAttempts(t *testing.T) {
	srv := newFrozen(t)
	dir := writeUnits(t, map[string]string{"hello.service": onMachine(helloFile, m2)})
	r := run(t, srv, "start", "--block-attempts", "3", filepath.Join(dir, "hello.service"))
	r.mustFail(t, "gave up after 3 attempts (--block-attempts) waiting for units to become launched: hello.service")
	run(t, srv, "stop", "--block-attempts", "-1", "hello.service").mustFail(t, "invalid --block-attempts -1")
	run(t, srv, "restart", "--block-attempts", "-2", "hello.service").mustFail(t, "invalid --block-attempts -2")
}

// TestStartReplace: start --replace replaces changed units in place, one
// machine at a time, each machine's units running the new file before the
// next machine is touched; unchanged units are left alone.
func TestStartReplace(t *testing.T) {
	srv := newServer(t, restartMachines...)
	on := map[string]string{"web@1.service": m2, "web@2.service": m1, "web@3.service": m3, "web@4.service": m1, "same.service": m1}
	pids := runUnits(t, srv, webFile, on)
	const newFile = "[Service]\nExecStart=/bin/web %i --v2\n"
	files := map[string]string{}
	var paths []string
	for n, m := range on {
		files[n] = onMachine(newFile, m)
		if n == "same.service" {
			files[n] = onMachine(webFile, m)
		}
	}
	dir := writeUnits(t, files)
	for _, n := range []string{"web@1.service", "web@2.service", "web@3.service", "web@4.service", "same.service"} {
		paths = append(paths, filepath.Join(dir, n))
	}
	// Without --replace the cluster refuses the new files.
	run(t, srv, "start", paths[0]).mustFail(t, "already exists with different contents")

	var (
		mu         sync.Mutex
		violations []string
	)
	srv.OnBatch(func(b apiv1.Batch) {
		inBatch := map[string]bool{}
		for _, ch := range b.Units {
			inBatch[ch.Name] = true
		}
		for n := range on {
			u, _ := srv.Unit(t, n)
			if !inBatch[n] && (!running(u) || u.State.Hash != u.Hash) {
				mu.Lock()
				violations = append(violations, fmt.Sprintf("%s is %s/%v while replacing %s", n, u.CurrentState, u.State, batchSummary(b)))
				mu.Unlock()
			}
		}
	})
	r := run(t, srv, append([]string{"start", "--replace"}, paths...)...).mustSucceed(t)
	wantBatches := []string{
		"launched: same.service",
		"launched: web@2.service web@4.service", // m1
		"launched: web@1.service",               // m2
		"launched: web@3.service",               // m3
	}
	if got := batchSummaries(srv); strings.Join(got[1:], "\n") != strings.Join(wantBatches, "\n") {
		t.Errorf("batches after the refused one:\n%s\nwant:\n%s", strings.Join(got[1:], "\n"), strings.Join(wantBatches, "\n"))
	}
	var plain, replacing int // batches with a new file
	for _, req := range srv.Log() {
		if req.Method == "POST" && req.Path == "/v1/batch" && strings.Contains(string(req.Body), "v2") {
			if req.Query == "replace=true" {
				replacing++
			} else {
				plain++
			}
		}
	}
	if plain != 1 || replacing != 3 {
		t.Errorf("batches with new files: %d without ?replace=true (want the refused one), %d with it (want 3)", plain, replacing)
	}
	for _, want := range []string{
		"Unit same.service launched on 113f16a7.../172.17.8.101\n",
		"Unit web@2.service replaced, launched on 113f16a7.../172.17.8.101\n",
		"Unit web@1.service replaced, launched on 2c0ffee0.../172.17.8.102\n",
		"Unit web@3.service replaced, launched on 3ab0cafe.../172.17.8.103\n",
	} {
		if !strings.Contains(r.out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.out)
		}
	}
	for _, v := range violations {
		t.Error(v)
	}
	for n := range on {
		u, _ := srv.Unit(t, n)
		replaced := n != "same.service"
		if !running(u) || u.State.Hash != u.Hash || (u.State.PID != pids[n]) != replaced || strings.Contains(u.File, "--v2") != replaced {
			t.Errorf("%s after start --replace: %s, %+v, file %q (replaced: %v)", n, u.CurrentState, u.State, u.File, replaced)
		}
	}
}

// TestSubmitReplace: submit --replace keeps each unit's desired state.
func TestSubmitReplace(t *testing.T) {
	srv := newServer(t, restartMachines...)
	pids := runUnits(t, srv, webFile, map[string]string{"a.service": m1})
	srv.put(t, stateLoaded, map[string]string{"b.service": onMachine(webFile, m2)})
	srv.waitUnit(t, "b.service", func(u apiv1.Unit) bool { return u.CurrentState == stateLoaded })
	const newFile = "[Service]\nExecStart=/bin/web --v2\n"
	dir := writeUnits(t, map[string]string{"a.service": onMachine(newFile, m1), "b.service": onMachine(newFile, m2)})
	r := run(t, srv, "submit", "--replace", filepath.Join(dir, "a.service"), filepath.Join(dir, "b.service")).mustSucceed(t)
	if !strings.Contains(r.out, "Unit a.service replaced, launched on 113f16a7") || !strings.Contains(r.out, "Unit b.service replaced, loaded on 2c0ffee0") {
		t.Errorf("stdout:\n%s", r.out)
	}
	a, _ := srv.Unit(t, "a.service")
	if !running(a) || a.State.PID == pids["a.service"] || a.State.Hash != a.Hash || !strings.Contains(a.File, "--v2") {
		t.Errorf("a.service after submit --replace: %+v", a)
	}
	b, _ := srv.Unit(t, "b.service")
	if b.DesiredState != stateLoaded || b.State == nil || b.State.Hash != b.Hash {
		t.Errorf("b.service after submit --replace: %+v", b)
	}
}
