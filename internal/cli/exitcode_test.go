package cli_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/flotilla/flotilla/internal/cli"
	"github.com/flotilla/flotilla/internal/daemon"
	"github.com/flotilla/flotilla/internal/daemon/daemontest"
	"github.com/flotilla/flotilla/internal/supervisor/supervisortest"
)

// TestMain lets this test binary be the supervisor of the daemons the
// tests run in process.
func TestMain(m *testing.M) { supervisortest.Main(m) }

// flotilla runs the CLI as cmd/flotilla does and returns its exit code,
// standard output and standard error.
func flotilla(t *testing.T, endpoint string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	root := &cobra.Command{Use: "flotilla", SilenceErrors: true, SilenceUsage: true}
	cli.AddCommands(root)
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append([]string{"--endpoint", endpoint}, args...))
	if args[0] == cobra.ShellCompRequestCmd {
		root.SetArgs(append(args[:1:1], append([]string{"--endpoint", endpoint}, args[1:]...)...))
	}
	err := root.Execute()
	if err != nil {
		errOut.WriteString("Error: " + err.Error() + "\n")
	}
	return cli.ExitCode(err), out.String(), errOut.String()
}

// TestExitCodes: each exit code of docs/cli.md, against a real daemon.
func TestExitCodes(t *testing.T) {
	api := daemontest.Start(t, daemontest.Machine{ID: "m1", Exec: true}).URL
	dir := t.TempDir()
	for name, text := range map[string]string{
		"ok.service":      "[Service]\nExecStart=/bin/sleep 1000\n",
		"fails.service":   "[Service]\nExecStartPre=/bin/false\nExecStart=/bin/sleep 1000\n", // fails while activating: never seen active
		"nowhere.service": "[Service]\nExecStart=/bin/sleep 1000\n\n[X-Fleet]\nMachineMetadata=role=nowhere\n",
		"idle.service":    "[Service]\nExecStart=/bin/sleep 1000\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	file := func(name string) string { return filepath.Join(dir, name) }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	noLeader := daemontest.StartNoLeader(t)

	for _, tc := range []struct {
		endpoint string
		args     []string
		code     int
		stderr   string
	}{
		{api, []string{"start", "--block-timeout", "30s", file("ok.service")}, cli.ExitOK, ""},
		{api, []string{"status", "ok.service"}, cli.ExitOK, ""},
		{api, []string{"start", "--block-timeout", "30s", file("nowhere.service")}, cli.ExitNotStarted, "cannot be placed"},
		{api, []string{"start", "--block-timeout", "30s", file("fails.service")}, cli.ExitNotStarted, "Unit fails.service failed"},
		{api, []string{"load", "--block-timeout", "30s", file("idle.service")}, cli.ExitOK, ""},
		{api, []string{"status", "idle.service"}, cli.ExitInactive, "unit is not active: idle.service (inactive)"},
		{api, []string{"status", "-o", "json", "ok.service", "fails.service"}, cli.ExitInactive, "fails.service (failed)"},
		{api, []string{"status", "missing.service"}, cli.ExitError, "missing.service"},
		{api, []string{"list-units", "--fields", "bogus"}, cli.ExitError, "invalid field"},
		{api, []string{"list-units", "--no-such-flag"}, cli.ExitError, "unknown flag"},
		{closed, []string{"list-units"}, cli.ExitUnavailable, "cannot reach flotilla"},
		{closed, []string{"status", "ok.service"}, cli.ExitUnavailable, "cannot reach flotilla"},
		{noLeader, []string{"list-units"}, cli.ExitUnavailable, "no engine leader"},
		{noLeader, []string{"start", file("ok.service")}, cli.ExitUnavailable, "no engine leader"},
	} {
		code, _, stderr := flotilla(t, tc.endpoint, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("flotilla %s: exit %d, stderr %q; want exit %d, stderr containing %q", strings.Join(tc.args, " "), code, stderr, tc.code, tc.stderr)
		}
	}
}

// TestExitCodeListenerInUse: a daemon whose --api-addr is in use exits 1,
// as docs/cli.md says, not 4 (which says the cluster is unreachable).
func TestExitCodeListenerInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = daemon.Run(context.Background(), daemon.Config{Name: "m1", DataDir: t.TempDir(), APIAddr: ln.Addr().String(),
		EtcdEmbed: true, EtcdClientAddr: "127.0.0.1:0", EtcdPeerAddr: "127.0.0.1:0", NoEngine: true, NoAgent: true,
		Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("daemon on a port in use: %v, want address already in use", err)
	}
	if code := cli.ExitCode(err); code != cli.ExitError {
		t.Errorf("ExitCode(%v) = %d, want %d", err, code, cli.ExitError)
	}
}

// TestVersionFlag: -v, --version and the version command print the same.
func TestVersionFlag(t *testing.T) {
	var outs []string
	for _, args := range [][]string{{"version"}, {"-v"}, {"--version"}} {
		root := &cobra.Command{Use: "flotilla", SilenceErrors: true, SilenceUsage: true}
		cli.AddCommands(root)
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("flotilla %s: %v", args[0], err)
		}
		outs = append(outs, out.String())
	}
	if !strings.HasPrefix(outs[0], "Flotilla ") || outs[1] != outs[0] || outs[2] != outs[0] {
		t.Errorf("version, -v and --version print %q; want the same, starting with Flotilla", outs)
	}
}
