package scheduler

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps the scheduler and the unit package pure: no etcd,
// no gRPC, no network. They are functions of what the engine gives them.
func TestDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	pkgs := []string{
		"github.com/flotilla/flotilla/internal/scheduler",
		"github.com/flotilla/flotilla/internal/unit",
	}
	out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	forbidden := func(dep string) bool {
		switch {
		case dep == "net" || strings.HasPrefix(dep, "net/"):
			return true
		case strings.HasPrefix(dep, "go.etcd.io/"):
			return true
		case strings.HasPrefix(dep, "google.golang.org/grpc"):
			return true
		}
		return false
	}
	for _, dep := range strings.Fields(string(out)) {
		if forbidden(dep) {
			t.Errorf("%s depend on %s; they must stay free of etcd, gRPC and the network", strings.Join(pkgs, " and "), dep)
		}
	}
}
