package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/supervisor"
	"github.com/flotilla/flotilla/internal/version"
	"github.com/flotilla/flotilla/internal/waitfor"
)

const vpkg = "github.com/flotilla/flotilla/internal/version"

// buildFlotilla builds the binary with the linker flags -X of xs
// (name=value in internal/version): a release of another protocol or
// schema.
func buildFlotilla(t *testing.T, xs ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "flotilla")
	var ld []string
	for _, x := range xs {
		ld = append(ld, "-X", vpkg+"."+x)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-ldflags", strings.Join(ld, " "), "-o", bin, "github.com/flotilla/flotilla/cmd/flotilla").CombinedOutput()
	if err != nil {
		t.Fatalf("building flotilla with %v: %v\n%s", xs, err, out)
	}
	return bin
}

// shortVersion is the release and short commit bin reports to the leader.
func shortVersion(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "version", "-o", "json").Output()
	var in version.Info
	if err == nil {
		err = json.Unmarshal(out, &in)
	}
	if err != nil {
		t.Fatalf("%s version -o json: %v %s", bin, err, out)
	}
	return in.Short()
}

// getStatus is GET /v1/status of nd.
func getStatus(nd *node) (apiv1.Status, error) {
	var st apiv1.Status
	resp, err := http.Get("http://" + nd.api + "/v1/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return st, fmt.Errorf("GET /v1/status: %s", resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

type versionRow struct {
	Machine  string `json:"machine"`
	Version  string `json:"version"`
	Protocol int    `json:"protocol"`
}

// TestProtocolWindow runs a server of this build and a machine of a
// release whose agent protocol (9) is outside the server's window (1 to
// 3): the leader refuses the machine, which stays up and says why (its API
// answers 503 with both versions in the message) and keeps asking; the
// leader's list-machines shows only itself, with its VERSION. Restarted on
// this build, the machine finds the supervisor the other release left,
// whose protocol is outside its own window, and refuses to start, saying
// so; once that supervisor is gone it joins, and list-machines shows its
// version.
func TestProtocolWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a second binary and starts two daemons")
	}
	future := buildFlotilla(t, "version=0.9.0", "protocol=9")
	current := shortVersion(t, flotillaBin)
	futureVersion := shortVersion(t, future)
	if !strings.HasPrefix(futureVersion, "0.9.0") {
		t.Fatalf("the future binary says it is %q, want 0.9.0", futureVersion)
	}

	s1 := &node{name: "s1", dir: t.TempDir(), api: freeAddr(t), etcdClient: freeAddr(t), peer: freeAddr(t)}
	s1grpc := freeAddr(t)
	s1.args = []string{"daemon", "--name", "s1", "--data-dir", s1.dir, "--api-addr", s1.api, "--grpc-addr", s1grpc,
		"--etcd-embed", "--etcd-client-addr", s1.etcdClient, "--etcd-peer-addr", s1.peer,
		"--agent-ttl", agentTTL.String(), "--election-ttl", electionTTL.String(), "--log-level", "debug"}
	a1 := &node{name: "a1", dir: t.TempDir(), api: freeAddr(t)}
	a1.args = []string{"daemon", "--name", "a1", "--data-dir", a1.dir, "--api-addr", a1.api, "--servers", s1grpc,
		"--agent-ttl", agentTTL.String(), "--election-ttl", electionTTL.String(), "--log-level", "debug"}
	nodes := []*node{s1, a1}
	t.Cleanup(func() {
		for _, nd := range nodes {
			nd.shutdown(t)
		}
		if t.Failed() {
			for _, nd := range nodes {
				if nd.log != nil {
					t.Logf("---- log of %s ----\n%s", nd.name, tail(nd.log.String(), 60))
				}
			}
		}
	})
	s1.start(t)
	waitfor.Until(t, 60*time.Second, "s1 leads", func() error { _, err := cli(t, s1, "list-machines"); return err })
	a1.startBinary(t, future)

	refusal := []string{
		fmt.Sprintf("machine a1 (%s, protocol 9) is outside the protocol window of leader s1 (%s, protocol %d)", futureVersion, current, version.ProtocolVersion),
		"which accepts protocol " + version.ProtocolWindow().String(),
		"upgrade leader s1",
	}
	waitfor.Until(t, 60*time.Second, "a1 refused, its API saying why", func() error {
		out, err := cli(t, a1, "list-machines")
		if err == nil {
			return fmt.Errorf("a1 answers list-machines: %q", out)
		}
		for _, s := range refusal {
			if !strings.Contains(out, s) {
				return fmt.Errorf("a1's answer %q does not say %q", out, s)
			}
		}
		t.Logf("a1 answers: %s", out)
		return nil
	})
	if !strings.Contains(a1.log.String(), "this daemon cannot join the cluster") {
		t.Errorf("a1 did not log its refusal")
	}
	// It keeps asking, every few seconds.
	waitfor.Until(t, 30*time.Second, "a1 says Hello again", func() error {
		if n := strings.Count(s1.log.String(), "refused an agent's Hello"); n < 2 {
			return fmt.Errorf("s1 refused %d Hellos", n)
		}
		return nil
	})
	ms, err := jsonCLI[[]versionRow](t, s1, "list-machines")
	if err != nil || len(ms) != 1 || ms[0].Machine != "s1" || ms[0].Version != current || ms[0].Protocol != version.ProtocolVersion {
		t.Errorf("list-machines on s1 = %+v, %v; want s1 alone, at %s protocol %d", ms, err, current, version.ProtocolVersion)
	}

	// a1 back on this build, with a supervisor of the other release
	// serving its data dir (as it would be, running that release's units):
	// this daemon refuses it.
	a1.stop(t)
	a1.stopSupervisor(t)
	units := filepath.Join(a1.dir, "units")
	sup := exec.Command(future, "supervisor", "--dir", units)
	sup.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	supDone := make(chan struct{})
	go func() { sup.Wait(); close(supDone) }()
	t.Cleanup(func() { sup.Process.Kill(); <-supDone }) // if the test ends before it stops it
	waitfor.Until(t, 30*time.Second, "the other release's supervisor serves", func() error {
		_, err := os.Stat(filepath.Join(units, supervisor.SocketFile))
		return err
	})
	a1.startBinary(t, flotillaBin)
	select {
	case <-a1.done:
	case <-time.After(60 * time.Second):
		t.Fatal("a1 on this build still runs 60s after it found a supervisor of protocol 9")
	}
	for _, s := range []string{
		"on " + filepath.Join(units, supervisor.SocketFile) + " (0.9.0, protocol 9) is outside the protocol window of this daemon (" + current,
	} {
		if !strings.Contains(a1.log.String(), s) {
			t.Errorf("a1's log does not say %q:\n%s", s, tail(a1.log.String(), 10))
		}
	}
	a1.stopSupervisor(t)
	a1.startBinary(t, flotillaBin)
	waitfor.Until(t, 60*time.Second, "a1 joined on this build", func() error {
		ms, err := jsonCLI[[]versionRow](t, s1, "list-machines")
		if err != nil {
			return err
		}
		for _, m := range ms {
			if m.Machine == "a1" && m.Version == current && m.Protocol == version.ProtocolVersion {
				return nil
			}
		}
		return fmt.Errorf("list-machines = %+v", ms)
	})
	out := mustCLI(t, s1, "list-machines")
	if lines := strings.Split(out, "\n"); !strings.Contains(lines[0], "VERSION") || !strings.Contains(out, current) {
		t.Errorf("list-machines shows no VERSION column with %s:\n%s", current, out)
	}
}

