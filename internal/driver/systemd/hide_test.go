package systemddriver

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flotilla/flotilla/internal/unit"
)

// TestContentInaccessible: the services and sockets the driver writes
// hide the daemon's secrets with InaccessiblePaths=, in a form systemd
// reads without complaint (checked by systemd-analyze verify where it is
// installed); timers get nothing.
func TestContentInaccessible(t *testing.T) {
	hidden := []string{"/var/lib/flotilla", "/etc/flotilla/n1 key.pem"}
	for _, tc := range []struct{ name, raw, want string }{
		{"a.service", "[Service]\nExecStart=/bin/true\nUser=nobody\n", "[Service]\nInaccessiblePaths=\"-/var/lib/flotilla\" \"-/etc/flotilla/n1 key.pem\"\n"},
		{"a.socket", "[Socket]\nListenStream=127.0.0.1:9999", "[Socket]\nInaccessiblePaths=\"-/var/lib/flotilla\" \"-/etc/flotilla/n1 key.pem\"\n"},
		{"a.timer", "[Timer]\nOnCalendar=daily\n", ""},
	} {
		f, err := unit.Parse(tc.name, []byte(tc.raw))
		if err != nil {
			t.Fatal(err)
		}
		got := string(content(f, hidden))
		if tc.want == "" && strings.Contains(got, "InaccessiblePaths") || !strings.HasSuffix(got, tc.want) {
			t.Errorf("content(%s) = %q, want it to end in %q", tc.name, got, tc.want)
		}
		if _, err := exec.LookPath("systemd-analyze"); err != nil || tc.name != "a.service" {
			continue
		}
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, tc.name), []byte(got), 0o644)
		out, _ := exec.Command("systemd-analyze", "verify", filepath.Join(dir, tc.name)).CombinedOutput()
		if strings.Contains(string(out), "Failed") || strings.Contains(string(out), "ignoring") {
			t.Errorf("systemd-analyze verify %s:\n%s\n%s", tc.name, got, out)
		}
	}
}

// TestLoadHiddenEnvironmentFile: systemd reads EnvironmentFile= as root,
// outside the unit's namespace, so the driver refuses one inside a hidden
// path, named or through a link, before writing anything.
func TestLoadHiddenEnvironmentFile(t *testing.T) {
	data := t.TempDir()
	os.WriteFile(filepath.Join(data, "env"), []byte("A=1\n"), 0o600)
	link := filepath.Join(t.TempDir(), "env")
	os.Symlink(filepath.Join(data, "env"), link)
	d := &Driver{cfg: Config{UnitDir: t.TempDir(), Inaccessible: []string{data}}}
	for _, p := range []string{filepath.Join(data, "env"), link} {
		f, err := unit.Parse("a.service", []byte("[Service]\nExecStart=/bin/true\nEnvironmentFile="+p+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Load(f); err == nil || !strings.Contains(err.Error(), "keeps from every unit") {
			t.Errorf("Load with EnvironmentFile=%s: %v, want it refused", p, err)
		}
	}
	if ents, _ := os.ReadDir(d.cfg.UnitDir); len(ents) != 0 {
		t.Errorf("a refused unit was written: %v", ents)
	}
}
