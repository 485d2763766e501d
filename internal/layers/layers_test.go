package layers

import (
	"os/exec"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/flotilla/flotilla/"

// importers of each package of the module: imported -> importing packages,
// both without the module prefix. Only the product's imports count: a
// test may start a real daemon or engine to test against.
func importers(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f",
		`{{.ImportPath}} {{join .Imports " "}}`,
		module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	by := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		from := strings.TrimPrefix(f[0], module)
		seen := map[string]bool{}
		for _, imp := range f[1:] {
			to, ok := strings.CutPrefix(imp, module)
			if !ok || to == from || seen[to] {
				continue
			}
			seen[to] = true
			by[to] = append(by[to], from)
		}
	}
	for k := range by {
		sort.Strings(by[k])
	}
	return by
}

func TestLayers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	by := importers(t)
	allowed := func(imported string, ok ...string) {
		t.Helper()
		if len(by[imported]) == 0 {
			t.Errorf("nothing imports %s: the test no longer sees the module", imported)
		}
		for _, from := range by[imported] {
			if !contains(ok, from) {
				t.Errorf("%s imports %s; only %s may", from, imported, strings.Join(ok, ", "))
			}
		}
	}
	// The daemon is wiring: only the binary (and the daemon's own test
	// helpers) may start one.
	allowed("internal/daemon", "cmd/flotilla", "internal/daemon/daemontest")
	// The engine is served, not used: the layers under it take what it
	// decides through the registry and the agent protocol.
	allowed("internal/engine", "internal/api", "internal/fleetapi", "internal/daemon")

	// No driver imports a sibling, but for these. The docker and systemd
	// drivers run their helper processes with the exec driver's tools
	// (restart policy, start limiter, journal, environment), and the mux
	// chooses among drivers.
	known := map[string]string{
		"internal/driver/docker -> internal/driver/exec":  "shares the exec driver's process tools",
		"internal/driver/systemd -> internal/driver/exec": "shares the exec driver's process tools",
	}
	for imported, froms := range by {
		if !strings.HasPrefix(imported, "internal/driver/") || strings.Count(imported, "/") != 2 {
			continue
		}
		for _, from := range froms {
			if !strings.HasPrefix(from, "internal/driver/") || from == "internal/driver/mux" || strings.HasPrefix(from, imported+"/") {
				continue
			}
			if _, ok := known[from+" -> "+imported]; !ok {
				t.Errorf("%s imports its sibling %s: share code through internal/driver instead", from, imported)
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