// startBinary runs the node's daemon from bin.
func (n *node) startBinary(t *testing.T, bin string) {
	t.Helper()
	n.bin = bin
	n.start(t)
}

// TestSchemaWindow: the first leader of a new cluster records its schema
// in etcd; a daemon of this build facing a newer schema (as a newer
// release's leader would have written) does not lead, and says why in its
// log and GET /v1/status, naming both versions, while the unit its machine
// runs keeps running; it leads again once the schema is one it can.
func TestSchemaWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a daemon")
	}
	c := newCluster(t, 1, nil)
	n1 := c.nodes[0]
	waitfor.Until(t, 60*time.Second, "n1 leads", func() error { _, err := cli(t, n1, "list-machines"); return err })
	ecli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + n1.etcdClient}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer ecli.Close()
	key := registry.Keys{}.Schema()
	schemaKey := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := ecli.Get(ctx, key)
		if err != nil || len(resp.Kvs) == 0 {
			return fmt.Sprintf("(none: %v)", err)
		}
		return string(resp.Kvs[0].Value)
	}
	if got, want := schemaKey(), fmt.Sprint(version.SchemaVersion); got != want {
		t.Fatalf("%s = %s after the first leader took office, want %s", key, got, want)
	}

	mustCLI(t, n1, "start", writeUnit(t, t.TempDir(), "web.service", fmt.Sprintf(sleeper, "web", "web")))
	st, err := unitStates(t, n1)
	pid := st["web.service"].PID
	if err != nil || pid == 0 || !alive(pid) {
		t.Fatalf("web.service: %+v, %v; want it running", st["web.service"], err)
	}

	newer := version.SchemaVersion + 1
	put := func(v int) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := ecli.Put(ctx, key, fmt.Sprint(v)); err != nil {
			t.Fatal(err)
		}
	}
	put(newer)
	n1.stop(t)
	n1.start(t)
	want := fmt.Sprintf("etcd holds schema %d; this binary (%s, schema %d) cannot lead it: upgrade this machine", newer, shortVersion(t, flotillaBin), version.SchemaVersion)
	waitfor.Until(t, 60*time.Second, "n1 refuses to lead, saying why", func() error {
		st, err := getStatus(n1)
		if err != nil {
			return err
		}
		if st.LeadRefused != want || st.IsLeader {
			return fmt.Errorf("status %+v, want leadRefused %q", st, want)
		}
		return nil
	})
	if !strings.Contains(n1.log.String(), want) {
		t.Errorf("n1 did not log %q", want)
	}
	if out, err := cli(t, n1, "list-units"); err == nil {
		t.Errorf("list-units answered with no leader: %q", out)
	}
	if !alive(pid) {
		t.Errorf("web.service (pid %d) died while its machine's daemon refused to lead", pid)
	}
	if got := schemaKey(); got != fmt.Sprint(newer) {
		t.Errorf("%s = %s after n1 refused it, want %d unchanged", key, got, newer)
	}

	put(version.SchemaVersion) // a backup restored, say
	waitfor.Until(t, 60*time.Second, "n1 leads again", func() error {
		st, err := getStatus(n1)
		if err != nil || !st.IsLeader || st.LeadRefused != "" {
			return errors.Join(err, fmt.Errorf("status %+v", st))
		}
		return nil
	})
	waitfor.Until(t, 30*time.Second, "web.service reported", func() error {
		st, err := unitStates(t, n1)
		if err != nil || st["web.service"].PID == 0 {
			return errors.Join(err, fmt.Errorf("states %+v", st))
		}
		if st["web.service"].PID != pid {
			t.Fatalf("web.service pid %d -> %d: a refused leader restarted it", pid, st["web.service"].PID)
		}
		return nil
	})
}
