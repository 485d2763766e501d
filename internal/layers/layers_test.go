package layers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
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

	// No driver imports a sibling: what the drivers share (systemd's
	// restart policy, start limiter, environment and signals, the unit
	// logs and their journal, the state directory's lock) lives in
	// internal/driver/service, and the interface they implement in
	// internal/driver. There is no exception: the mux multiplexes drivers
	// through driver.Driver, which its caller hands it, so it imports none
	// of them either. service itself, under the drivers, imports none.
	const service = "internal/driver/service"
	drivers := map[string]bool{}
	for _, pkgs := range by {
		for _, p := range pkgs {
			if isDriver(p, service) {
				drivers[p] = true
			}
		}
	}
	for imported := range by {
		if isDriver(imported, service) {
			drivers[imported] = true
		}
	}
	for _, d := range []string{"internal/driver/exec", "internal/driver/docker", "internal/driver/systemd", "internal/driver/sim", "internal/driver/mux"} {
		if !drivers[d] {
			t.Errorf("the test does not see the driver %s", d)
		}
	}
	for imported, froms := range by {
		if !isDriver(imported, service) {
			continue
		}
		for _, from := range froms {
			if !strings.HasPrefix(from, "internal/driver/") || strings.HasPrefix(from, imported+"/") {
				continue
			}
			t.Errorf("%s imports its sibling %s: share code through %s or internal/driver instead", from, imported, service)
		}
	}
	// The sharing goes through service: the drivers that run units as
	// systemd services use it.
	for _, d := range []string{"internal/driver/exec", "internal/driver/docker", "internal/driver/systemd"} {
		if !contains(by[service], d) {
			t.Errorf("%s does not import %s; its importers are %s", d, service, strings.Join(by[service], ", "))
		}
	}
}

// isDriver reports whether p is a driver: a package directly under
// internal/driver other than service, which holds what the drivers share.
func isDriver(p, service string) bool {
	return strings.HasPrefix(p, "internal/driver/") && strings.Count(p, "/") == 2 && p != service
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// The engine's core stays readable: no function of its (not tests) is
// longer than maxEngineFunc lines, the bar for a function one
// reads whole.
const maxEngineFunc = 100

// engineFuncs calls f with each function of the engine's sources (not its
// tests).
func engineFuncs(t *testing.T, f func(fset *token.FileSet, file string, fn *ast.FuncDecl)) {
	t.Helper()
	files, err := filepath.Glob("../engine/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("engine sources: %v (%d files)", err, len(files))
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range src.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Body != nil {
				f(fset, filepath.Base(name), fn)
			}
		}
	}
}

func TestEngineFunctionsShort(t *testing.T) {
	engineFuncs(t, func(fset *token.FileSet, file string, fn *ast.FuncDecl) {
		from, to := fset.Position(fn.Pos()), fset.Position(fn.End())
		if n := to.Line - from.Line + 1; n > maxEngineFunc {
			t.Errorf("%s:%d: %s is %d lines long; split it (at most %d)", file, from.Line, fn.Name.Name, n, maxEngineFunc)
		}
	})
}

// The engine's core never writes to etcd itself: it queues txns that the
// driver commits (engine/driver.go). Only these functions call the
// committer: the driver's, the etcd registry's senders of assignments
// (the agents' messages delivered through etcd), and the migration of the
// data's schema before a term loads.
var etcdWriters = map[string]bool{
	"driver.go:commitStages":         true,
	"driver.go:commit":               true,
	"driver.go:write":                true,
	"degraded.go:confirmNoop":        true,
	"etcdagents.go:writeAssignments": true,
	"schema.go:takeSchema":           true,
}

func TestOnlyTheDriverWritesEtcd(t *testing.T) {
	found := 0
	engineFuncs(t, func(fset *token.FileSet, file string, fn *ast.FuncDecl) {
		where := file + ":" + fn.Name.Name
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			switch sel.Sel.Name {
			case "Commit", "Confirm", "commit", "confirmNoop", "commitStages":
			default:
				return true
			}
			found++
			if !etcdWriters[where] {
				t.Errorf("%s: %s calls %s: the core queues a txn (emit) for the driver instead", fset.Position(call.Pos()), where, sel.Sel.Name)
			}
			return true
		})
	})
	if found == 0 {
		t.Error("no call of the committer found: the test no longer sees the engine")
	}
}
