package contrib

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestImage builds the container image from the Dockerfile, as make image
// does, and runs the binary in it: it must be static to run FROM scratch.
// It needs a working docker and is skipped with -short.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary and an image")
	}
	docker, err := exec.LookPath("docker")
	if err != nil {
		t.Skip("docker is not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, docker, "info").CombinedOutput(); err != nil {
		t.Skipf("docker does not work here: %v\n%s", err, out)
	}
	dir := t.TempDir()
	for _, f := range []string{"Dockerfile", ".dockerignore", "LICENSE"} {
		b, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "dist", "flotilla-linux-"+runtime.GOARCH)
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "github.com/flotilla/flotilla/cmd/flotilla")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	tag := fmt.Sprintf("flotilla-test:%d", time.Now().UnixNano())
	if out, err := exec.CommandContext(ctx, docker, "build", "--build-arg", "TARGETARCH="+runtime.GOARCH, "-t", tag, dir).CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	defer exec.Command(docker, "rmi", "-f", tag).Run()

	out, err := exec.CommandContext(ctx, docker, "run", "--rm", "--network", "none", tag, "version", "-o", "json").Output()
	var v struct{ Version, Platform string }
	if err != nil || json.Unmarshal(out, &v) != nil || v.Platform != "linux/"+runtime.GOARCH {
		t.Errorf("docker run %s version -o json: %v, %q; want the version of linux/%s", tag, err, out, runtime.GOARCH)
	}
	// The image's defaults, shown as the daemon would use them.
	out, err = exec.CommandContext(ctx, docker, "run", "--rm", "--network", "none", tag, "daemon", "--etcd-embed", "--print-config").CombinedOutput()
	for _, want := range []string{"data-dir: /var/lib/flotilla # $FLOTILLA_DATA_DIR", "api-addr: 0.0.0.0:7480 # $FLOTILLA_API_ADDR", "etcd-embed: true # flag --etcd-embed"} {
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("docker run %s daemon --print-config: %v, want %q in\n%s", tag, err, want, out)
		}
	}
}
