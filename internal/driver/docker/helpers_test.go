package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// envFence marks the test binary started as the fence watchdog.
const envFence = "FLOTILLA_TEST_AS_DOCKER_FENCE"

// labelTest marks every container a test run makes, to remove them after.
const labelTest = "io.flotilla.test"

func TestMain(m *testing.M) {
	if os.Getenv(envFence) == "1" {
		os.Exit(ServeFenceArgs(os.Args[1:], slog.New(slog.NewTextHandler(os.Stderr, nil))))
	}
	os.Exit(m.Run())
}

var (
	imageOnce sync.Once
	imageTag  string
	imageErr  error
)

// engine returns a client of the machine's engine; without one the test is
// skipped, except on CI where the engine must be there.
func engine(t testing.TB) *client.Client {
	t.Helper()
	cli, err := newClient("")
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
		cancel()
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no Docker engine: %v", err)
		}
		t.Skipf("no Docker engine: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// testImage returns the tag of the tests' image, FROM scratch with the
// static program testdata/app, building it unless an image of the same
// source is there.
func testImage(t testing.TB, cli *client.Client) string {
	t.Helper()
	imageOnce.Do(func() { imageTag, imageErr = buildImage(cli) })
	if imageErr != nil {
		t.Fatalf("build the test image: %v", imageErr)
	}
	return imageTag
}

func buildImage(cli *client.Client) (string, error) {
	src, err := os.ReadFile("testdata/app/main.go")
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(src)
	tag := "flotilla-test/docker-driver-app:" + hex.EncodeToString(sum[:6])
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := cli.ImageInspect(ctx, tag); err == nil {
		return tag, nil
	}
	dir, err := os.MkdirTemp("", "flotilla-docker-app")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, "app"), "./testdata/app")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	bin, err := os.ReadFile(filepath.Join(dir, "app"))
	if err != nil {
		return "", err
	}
	err = buildContext(ctx, cli, tag, []contextFile{
		{"Dockerfile", 0o644, []byte("FROM scratch\nCOPY app /app\nENTRYPOINT [\"/app\"]\nCMD [\"run\"]\n")},
		{"app", 0o755, bin},
	})
	if err != nil {
		return "", err
	}
	if _, err := cli.ImageInspect(ctx, tag); err != nil {
		return "", fmt.Errorf("built image %s is not there: %w", tag, err)
	}
	return tag, nil
}

// contextFile is a file of a build context.
type contextFile struct {
	name string
	mode int64
	data []byte
}

// buildContext builds image tag from a context of files.
func buildContext(ctx context.Context, cli *client.Client, tag string, files []contextFile) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data))})
		tw.Write(f.data)
	}
	tw.Close()
	res, err := cli.ImageBuild(ctx, &buf, client.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true})
	if err != nil {
		return err
	}
	defer res.Body.Close()
	dec := json.NewDecoder(res.Body)
	for {
		var m struct{ Error string }
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if m.Error != "" {
			return fmt.Errorf("image build: %s", m.Error)
		}
	}
}

// harness is one test's machine: its state directory, its label and the
// statuses notified.
type harness struct {
	t       testing.TB
	cli     *client.Client
	image   string
	dir     string
	machine string
	run     string

	mu       sync.Mutex
	statuses []unit.Status
}

func newHarness(t testing.TB) *harness {
	cli := engine(t)
	h := &harness{t: t, cli: cli, image: testImage(t, cli), dir: t.TempDir(), run: rand.Text()[:12]}
	h.machine = "m-" + h.run
	t.Cleanup(h.cleanup)
	return h
}

// cleanup removes every container the test made and ends its watchdog.
func (h *harness) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := h.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", labelTest+"="+h.run)})
	if err != nil {
		h.t.Errorf("list the test's containers: %v", err)
	}
	for _, c := range list.Items {
		if _, err := h.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
			h.t.Errorf("remove container %s: %v", c.ID, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(h.dir, fencePIDFile)); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
			if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid)); err == nil && bytes.Contains(cmdline, []byte(envFence+"=1")) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

