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

	"github.com/flotilla/flotilla/internal/driver/service"
	"github.com/flotilla/flotilla/internal/unit"
)

// testParent is a fresh CgroupParent for the test.
func testParent(t *testing.T) string {
	return "/flotilla-test-" + strconv.Itoa(os.Getpid()) + "-" + strings.ReplaceAll(t.Name(), "/", "-") + "/exec"
}

// testCgroup2 returns the root of a writable cgroup v2 hierarchy (the
// host's, or the unified one of a hybrid host) and a fresh parent in it, or
// skips the test. The parent is removed when the test ends.
func testCgroup2(t *testing.T) (root, parent string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if !isCgroup2(root) {
			continue
		}
		parent := testParent(t)
		top := filepath.Join(root, filepath.Dir(parent))
		if err := os.Mkdir(top, 0o755); err != nil {
			t.Skipf("cgroup v2 at %s is not writable: %v", root, err)
		}
		t.Cleanup(func() {
			dir := filepath.Join(root, parent)
			for _, name := range subdirs(dir) {
				os.Remove(filepath.Join(dir, name))
			}
			os.Remove(dir)
			os.Remove(top)
		})
		return root, parent
	}
	t.Skip("no cgroup v2 hierarchy")
	return "", ""
}

// testCgroup1 returns the root of the host's cgroup v1 hierarchies and a
// fresh parent in them, or skips the test on a host without them (a cgroup
// v2 only host). The parent is removed from every hierarchy when the test
// ends.
func testCgroup1(t *testing.T) (root, parent string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	root = "/sys/fs/cgroup"
	if h := detectCgroups(root, "/x"); h.version != 1 {
		t.Skipf("no cgroup v1 hierarchies here (%s)", h)
	}
	parent = testParent(t)
	t.Cleanup(func() {
		for _, c := range cgroup1Controllers {
			dir := filepath.Join(root, c, parent)
			for _, name := range subdirs(dir) {
				os.Remove(filepath.Join(dir, name))
			}
			os.Remove(dir)
			os.Remove(filepath.Dir(dir))
		}
	})
	return root, parent
}

// cgroupOf reads the path of a process (or a thread: "self/task/TID") in
// the hierarchy whose controllers include ctrl ("" for cgroup v2).
func cgroupOf(t *testing.T, proc string, ctrl string) string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + proc + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (parts[1] == ctrl || ctrl != "" && slices.Contains(strings.Split(parts[1], ","), ctrl)) {
			return parts[2]
		}
	}
	t.Fatalf("no %q line in %q", ctrl, data)
	return ""
}

func TestDetectCgroups(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := detectCgroups(dir, "/p")
	if h.version != 0 || h.why == nil || !strings.Contains(h.why.Error(), "neither cgroup v2 nor the cgroup v1") {
		t.Errorf("detectCgroups(tempdir) = %+v, want none with a reason", h)
	}
	if _, err := h.newUnitCgroup("u.service", 10, 0); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("newUnitCgroup without cgroups: %v, want an error naming %s", err, dir)
	}
	real := detectCgroups("/sys/fs/cgroup", "/p")
	t.Logf("this host: %s", real)
}

