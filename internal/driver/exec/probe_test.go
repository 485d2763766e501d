package execdriver

import (
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/flotilla/flotilla/internal/unit"
)

// TestProbeCommand: an [X-Check] Exec= probe runs with the unit's
// Environment= and EnvironmentFile= (its variables expanded), in its
// WorkingDirectory=, and as its User= when the driver runs as root.
func TestProbeCommand(t *testing.T) {
	dir := t.TempDir()
	envFile := filepath.Join(dir, "env")
	if err := os.WriteFile(envFile, []byte("FROM_FILE=file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	text := "[Service]\nExecStart=/bin/sleep 1\nEnvironment=GREETING=hello\nEnvironmentFile=" + envFile +
		"\nWorkingDirectory=" + dir + "\n[X-Check]\nExec=/bin/sh -c 'echo $GREETING $FROM_FILE ${GREETING} $(pwd) $(id -u)'\n"
	uid := strconv.Itoa(os.Geteuid())
	if os.Geteuid() == 0 {
		nobody, err := user.Lookup("nobody")
		if err != nil {
			t.Skipf("no user nobody to run the probe as: %v", err)
		}
		uid = nobody.Uid
		text = strings.Replace(text, "[X-Check]", "User=nobody\n[X-Check]", 1)
		// nobody must reach its working directory.
		for _, d := range []string{dir, filepath.Dir(dir)} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	f, err := unit.Parse("checked.service", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := ProbeCommand(f, f.Check.Exec[0])
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	// The driver expands ${GREETING} itself; the shell expands the rest
	// from the environment the unit's processes get.
	want := "hello file hello " + dir + " "
	if got := strings.TrimSpace(string(out)); !strings.HasPrefix(got, want) || !strings.HasSuffix(got, " "+uid) {
		t.Errorf("probe printed %q, want %q then uid %s", got, want, uid)
	}

	missing := unit.Command{Argv: []string{"no-such-program-here"}}
	if _, err := ProbeCommand(f, missing); err == nil || !strings.Contains(err.Error(), "no-such-program-here") {
		t.Errorf("a missing program: %v, want an error naming it", err)
	}
}
