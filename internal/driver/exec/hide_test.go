package execdriver

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flotilla/flotilla/internal/unit"
)

// TestInaccessible: run as root, the driver hides Config.Inaccessible
// from every unit, root or not: a unit that reads the daemon's key file or
// lists its data directory gets nothing, while the same paths stay
// readable to the driver and the rest of the host. The unit's user,
// working directory and PID are what they would be without hiding.
func TestInaccessible(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("hiding paths needs root (a mount namespace)")
	}
	secrets := t.TempDir()
	key := filepath.Join(secrets, "n1-key.pem")
	os.WriteFile(key, []byte("-----BEGIN PRIVATE KEY-----SECRET"), 0o600)
	data := t.TempDir()
	os.WriteFile(filepath.Join(data, "token"), []byte("flt_SECRET"), 0o600)
	os.MkdirAll(filepath.Join(data, "sub"), 0o700)
	link := filepath.Join(t.TempDir(), "key-link")
	os.Symlink(key, link)
	d, rec := newTestDriver(t, func(c *Config) { c.Inaccessible = []string{data, link, "/nonexistent/flotilla-test"} })

	script := `echo uid=$(id -u) pwd=$(pwd); cat ` + key + ` ` + filepath.Join(data, "token") + `; ls -a ` + data + `; echo ls=$?; echo hello > ` + filepath.Join(data, "planted") + `; echo write=$?`
	users := []string{""}
	if _, err := user.Lookup("nobody"); err == nil {
		users = append(users, "nobody")
	}
	for _, u := range users {
		name := "thief-" + map[string]string{"": "root", "nobody": "nobody"}[u] + ".service"
		f := newUnit(name, nil, func(s *unit.Service) {
			s.ExecStart = []unit.Command{sh(script)}
			s.User = u
		})
		mustLoadStart(t, d, f)
		st := rec.wait(t, name, "ended", func(st unit.Status) bool { return st.Result != "" && st.Active != "active" })
		log := journal(t, d, name)
		if strings.Contains(log, "SECRET") {
			t.Errorf("%s read a hidden file:\n%s", name, log)
		}
		if strings.Contains(log, "write=0") || !strings.Contains(log, "Permission denied") && !strings.Contains(log, "Read-only") {
			t.Errorf("%s: reading and writing the hidden paths did not fail:\n%s", name, log)
		}
		if _, err := os.Stat(filepath.Join(data, "planted")); err == nil {
			t.Errorf("%s wrote into the hidden data directory", name)
		}
		want := map[string]string{"": "uid=0", "nobody": "uid=65534"}[u]
		if !strings.Contains(log, want+" pwd=/\n") || st.Active != "inactive" {
			t.Errorf("%s: want %s in / and a clean exit (%+v):\n%s", name, want, st, log)
		}
	}
	// Nor can a unit start in a hidden directory and read it from there.
	f := newUnit("cwd.service", []string{"/bin/cat", "token"}, func(s *unit.Service) { s.WorkingDirectory = data })
	mustLoadStart(t, d, f)
	st := rec.waitEnded(t, "cwd.service", "failed")
	if log := journal(t, d, "cwd.service"); strings.Contains(log, "SECRET") || st.Active != "failed" {
		t.Errorf("a unit in a hidden working directory: %+v\n%s", st, log)
	}
	// Nor can it have the driver read one for it: EnvironmentFile= of a
	// hidden file, named or through a link, fails the start.
	os.WriteFile(filepath.Join(data, "env"), []byte("SECRET=flt_SECRET\n"), 0o600)
	envLink := filepath.Join(t.TempDir(), "env-link")
	os.Symlink(filepath.Join(data, "env"), envLink)
	for i, p := range []string{filepath.Join(data, "env"), envLink} {
		name := fmt.Sprintf("env%d.service", i)
		f := newUnit(name, []string{"/bin/sh", "-c", "echo got=$SECRET"}, func(s *unit.Service) {
			s.EnvironmentFiles = []unit.EnvFile{{Path: p}}
		})
		mustLoadStart(t, d, f)
		st := rec.waitEnded(t, name, "failed")
		if log := journal(t, d, name); strings.Contains(log, "SECRET") && !strings.Contains(st.Message, "keeps from every unit") || strings.Contains(log, "got=flt") {
			t.Errorf("EnvironmentFile=%s: %+v\n%s", p, st, log)
		}
	}
	// Outside the units, nothing changed.
	if b, err := os.ReadFile(key); err != nil || !strings.Contains(string(b), "SECRET") {
		t.Errorf("the key file as the driver sees it: %q, %v", b, err)
	}
}