func TestCgroupLevels(t *testing.T) {
	root, parent := testCgroup2(t)
	dir := filepath.Join(root, parent)
	levels, err := cgroupLevels(filepath.Join(dir, "a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	if len(levels) < 4 || levels[len(levels)-1] != filepath.Join(dir, "a", "b") || !isCgroup2(levels[0]) || isCgroup2(filepath.Dir(levels[0])) {
		t.Errorf("cgroupLevels = %q, want from the hierarchy's root down to the directory", levels)
	}
	if _, err := cgroupLevels(filepath.Join(t.TempDir(), "x")); err == nil || !strings.Contains(err.Error(), "not in a cgroup v2 hierarchy") {
		t.Errorf("cgroupLevels outside cgroup2: %v", err)
	}
}

func TestCgroup2Placement(t *testing.T) {
	root, parent := testCgroup2(t)
	cg, err := newCgroup2(filepath.Join(root, parent), "t.service", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if err := cg.start(cmd); err != nil {
		t.Fatalf("start into the cgroup: %v", err)
	}
	if got := cgroupOf(t, strconv.Itoa(cmd.Process.Pid), ""); !strings.HasSuffix(got, "/exec/t.service") {
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

func TestCgroup2Limits(t *testing.T) {
	root, parent := testCgroup2(t)
	cg, err := newCgroup2(filepath.Join(root, parent), "l.service", 150, 64<<20)
	if err != nil {
		// A hybrid host's unified hierarchy has no controllers.
		if !strings.Contains(err.Error(), "controller is not available") {
			t.Fatalf("newCgroup2: %v", err)
		}
		t.Logf("limits cannot be enforced on cgroup v2 here: %v", err)
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

// TestCgroup1PlacementAndLimits: on cgroup v1 the unit's cgroup is made in
// the cpu, cpuacct and memory hierarchies with the limits set, a process
// and what it forks at once begin in it, the thread that started them goes
// back where it was, and remove kills what is left and removes the cgroup
// everywhere.
func TestCgroup1PlacementAndLimits(t *testing.T) {
	root, parent := testCgroup1(t)
	cg, err := newCgroup1(root, filepath.Join(parent, "p.service"), 20, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		"cpu/" + parent + "/p.service/cpu.cfs_quota_us":         "20000",
		"cpu/" + parent + "/p.service/cpu.cfs_period_us":        "100000",
		"memory/" + parent + "/p.service/memory.limit_in_bytes": "67108864",
		"cpuacct/" + parent + "/p.service/cpuacct.usage_percpu": "",
	} {
		data, err := os.ReadFile(filepath.Join(root, file))
		if err != nil || want != "" && strings.TrimSpace(string(data)) != want {
			t.Errorf("%s = %q, %v; want %q", file, data, err, want)
		}
	}
	out := filepath.Join(t.TempDir(), "child")
	cmd := exec.Command("/bin/sh", "-c", `sleep 300 & echo $! > `+out+`; exec sleep 301`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cg.start(cmd); err != nil {
		t.Fatalf("start into the cgroup: %v", err)
	}
	child := readPid(t, out)
	want := parent + "/p.service"
	for _, pid := range []int{cmd.Process.Pid, child} {
		for _, ctrl := range cgroup1Controllers {
			if got := cgroupOf(t, strconv.Itoa(pid), ctrl); got != want {
				t.Errorf("pid %d is in %s cgroup %q, want %q", pid, ctrl, got, want)
			}
		}
	}
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		for _, ctrl := range cgroup1Controllers {
			if got := cgroupOf(t, "self/task/"+task.Name(), ctrl); strings.HasPrefix(got, parent) {
				t.Errorf("thread %s of the test was left in %s cgroup %q", task.Name(), ctrl, got)
			}
		}
	}
	if !cg.populated() {
		t.Error("populated() = false with processes inside")
	}
	if err := cg.remove(); err != nil {
		t.Fatalf("remove: %v", err)
	}
	cmd.Wait()
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signal() != syscall.SIGKILL {
		t.Errorf("the process left in the cgroup ended with %v, want SIGKILL", ws)
	}
	waitGone(t, child, "the forked child")
	for _, ctrl := range cgroup1Controllers {
		if _, err := os.Stat(filepath.Join(root, ctrl, want)); !os.IsNotExist(err) {
			t.Errorf("%s cgroup still there: %v", ctrl, err)
		}
	}
}

// TestDriverCgroup: a unit with a limit runs in its own cgroup, which is
// removed when it stops, on whichever cgroup version the host runs.
func TestDriverCgroup(t *testing.T) {
	root, parent := "/sys/fs/cgroup", testParent(t)
	switch detectCgroups(root, parent).version {
	case 1:
		root, parent = testCgroup1(t)
	case 2:
		root, parent = testCgroup2(t)
	default:
		t.Skip("no cgroups")
	}
	d, rec := newTestDriver(t, func(c *Config) { c.CgroupRoot, c.CgroupParent = root, parent })
	mustLoadStart(t, d, newUnit("limited.service", []string{"/bin/sh", "-c", "sleep 300 & exec sleep 301"}, func(s *unit.Service) {
		s.MemoryMax = 256 << 20
	}))
	st := rec.waitState(t, "limited.service", "active", "running")
	ctrl := ""
	if d.cgroups.version == 1 {
		ctrl = "memory"
	}
	if st.Message != "" {
		// Not enforceable here (a hybrid host's unified hierarchy).
		if !strings.Contains(st.Message, "resource limits not enforced") {
			t.Errorf("message = %q", st.Message)
		}
		t.Logf("limits not enforced: %s", st.Message)
	} else if got := cgroupOf(t, strconv.Itoa(st.PID), ctrl); got != parent+"/limited.service" {
		t.Errorf("main process in cgroup %q, want the unit's", got)
	}
	d.Stop("limited.service")
	rec.waitState(t, "limited.service", "inactive", "dead")
	for _, dir := range []string{filepath.Join(root, parent), filepath.Join(root, "memory", parent)} {
		if _, err := os.Stat(filepath.Join(dir, "limited.service")); !os.IsNotExist(err) {
			t.Errorf("unit cgroup left in %s after the stop: %v", dir, err)
		}
	}
}

// TestCgroup1MemoryMax: on cgroup v1, a unit that grows past MemoryMax= is
// killed by the kernel's OOM killer and ends failed, with result oom-kill
// and a message saying it ran out of memory; its cgroup is removed.
func TestCgroup1MemoryMax(t *testing.T) {
	root, parent := testCgroup1(t)
	d, rec := newTestDriver(t, func(c *Config) { c.CgroupRoot, c.CgroupParent = root, parent })
	// tail buffers /dev/zero, which has no newline, without end.
	mustLoadStart(t, d, newUnit("hog.service", []string{"tail", "/dev/zero"}, func(s *unit.Service) {
		s.MemoryMax = 32 << 20
	}))
	st := rec.waitState(t, "hog.service", "failed", "failed")
	if st.Result != service.ResultOOMKill || !strings.Contains(st.Message, "ran out of memory") || !strings.Contains(st.Message, "MemoryMax=33554432") {
		t.Errorf("status = %+v, want failed with result oom-kill and a message saying it ran out of memory", st)
	}
	waitLog(t, d, "hog.service", "killed by the OOM killer")
	waitLog(t, d, "hog.service", "Failed with result 'oom-kill'")
	for _, ctrl := range cgroup1Controllers {
		if _, err := os.Stat(filepath.Join(root, ctrl, parent, "hog.service")); !os.IsNotExist(err) {
			t.Errorf("%s cgroup of the failed unit left: %v", ctrl, err)
		}
	}

	// A child of the main process is killed; the main process then exits
	// with an error of its own: the unit ran out of memory all the same.
	mustLoadStart(t, d, newUnit("child.service", []string{"/bin/sh", "-c", "tail /dev/zero; exit 3"}, func(s *unit.Service) {
		s.MemoryMax = 32 << 20
	}))
	st = rec.waitState(t, "child.service", "failed", "failed")
	if st.Result != service.ResultOOMKill || !strings.Contains(st.Message, "ran out of memory") || !strings.Contains(st.Message, "status=3") {
		t.Errorf("status = %+v, want failed with result oom-kill, saying the main process exited with status 3", st)
	}
}

// TestCgroup1CPUQuota: on cgroup v1, a CPU-bound unit with CPUQuota=20%
// gets about its quota: over a bounded window its cpuacct usage stays
// within twice the quota (a generous bound: the kernel's CFS bandwidth
// control holds it to 20 ms per 100 ms period).
func TestCgroup1CPUQuota(t *testing.T) {
	root, parent := testCgroup1(t)
	d, rec := newTestDriver(t, func(c *Config) { c.CgroupRoot, c.CgroupParent = root, parent })
	mustLoadStart(t, d, newUnit("spin.service", []string{"/bin/sh", "-c", "while :; do :; done"}, func(s *unit.Service) {
		s.CPUQuotaPercent = 20
	}))
	st := rec.waitState(t, "spin.service", "active", "running")
	if st.Message != "" {
		t.Fatalf("status message %q, want limits enforced", st.Message)
	}
	cg := loadCgroup1(root, parent+"/spin.service")
	if cg == nil {
		t.Fatal("no cgroup for the unit")
	}
	u := &cgroup1Unit{root: root, group: parent + "/spin.service", cg: cg, ctrls: loadedCtrls(cg)}
	usage := func() (time.Duration, time.Time) {
		t.Helper()
		v, err := u.cpuUsage()
		if err != nil {
			t.Fatal(err)
		}
		return v, time.Now()
	}
	// Both sleeps are the measurement: a CPU share over a window of time.
	time.Sleep(100 * time.Millisecond) // past the first period
	u0, t0 := usage()
	time.Sleep(time.Second) // the window the share is measured over
	u1, t1 := usage()
	share := float64(u1-u0) / float64(t1.Sub(t0))
	t.Logf("CPUQuota=20%%: used %v of CPU in %v (%.0f%%)", u1-u0, t1.Sub(t0), share*100)
	if share > 0.40 {
		t.Errorf("the unit used %.0f%% of a CPU, want at most twice its 20%% quota", share*100)
	}
	if u1 <= u0 {
		t.Errorf("the unit used no CPU (%v then %v)", u0, u1)
	}
	d.Stop("spin.service")
	rec.waitState(t, "spin.service", "inactive", "dead")
}

// TestRemoveStaleCgroups: New empties and removes the unit cgroups an
// earlier driver left, on whichever cgroup version the host runs.
func TestRemoveStaleCgroups(t *testing.T) {
	var root, parent string
	var cg unitCgroup
	var err error
	switch detectCgroups("/sys/fs/cgroup", "/x").version {
	case 1:
		root, parent = testCgroup1(t)
		cg, err = newCgroup1(root, parent+"/stale.service", 0, 0)
	case 2:
		root, parent = testCgroup2(t)
		cg, err = newCgroup2(filepath.Join(root, parent), "stale.service", 0, 0)
	default:
		t.Skip("no cgroups")
	}
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if err := cg.start(cmd); err != nil {
		t.Fatal(err)
	}
	newTestDriver(t, func(c *Config) { c.CgroupRoot, c.CgroupParent = root, parent })
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(waitTimeout):
		t.Fatal("the process in the stale cgroup survived New")
	}
	for _, dir := range []string{filepath.Join(root, parent), filepath.Join(root, "memory", parent), filepath.Join(root, "cpu", parent)} {
		if len(subdirs(dir)) > 0 {
			t.Errorf("stale cgroups left in %s: %v", dir, subdirs(dir))
		}
	}
}
