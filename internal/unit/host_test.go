package unit

import (
	"os"
	"path/filepath"
	"testing"
)

// TestParseHostUnits parses every unit file of a type Flotilla schedules
// that the host's systemd ships (Debian's /lib/systemd/system: services of
// every Type=, sockets, timers, paths, mounts, targets): each must be
// accepted, as systemd accepts it, and the ones only systemd can run must
// say so. FLOTILLA_UNIT_DIRS (colon-separated) adds directories, such as a
// debootstrapped root's.
func TestParseHostUnits(t *testing.T) {
	dirs := []string{"/lib/systemd/system", "/usr/lib/systemd/system"}
	if extra := os.Getenv("FLOTILLA_UNIT_DIRS"); extra != "" {
		dirs = append(dirs, filepath.SplitList(extra)...)
	}
	seen := map[string]bool{}
	n := 0
	for _, dir := range dirs {
		real, err := filepath.EvalSymlinks(dir)
		if err != nil || seen[real] {
			continue
		}
		seen[real] = true
		ents, err := os.ReadDir(real)
		if err != nil {
			continue
		}
		for _, e := range ents {
			path := filepath.Join(real, e.Name())
			fi, err := os.Stat(path)
			if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 || TypeOf(e.Name()) == "" {
				continue // directories, links to /dev/null (masked), other types
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := Parse(e.Name(), data)
			if err != nil {
				t.Errorf("%s: %v", path, err)
				continue
			}
			n++
			if TypeOf(f.Name) != "service" && f.Drivers() != DriverSystemd {
				t.Errorf("%s: Drivers() = %v, want systemd", path, f.Drivers())
			}
		}
	}
	if n == 0 {
		t.Skip("no systemd unit files on this host")
	}
	t.Logf("%d unit files accepted", n)
}
