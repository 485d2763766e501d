package integration

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// flotillaExit runs the built binary with env added to its environment and
// returns its exit code and combined output.
func flotillaExit(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, flotillaBin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("flotilla %s: %v", strings.Join(args, " "), err)
	return 0, ""
}

// TestBinaryExitCodesAndConfig: the binary exits with the codes of
// docs/cli.md, reads FLOTILLA_<FLAG> variables and config files, and names
// the line of a bad key.
func TestBinaryExitCodesAndConfig(t *testing.T) {
	closed := "http://" + freeAddr(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "flotilla.yaml")
	if err := os.WriteFile(conf, []byte("data-dir: "+dir+"\netcd-embed: true\nagent-tl: 30s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("data-dir: "+dir+"\netcd-embed: true\nagent-ttl: 30s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct {
		env  []string
		args []string
		code int
		out  string
	}{
		{nil, []string{"list-units", "--endpoint", closed}, 4, "cannot reach flotilla at " + closed},
		{nil, []string{"daemon", "--data-dir", t.TempDir(), "--etcd-embed", "--api-addr", busy.Addr().String()}, 1, "address already in use"},
		{[]string{"FLOTILLA_ENDPOINT=" + closed}, []string{"status", "x.service"}, 4, "cannot reach flotilla at " + closed},
		{nil, []string{"no-such-verb"}, 1, "unknown command"},
		{nil, []string{"daemon", "--config", conf}, 1, conf + `:3: unknown key "agent-tl"`},
		{[]string{"FLOTILLA_AGENT_TTL=soon"}, []string{"daemon", "--config", good}, 1, `$FLOTILLA_AGENT_TTL: invalid value "soon"`},
		{[]string{"FLOTILLA_NAME=n7"}, []string{"daemon", "--config", good, "--print-config"}, 0, "agent-ttl: 30s # " + good + ":3"},
		{[]string{"FLOTILLA_NAME=n7"}, []string{"daemon", "--config", good, "--print-config"}, 0, "name: n7 # $FLOTILLA_NAME"},
	} {
		code, out := flotillaExit(t, tc.env, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.out) {
			t.Errorf("%s flotilla %s: exit %d, output %q; want exit %d, output containing %q",
				strings.Join(tc.env, " "), strings.Join(tc.args, " "), code, out, tc.code, tc.out)
		}
	}
	_, version := flotillaExit(t, nil, "version")
	if _, v := flotillaExit(t, nil, "-v"); v != version || !strings.HasPrefix(v, "Flotilla ") {
		t.Errorf("flotilla -v printed %q, flotilla version %q; want the same", v, version)
	}
	code, out := flotillaExit(t, nil, "version", "-o", "json")
	var v struct{ Version, GoVersion, Platform string }
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v.Version == "" || !strings.HasPrefix(v.GoVersion, "go") || v.Platform == "" {
		t.Errorf("flotilla version -o json: exit %d, %q (%v); want an object with version, goVersion and platform", code, out, err)
	}
}

// TestShippedConfig: contrib/systemd/flotilla.yaml, which the shipped
// systemd unit names, is a valid configuration of flotilla daemon.
func TestShippedConfig(t *testing.T) {
	conf, err := filepath.Abs("../../contrib/systemd/flotilla.yaml")
	if err != nil {
		t.Fatal(err)
	}
	code, out := flotillaExit(t, nil, "daemon", "--config", conf, "--print-config")
	for _, want := range []string{"data-dir: /var/lib/flotilla # " + conf, "etcd-embed: true # " + conf} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("flotilla daemon --config %s --print-config: exit %d, want %q in\n%s", conf, code, want, out)
		}
	}
}
