package supervisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// unitCgroupDir finds the directory of the cgroup the exec driver made for
// the process pid: in the memory hierarchy on a cgroup v1 host, in the
// unified one on a v2 host. "" when the process is in no unit cgroup.
func unitCgroupDir(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Statfs_t
	v2 := syscall.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == 0x63677270
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.Contains(parts[2], "/flotilla.slice/exec-") {
			continue
		}
		switch {
		case v2 && parts[1] == "":
			return filepath.Join("/sys/fs/cgroup", parts[2])
		case !v2 && parts[1] == "memory":
			return filepath.Join("/sys/fs/cgroup/memory", parts[2])
		}
	}
	return ""
}

// TestCgroupAdopted: a unit with MemoryMax= runs in its own cgroup in the
// host's real hierarchies (cgroup v1 here); the cgroup outlives the daemon
// that started the unit, the next daemon adopts the unit in it, and
// unloading the unit removes the cgroup.
func TestCgroupAdopted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make cgroups")
	}
	t.Parallel()
	dir := newTestDir(t)
	c1, rec1 := newClient(t, dir)
	f := parseUnit(t, "capped.service", ticker+"MemoryMax=128M\nCPUQuota=50%\n")
	mustLoadStart(t, c1, f)
	st := rec1.wait(t, "capped.service", "active", func(st unit.Status) bool { return st.Active == "active" && st.PID != 0 })
	if st.Message != "" {
		t.Skipf("limits not enforced on this host: %s", st.Message)
	}
	cg := unitCgroupDir(t, st.PID)
	if !strings.HasSuffix(cg, "/capped.service") {
		t.Fatalf("unit pid %d is in cgroup %q, want one of its own", st.PID, cg)
	}
	sup := supervisorPID(t, dir)
	conns := sockets(t, sup)
	if err := c1.Detach(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The supervisor has seen the detach once it closed its end.
	waitfor.True(t, waitTimeout, "the supervisor to close the detached connection", func() bool { return sockets(t, sup) < conns })

	c2, _ := newClient(t, dir)
	if got := stateOf(t, c2, "capped.service"); got.PID != st.PID || got.Active != "active" {
		t.Fatalf("adopted status %+v, want active with pid %d", got, st.PID)
	}
	if got := unitCgroupDir(t, st.PID); got != cg {
		t.Errorf("after the daemon restarted the unit is in cgroup %q, want %q", got, cg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := c2.Unload(ctx, "capped.service"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cg); !os.IsNotExist(err) {
		t.Errorf("cgroup %s left after the unit was unloaded: %v", cg, err)
	}
	if err := c2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(cg)); !os.IsNotExist(err) {
		t.Errorf("the units' cgroup parent %s left after the supervisor closed: %v", filepath.Dir(cg), err)
	}
}

// sockets is the number of sockets process pid holds open.
func sockets(t *testing.T, pid int) int {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("open files of %d: %v", pid, err)
	}
	n := 0
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}