func (h *harness) config() Config {
	return Config{Machine: h.machine, Dir: h.dir, Notify: h.notify, Labels: map[string]string{labelTest: h.run},
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		FenceCommand: []string{os.Args[0]}, FenceEnv: []string{envFence + "=1"}}
}

// driver makes a driver on the harness's machine, closed at the end.
func (h *harness) driver() *Driver {
	h.t.Helper()
	d, err := New(h.config())
	if err != nil {
		h.t.Fatalf("New: %v", err)
	}
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		d.Close(ctx)
	})
	return d
}

func (h *harness) notify(st unit.Status) {
	h.mu.Lock()
	h.statuses = append(h.statuses, st)
	h.mu.Unlock()
}

// seen reports whether some notified status of the unit matched.
func (h *harness) seen(name string, match func(unit.Status) bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, st := range h.statuses {
		if st.Name == name && match(st) {
			return true
		}
	}
	return false
}

// wait waits until the driver reports the unit in a state that matches.
func (h *harness) wait(d *Driver, name string, within time.Duration, what string, match func(unit.Status) bool) unit.Status {
	h.t.Helper()
	var got unit.Status
	waitfor.Until(h.t, within, name+" "+what, func() error {
		for _, st := range d.States() {
			if st.Name == name && match(st) {
				got = st
				return nil
			}
		}
		return fmt.Errorf("states %+v", d.States())
	})
	return got
}

func active(st unit.Status) bool { return st.Active == "active" && st.Sub == "running" && st.PID > 0 }
func dead(st unit.Status) bool   { return st.Active == "inactive" && st.Sub == "dead" }
func failed(st unit.Status) bool { return st.Active == "failed" }

// unitFile parses a unit of the test image; body is the rest of the file.
func (h *harness) unitFile(name, body string) *unit.File {
	h.t.Helper()
	f, err := unit.ParseStored(name, "[X-Container]\nImage="+h.image+"\n"+body)
	if err != nil {
		h.t.Fatalf("parse %s: %v", name, err)
	}
	return f
}

// journal returns the unit's log.
func journal(t *testing.T, d *Driver, name string) string {
	t.Helper()
	var b bytes.Buffer
	if err := d.Journal(context.Background(), name, -1, false, &b); err != nil {
		t.Fatalf("journal %s: %v", name, err)
	}
	return b.String()
}

// waitJournal waits until the unit's log holds want.
func waitJournal(t *testing.T, d *Driver, name, want string) string {
	t.Helper()
	var j string
	waitfor.Until(t, 15*time.Second, fmt.Sprintf("%q in the journal of %s", want, name), func() error {
		if j = journal(t, d, name); !strings.Contains(j, want) {
			return fmt.Errorf("journal:\n%s", j)
		}
		return nil
	})
	return j
}

// lastLine is the number of the last "line N" in the output of the unit's
// container, as the engine kept it (0 if none): what the count command
// wrote, whether or not a driver copied it.
func (h *harness) lastLine(name string) int {
	h.t.Helper()
	id, _, _ := h.inspect(name)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := h.cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true})
	if err != nil {
		h.t.Fatalf("logs of %s: %v", name, err)
	}
	defer rc.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, io.Discard, rc); err != nil {
		h.t.Fatalf("logs of %s: %v", name, err)
	}
	n := 0
	for _, m := range regexp.MustCompile(`(?m)^line (\d+)$`).FindAllStringSubmatch(out.String(), -1) {
		n, _ = strconv.Atoi(m[1])
	}
	return n
}

// inspect returns the unit's container, found by its labels.
func (h *harness) inspect(name string) (id string, pid int, running bool) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := h.cli.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", LabelMachine+"="+h.machine).Add("label", LabelUnit+"="+name)})
	if err != nil {
		h.t.Fatalf("list: %v", err)
	}
	if len(list.Items) != 1 {
		h.t.Fatalf("unit %s has %d containers, want 1", name, len(list.Items))
	}
	ins, err := h.cli.ContainerInspect(ctx, list.Items[0].ID, client.ContainerInspectOptions{})
	if err != nil {
		h.t.Fatalf("inspect: %v", err)
	}
	return ins.Container.ID, ins.Container.State.Pid, ins.Container.State.Running
}
