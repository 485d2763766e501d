// Package systemdtest runs tests against a real systemd: a Docker container
// of a minimal Debian whose PID 1 is systemd, with D-Bus.
//
// The image is built once per machine and reused by its tag (Image): a
// debootstrap of Debian bookworm (minbase, with systemd, systemd-sysv and
// dbus) from Debian's archive, imported with docker import. It needs root,
// the docker CLI with a running engine, and debootstrap; without them the
// test is skipped, except when CI=true, where it fails.
//
// A container (Start) runs /lib/systemd/systemd as PID 1 with /run and
// /run/lock on tmpfs and the host's cgroup tree mounted read-write, which is
// what systemd needs in Docker on a cgroup v1 host; it is removed when the
// test ends.
package systemdtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Image is the tag of the image EnsureImage builds.
const Image = "flotilla-test/systemd:bookworm"

// mirror is Debian's archive; FLOTILLA_DEBIAN_MIRROR overrides it.
const mirror = "http://deb.debian.org/debian"

// Need skips the test when it cannot run here (not root, no docker, no
// debootstrap), or fails it when CI=true.
func Need(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("systemd test skipped in -short mode (it runs systemd in a Docker container)")
	}
	why := ""
	switch {
	case os.Geteuid() != 0:
		why = "needs root (it runs systemd in a Docker container)"
	case !docker():
		why = "needs the docker CLI and a running Docker engine"
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("systemd test: %s; CI=true, so it must run", why)
	}
	t.Skipf("systemd test skipped: %s", why)
}

func docker() bool {
	if _, err := exec.LookPath("docker"); err != nil {
		return false
	}
	_, err := runDocker(false, "version", "--format", "{{.Server.Version}}")
	return err == nil
}

// EnsureImage builds Image unless it exists, and returns its tag. Builds
// are serialized across test processes by a lock file.
func EnsureImage(t testing.TB) string {
	t.Helper()
	Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	built, err := BuildImage(ctx)
	switch {
	case errors.Is(err, ErrNoDebootstrap) && os.Getenv("CI") != "true":
		t.Skipf("systemd test skipped: %v", err)
	case err != nil:
		t.Fatalf("systemd test: %v", err)
	case built:
		t.Logf("built %s in %v", Image, time.Since(start).Round(time.Second))
	}
	return Image
}

// ErrNoDebootstrap is BuildImage's error when the image is missing and
// debootstrap, which builds it, is not installed.
var ErrNoDebootstrap = errors.New("needs debootstrap to build its image (apt-get install debootstrap)")

// BuildImage builds Image unless it exists, and says whether it built it.
// Builds are serialized across processes (tests, make cluster) by a lock
// file, so that two never debootstrap at once. It is what EnsureImage runs,
// for programs that are not tests.
func BuildImage(ctx context.Context) (built bool, err error) {
	if exists() {
		return false, nil
	}
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "flotilla-systemdtest.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return false, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return false, err
	}
	if exists() {
		return false, nil
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return false, ErrNoDebootstrap
	}
	if err := build(ctx); err != nil {
		return false, fmt.Errorf("build the image %s: %w", Image, err)
	}
	return true, nil
}

func exists() bool {
	_, err := runDocker(false, "image", "inspect", Image)
	return err == nil
}

// dockerTimeout bounds one docker command; an engine that does not answer
// in time fails the test rather than hanging it.
const dockerTimeout = 3 * time.Minute

