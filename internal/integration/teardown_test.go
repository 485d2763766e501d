package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// startDev runs flotilla dev on a data dir of its own (with extra flags)
// and waits until it serves; the cleanup stops it and its supervisor.
func startDev(t *testing.T, extra ...string) *node {
	t.Helper()
	nd := &node{name: "dev", dir: t.TempDir(), api: freeAddr(t)}
	nd.args = append([]string{"dev", "--data-dir", nd.dir, "--api-addr", nd.api, "--log-level", "debug"}, extra...)
	nd.start(t)
	t.Cleanup(func() {
		nd.shutdown(t)
		if t.Failed() {
			t.Logf("---- log of dev ----\n%s", tail(nd.log.String(), 80))
		}
	})
	eventually(t, 30*time.Second, "dev serves", func() error { _, err := leaderOf(t, nd); return err })
	return nd
}

// TestDevInUse: a second flotilla dev on the data dir of a running one
// is refused at once, naming the first's pid, instead of failing on etcd's
// port; a listener in use exits 1 naming its flag and address.
func TestDevInUse(t *testing.T) {
	nd := startDev(t)
	code, out := flotillaExit(t, nil, "dev", "--data-dir", nd.dir, "--api-addr", freeAddr(t))
	want := fmt.Sprintf("data dir %s is in use by another flotilla daemon or dev (pid %d)", nd.dir, nd.cmd.Process.Pid)
	if code != 1 || !strings.Contains(out, want) {
		t.Errorf("a second dev on %s: exit %d:\n%s\nwant exit 1 and %q", nd.dir, code, out, want)
	}
	code, out = flotillaExit(t, nil, "dev", "--data-dir", t.TempDir(), "--api-addr", nd.api)
	want = fmt.Sprintf("--api-addr %s: the address is in use", nd.api)
	if code != 1 || !strings.Contains(out, want) {
		t.Errorf("dev on the API address of another: exit %d:\n%s\nwant exit 1 and %q", code, out, want)
	}
	if !nd.running() {
		t.Fatal("the first dev ended")
	}
}
