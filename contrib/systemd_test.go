package contrib

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const unitFile = "systemd/flotilla.service"

// TestSystemdUnitDirectives: the unit has what the daemon relies on.
func TestSystemdUnitDirectives(t *testing.T) {
	b, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		lines[strings.TrimSpace(l)] = true
	}
	for _, want := range []string{
		"Type=notify",      // the daemon sends READY=1 when it serves
		"KillMode=process", // units outlive the daemon
		"Delegate=yes",     // the daemon manages its units' cgroups
		"LimitNOFILE=1048576",
		"ExecStart=/usr/local/bin/flotilla daemon --config /etc/flotilla/flotilla.yaml",
	} {
		if !lines[want] {
			t.Errorf("%s lacks the line %q", unitFile, want)
		}
	}
}

// TestSystemdUnitVerifies runs systemd-analyze verify on the unit, with
// ExecStart= pointing at an executable that exists here; any warning fails.
func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	b, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), "/usr/local/bin/flotilla", self)
	p := filepath.Join(t.TempDir(), "flotilla.service")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// --man=no: the man page it names is installed with the release, not here.
	out, err := exec.CommandContext(ctx, analyze, "verify", "--man=no", p).CombinedOutput()
	if err != nil || strings.Contains(string(out), "flotilla.service") {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unitFile, err, out)
	}
}
