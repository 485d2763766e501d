package docsrun

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fileTimeout bounds one file's blocks, environment included.
const fileTimeout = 4 * time.Minute

// preamble starts every file's script. docs_exits and docs_follow are the
// checks that the "# exits N" and "Ctrl-C" marks become (doc.go).
const preamble = `set -e -o pipefail
ip link set lo up
docs_exits() {
	local want=$1 rc=0; shift
	"$@" || rc=$?
	if [ "$rc" -ne "$want" ]; then echo "docs: '$*' exited $rc; the text says $want" >&2; return 1; fi
}
# A curl that fails on an HTTP error, as a reader would see it fail.
curl() { command curl --fail-with-body "$@"; }
docs_follow() {
	local rc=0
	timeout -s INT 3 "$@" || rc=$?
	case $rc in 0|124|130) ;; *) echo "docs: '$*' exited $rc before Ctrl-C" >&2; return 1 ;; esac
}
docs_wait() {
	for _ in $(seq 1 120); do "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
	echo "docs: '$*' never succeeded" >&2; "$@"
}
`

// devEnv is what "<!-- docs: env dev -->" starts: what `make run` runs.
const devEnv = `flotilla dev --data-dir flotilla-dev >dev.log 2>&1 &
DOCS_DEV=$!
docs_wait flotilla list-machines
`

// TestDocs runs every shell block of README.md and docs/*.md (doc.go).
func TestDocs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs daemons")
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root for its namespaces, and CI=true")
		}
		t.Skip("needs root for its namespaces")
	}
	for _, tool := range []string{"unshare", "ip", "curl", "jq", "timeout"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the docs' examples need %s: %v", tool, err)
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "flotilla")
	build := exec.Command("go", "build", "-o", bin, "./cmd/flotilla")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	files, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	for _, path := range files {
		name, _ := filepath.Rel(root, path)
		t.Run(filepath.Base(name), func(t *testing.T) {
			t.Parallel()
			runFile(t, path, name, bin)
		})
	}
}

func runFile(t *testing.T, path, name, bin string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var script strings.Builder
	script.WriteString(preamble)
	runs := 0
	for _, b := range f.Blocks {
		if b.Skip != "" {
			t.Logf("%s:%d: not run: %s", name, b.Line, b.Skip)
			continue
		}
		if runs == 0 && f.Env == "dev" {
			script.WriteString(devEnv)
		}
		runs++
		fmt.Fprintf(&script, "echo '@@docs %d'\n", b.Line)
		if b.Interrupt {
			script.WriteString("kill -INT \"$DOCS_DEV\"; wait \"$DOCS_DEV\" || true\n")
		}
		script.WriteString(b.Script)
	}
	if runs == 0 {
		t.Skipf("%s has no block to run", name)
	}
	script.WriteString("echo '@@docs end'\n")

	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(bin, filepath.Join(dir, "bin", "flotilla")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), fileTimeout)
	defer cancel()
	// Namespaces of its own: the docs' fixed ports are free, and whatever the
	// blocks start (daemons, supervisors, units) ends with the script, its
	// PID 1. --kill-child takes the script down if the test kills unshare.
	cmd := exec.CommandContext(ctx, "unshare", "--net", "--pid", "--fork", "--mount-proc", "--kill-child",
		"bash", "-c", script.String())
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(dir, "bin")+":"+os.Getenv("PATH"), "HOME="+dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	removeCgroups(t, dir)
	text := out.String()
	last := strings.LastIndex(text, "@@docs ")
	if err == nil && strings.HasSuffix(strings.TrimSpace(text), "@@docs end") {
		t.Logf("%s: every block ran; output:\n%s", name, text)
		return
	}
	where := "before its first block (the environment)"
	if last >= 0 {
		line, _, _ := strings.Cut(text[last+len("@@docs "):], "\n")
		where = "in the block at line " + line
		text = text[last:]
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("not done within %v", fileTimeout)
	}
	if log, rerr := os.ReadFile(filepath.Join(dir, "dev.log")); rerr == nil && f.Env == "dev" {
		t.Logf("flotilla dev's log:\n%s", tail(string(log), 40))
	}
	t.Fatalf("%s: %v %s; output:\n%s", name, err, where, text)
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// removeCgroups removes the cgroups the exec driver made for the units of
// the data directories under dir. Their processes ended with the script's
// PID namespace, but not as the driver ends them, so their empty cgroups are
// left: /sys/fs/cgroup/<hierarchy>/flotilla.slice/exec-<the first 6 bytes
// of the SHA-256 of the units directory, as internal/driver/exec names it>.
func removeCgroups(t *testing.T, dir string) {
	units, _ := filepath.Glob(filepath.Join(dir, "*", "units"))
	for _, u := range units {
		sum := sha256.Sum256([]byte(u))
		parents, _ := filepath.Glob("/sys/fs/cgroup/*/flotilla.slice/exec-" + hex.EncodeToString(sum[:6]))
		parents2, _ := filepath.Glob("/sys/fs/cgroup/flotilla.slice/exec-" + hex.EncodeToString(sum[:6]))
		for _, p := range append(parents, parents2...) {
			var dirs []string
			filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, path)
				}
				return nil
			})
			for i := len(dirs) - 1; i >= 0; i-- { // children first
				if err := os.Remove(dirs[i]); err != nil {
					t.Logf("cannot remove the cgroup %s: %v", dirs[i], err)
				}
			}
			os.Remove(filepath.Dir(p)) // flotilla.slice, once nothing else uses it
		}
	}
}