// runDocker runs a docker command bounded by dockerTimeout and returns its
// standard output (and error, with combined); the error carries standard
// error.
func runDocker(combined bool, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", args...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if combined {
		cmd.Stderr = &out
	}
	err := cmd.Run()
	switch {
	case ctx.Err() != nil:
		err = fmt.Errorf("docker %s: no answer within %v", args[0], dockerTimeout)
	case err != nil:
		err = fmt.Errorf("docker %s: %w %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return out.String(), err
}

// build debootstraps the root file system into a temporary directory and
// imports it; the directory is removed.
func build(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "flotilla-systemd-rootfs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	m := mirror
	if v := os.Getenv("FLOTILLA_DEBIAN_MIRROR"); v != "" {
		m = v
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	root := filepath.Join(dir, "root")
	out, err := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", "--include=systemd,systemd-sysv,dbus",
		"bookworm", root, m).CombinedOutput()
	if err != nil {
		return fmt.Errorf("debootstrap: %w\n%s", err, tail(out))
	}
	// Clean out what makes the image bigger and is of no use in a test.
	for _, p := range []string{"var/cache/apt/archives", "var/lib/apt/lists"} {
		os.RemoveAll(filepath.Join(root, p))
		os.MkdirAll(filepath.Join(root, p), 0o755)
	}
	imp := exec.CommandContext(ctx, "sh", "-c", `tar -C "$1" -c . | docker import -c 'CMD ["/lib/systemd/systemd"]' - "$2"`, "sh", root, Image)
	if out, err := imp.CombinedOutput(); err != nil {
		return fmt.Errorf("docker import: %w\n%s", err, tail(out))
	}
	return nil
}

func tail(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Container is a running container whose PID 1 is systemd.
type Container struct {
	ID string
	t  testing.TB
}

// RunFlags are the flags of docker run (or docker create) that systemd as
// PID 1 needs: a console (-t, so that what it says lands in docker logs),
// CAP_SYS_ADMIN, /run and /run/lock on tmpfs, and the host's cgroup tree
// mounted read-write.
var RunFlags = []string{"-t", "--cap-add", "SYS_ADMIN", "--security-opt", "seccomp=unconfined",
	"--tmpfs", "/run", "--tmpfs", "/run/lock", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw"}

// Start runs a container of the image, waits until systemd reports the
// system running (or degraded), and removes the container when the test
// ends.
func Start(t testing.TB) *Container {
	t.Helper()
	img := EnsureImage(t)
	args := append([]string{"run", "-d"}, RunFlags...)
	out, err := runDocker(false, append(args, "--label", "flotilla-test=systemd", img, "/lib/systemd/systemd")...)
	if err != nil {
		t.Fatalf("run %s: %v", img, err)
	}
	c := &Container{ID: strings.TrimSpace(out), t: t}
	t.Cleanup(func() {
		if _, err := runDocker(false, "rm", "-f", "-v", c.ID); err != nil {
			t.Errorf("remove container %s: %v", c.ID, err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := WaitRunning(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	return c
}

// WaitRunning waits until systemd in the container id reports the system
// running (or degraded), or ctx ends; the error then has what systemd said.
func WaitRunning(ctx context.Context, id string) error {
	for {
		out, err := runDocker(false, "exec", id, "systemctl", "is-system-running")
		state := strings.TrimSpace(out)
		if state == "running" || state == "degraded" {
			return nil
		}
		if st, _ := runDocker(false, "inspect", "-f", "{{.State.Status}}", id); strings.TrimSpace(st) == "exited" {
			logs, _ := runDocker(true, "logs", "--tail", "20", id)
			hint := ""
			if strings.Contains(logs, "Too many open files") {
				hint = "\n(systemd found no free inotify instance: fs.inotify.max_user_instances is shared by every process of root on the host, dockerd included, and is often 128; sysctl -w fs.inotify.max_user_instances=1024 raises it)"
			}
			return fmt.Errorf("systemd in container %.12s exited at once:\n%s%s", id, logs, hint)
		}
		select {
		case <-ctx.Done():
			logs, _ := runDocker(true, "logs", "--tail", "50", id)
			jobs, _ := runDocker(false, "exec", id, "systemctl", "list-jobs", "--no-pager")
			return fmt.Errorf("systemd in container %.12s is %q (%v), want running; jobs:\n%s\nlogs:\n%s", id, state, err, jobs, logs)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Exec runs a command in the container and returns its standard output;
// the error carries its standard error.
func (c *Container) Exec(args ...string) (string, error) {
	return c.ExecEnv(nil, args...)
}

// ExecEnv is Exec with environment variables ("K=V").
func (c *Container) ExecEnv(env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a := []string{"exec"}
	for _, e := range env {
		a = append(a, "-e", e)
	}
	a = append(a, c.ID)
	cmd := exec.CommandContext(ctx, "docker", append(a, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Must is Exec that fails the test on error.
func (c *Container) Must(args ...string) string {
	c.t.Helper()
	out, err := c.Exec(args...)
	if err != nil {
		c.t.Fatalf("in container: %v\n%s", err, out)
	}
	return out
}

// Command returns a command that runs args in the container, for a caller
// that streams its output or runs it in the background.
func (c *Container) Command(ctx context.Context, env []string, args ...string) *exec.Cmd {
	a := []string{"exec", "-i"}
	for _, e := range env {
		a = append(a, "-e", e)
	}
	a = append(a, c.ID)
	return exec.CommandContext(ctx, "docker", append(a, args...)...)
}

// CopyIn copies a file of the host into the container at dst.
func (c *Container) CopyIn(src, dst string) {
	c.t.Helper()
	if _, err := runDocker(false, "cp", src, c.ID+":"+dst); err != nil {
		c.t.Fatalf("copy %s to %s in the container: %v", src, dst, err)
	}
}

// WriteFile writes data to path in the container.
func (c *Container) WriteFile(path, data string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", "exec", "-i", c.ID, "sh", "-c", `cat > "$1"`, "sh", path)
	cmd.Stdin = strings.NewReader(data)
	if out, err := cmd.CombinedOutput(); err != nil {
		c.t.Fatalf("write %s in container: %v %s", path, err, out)
	}
}

// BuildStatic builds the Go package pkg (an import path, or "." for the
// test's own package as a test binary when test is set) as a static binary
// (CGO_ENABLED=0) into dir and returns its path.
func BuildStatic(t testing.TB, dir, pkg, name string, test bool) string {
	t.Helper()
	out := filepath.Join(dir, name)
	args := []string{"build", "-o", out, pkg}
	if test {
		args = []string{"test", "-c", "-o", out, pkg}
	}
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return out
}
