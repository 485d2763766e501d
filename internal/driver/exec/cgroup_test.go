package execdriver

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/unit"
)

// testCgroupParent returns a fresh directory for unit cgroups in a writable
// cgroup v2 hierarchy (the host's, or the unified one of a hybrid host), or
// skips the test. It is removed when the test ends.
func testCgroupParent(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if !isCgroup2(root) {
			continue
		}
		top := filepath.Join(root, "flotilla-test-"+strconv.Itoa(os.Getpid())+"-"+strings.ReplaceAll(t.Name(), "/", "-"))
		if err := os.Mkdir(top, 0o755); err != nil {
			t.Skipf("cgroup v2 at %s is not writable: %v", root, err)
		}
		parent := filepath.Join(top, "exec")
		t.Cleanup(func() {
			entries, _ := os.ReadDir(parent)
			for _, e := range entries {
				os.Remove(filepath.Join(parent, e.Name()))
			}
			os.Remove(parent)
			os.Remove(top)
		})
		return parent
	}
	t.Skip("no cgroup v2 hierarchy")
	return ""
}

// cgroupOf reads the cgroup v2 path of a process.
func cgroupOf(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p
		}
	}
	t.Fatalf("no cgroup v2 line in %q", data)
	return ""
}

func TestCgroupLevels(t *testing.T) {
	parent := testCgroupParent(t)
	levels, err := cgroupLevels(filepath.Join(parent, "a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	if len(levels) < 4 || levels[len(levels)-1] != filepath.Join(parent, "a", "b") || !isCgroup2(levels[0]) || isCgroup2(filepath.Dir(levels[0])) {
		t.Errorf("cgroupLevels = %q, want from the hierarchy's root down to the directory", levels)
	}
	if _, err := cgroupLevels(filepath.Join(t.TempDir(), "x")); err == nil || !strings.Contains(err.Error(), "not in a cgroup v2 hierarchy") {
		t.Errorf("cgroupLevels outside cgroup2: %v", err)
	}
}

func TestUnitCgroupPlacement(t *testing.T) {
	parent := testCgroupParent(t)
	cg, err := newUnitCgroup(parent, "t.service", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cg.fd()}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start into the cgroup: %v", err)
	}
	if got := cgroupOf(t, cmd.Process.Pid); !strings.HasSuffix(got, "/exec/t.service") {
		t.Errorf("process is in cgroup %q, want .../exec/t.service", got)
	}
	if !cg.populated() {
		t.Error("populated() = false with a process inside")
	}
	if err := cg.remove(); err != nil {
		t.Fatalf("remove: %v", err)
	}
	cmd.Wait()
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signal() != syscall.SIGKILL {
		t.Errorf("the process left in the cgroup ended with %v, want SIGKILL", ws)
	}
	if _, err := os.Stat(cg.path); !os.IsNotExist(err) {
		t.Errorf("cgroup still there: %v", err)
	}
}

func TestUnitCgroupLimits(t *testing.T) {
	parent := testCgroupParent(t)
	cg, err := newUnitCgroup(parent, "l.service", 150, 64<<20)
	if err != nil {
		// A hybrid host's unified hierarchy has no controllers.
		if !strings.Contains(err.Error(), "controller is not available") {
			t.Fatalf("newUnitCgroup: %v", err)
		}
		t.Logf("limits cannot be enforced here: %v", err)
		return
	}
	defer cg.remove()
	for file, want := range map[string]string{"cpu.max": "150000 100000", "memory.max": "67108864"} {
		data, err := os.ReadFile(filepath.Join(cg.path, file))
		if err != nil || strings.TrimSpace(string(data)) != want {
			t.Errorf("%s = %q, %v; want %q", file, data, err, want)
		}
	}
}

func TestDriverCgroup(t *testing.T) {
	parent := testCgroupParent(t)
	d, rec := newTestDriver(t, func(c *Config) { c.CgroupParent = parent })
	mustLoadStart(t, d, newUnit("limited.service", []string{"/bin/sh", "-c", "sleep 300 & exec sleep 301"}, func(s *unit.Service) {
		s.MemoryMax = 256 << 20
	}))
	st := rec.waitState(t, "limited.service", "active", "running")
	if st.Message != "" {
		// Not enforceable here (no memory controller): the unit runs anyway.
		if !strings.Contains(st.Message, "resource limits not enforced") {
			t.Errorf("message = %q", st.Message)
		}
		t.Logf("limits not enforced: %s", st.Message)
	} else if got := cgroupOf(t, st.PID); !strings.HasSuffix(got, "/limited.service") {
		t.Errorf("main process in cgroup %q, want the unit's", got)
	}
	d.Stop("limited.service")
	rec.waitState(t, "limited.service", "inactive", "dead")
	if _, err := os.Stat(filepath.Join(parent, "limited.service")); !os.IsNotExist(err) {
		t.Errorf("unit cgroup left after the stop: %v", err)
	}
}

func TestRemoveStaleCgroups(t *testing.T) {
	parent := testCgroupParent(t)
	cg, err := newUnitCgroup(parent, "stale.service", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cg.fd()}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cg.dir.Close()
	d, _ := newTestDriver(t, func(c *Config) { c.CgroupParent = parent })
	_ = d
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(waitTimeout):
		t.Fatal("the process in the stale cgroup survived New")
	}
	if entries, _ := os.ReadDir(parent); slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.IsDir() }) {
		t.Errorf("stale cgroups left in %s", parent)
	}
}
