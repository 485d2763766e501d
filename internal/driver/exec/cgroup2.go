package execdriver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroup2 is a unit's cgroup on a cgroup v2 host. Processes are started
// straight into it with clone3(CLONE_INTO_CGROUP), so none escapes by
// forking early.
//
// It is written by hand rather than with containerd's cgroups/v3/cgroup2
// (which cgroup1.go uses for v1): starting into a cgroup needs its
// directory's descriptor, which that package does not give, it pulls in
// eBPF device filters and systemd's D-Bus API that a unit never uses, and
// the few files below are all a unit needs, with errors that name the
// missing controller.
type cgroup2 struct {
	path string
	dir  *os.File // the cgroup's directory; its descriptor goes to clone3
	oom0 uint64   // oom_kill in memory.events when made
}

// newCgroup2 makes the cgroup parent/name with the given limits (a
// cpuPercent or memoryMax of 0 is no limit). It needs parent to lie in a
// cgroup v2 hierarchy where the cpu and memory controllers can be enabled:
// every directory from the hierarchy's root down to parent gets the needed
// controllers in its cgroup.subtree_control, and parent is created if
// missing. Under cgroup v2's rule that only leaves hold processes, this works
// when parent and the directories it creates hold no processes themselves,
// as with the default /sys/fs/cgroup/flotilla.slice/... on a host's root
// hierarchy, or a subtree delegated to flotilla (systemd Delegate=yes).
func newCgroup2(parent, name string, cpuPercent int, memoryMax int64) (*cgroup2, error) {
	var need []string
	if cpuPercent > 0 {
		need = append(need, "cpu")
	}
	if memoryMax > 0 {
		need = append(need, "memory")
	}
	levels, err := cgroupLevels(parent)
	if err != nil {
		return nil, err
	}
	for i, dir := range levels {
		if i > 0 {
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return nil, err
			}
		}
		if err := enableControllers(dir, need); err != nil {
			return nil, err
		}
	}
	path := filepath.Join(parent, name)
	if err := os.Mkdir(path, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	cg := &cgroup2{path: path}
	if err := cg.setLimits(cpuPercent, memoryMax); err != nil {
		cg.remove()
		return nil, err
	}
	dir, err := os.Open(path)
	if err != nil {
		cg.remove()
		return nil, err
	}
	cg.dir = dir
	cg.oom0 = cg.oomKills()
	return cg, nil
}

// cgroupLevels lists the directories from the root of the cgroup v2
// hierarchy holding dir down to dir itself, some of which may not exist yet.
func cgroupLevels(dir string) ([]string, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("cgroup parent %q is not an absolute path", dir)
	}
	dir = filepath.Clean(dir)
	existing := dir
	for {
		if _, err := os.Stat(existing); err == nil {
			break
		}
		existing = filepath.Dir(existing)
	}
	if !isCgroup2(existing) {
		return nil, fmt.Errorf("%s is not in a cgroup v2 hierarchy", existing)
	}
	root := existing
	for {
		up := filepath.Dir(root)
		if up == root || !isCgroup2(up) {
			break
		}
		root = up
	}
	var levels []string
	for p := dir; ; p = filepath.Dir(p) {
		levels = append(levels, p)
		if p == root {
			break
		}
	}
	slices.Reverse(levels)
	return levels, nil
}

func isCgroup2(path string) bool { return fsType(path) == cgroup2Magic }

// enableControllers makes sure dir passes the controllers on to its children.
func enableControllers(dir string, need []string) error {
	if len(need) == 0 {
		return nil
	}
	avail, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return err
	}
	enabled, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return err
	}
	for _, c := range need {
		if !slices.Contains(strings.Fields(string(avail)), c) {
			return fmt.Errorf("the %s controller is not available in %s", c, dir)
		}
		if slices.Contains(strings.Fields(string(enabled)), c) {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+c), 0); err != nil {
			return fmt.Errorf("enable the %s controller in %s: %w", c, dir, err)
		}
	}
	return nil
}

func (c *cgroup2) setLimits(cpuPercent int, memoryMax int64) error {
	if cpuPercent > 0 {
		v := fmt.Sprintf("%d %d", cpuPercent*cpuPeriod/100, cpuPeriod)
		if err := os.WriteFile(filepath.Join(c.path, "cpu.max"), []byte(v), 0); err != nil {
			return err
		}
	}
	if memoryMax > 0 {
		v := strconv.FormatInt(memoryMax, 10)
		if err := os.WriteFile(filepath.Join(c.path, "memory.max"), []byte(v), 0); err != nil {
			return err
		}
	}
	return nil
}

func (c *cgroup2) where() string { return c.path }

func (c *cgroup2) start(cmd *exec.Cmd) error {
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = int(c.dir.Fd())
	err := cmd.Start()
	// clone3 missing (ENOSYS) or refusing the cgroup: the process was not
	// started.
	if errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EINVAL) ||
		errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.EBUSY) {
		return fmt.Errorf("%w: %w", errCgroupPlacement, err)
	}
	return err
}

// populated reports whether any process is left in the cgroup.
func (c *cgroup2) populated() bool {
	v, ok := keyedValue(filepath.Join(c.path, "cgroup.events"), "populated")
	return ok && v != 0
}

// oomKills reads oom_kill from memory.events (0 without the memory
// controller).
func (c *cgroup2) oomKills() uint64 {
	v, _ := keyedValue(filepath.Join(c.path, "memory.events"), "oom_kill")
	return v - min(v, c.oom0)
}

// keyedValue reads the value of key in a flat-keyed cgroup file.
func keyedValue(file, key string) (uint64, bool) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// signal sends sig to every process in the cgroup. SIGKILL goes through
// cgroup.kill where the kernel has it (5.14+).
func (c *cgroup2) signal(sig syscall.Signal) {
	if sig == syscall.SIGKILL {
		if os.WriteFile(filepath.Join(c.path, "cgroup.kill"), []byte("1"), 0) == nil {
			return
		}
	}
	data, err := os.ReadFile(filepath.Join(c.path, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			syscall.Kill(pid, sig)
		}
	}
}

// remove kills what is left in the cgroup and removes it, waiting briefly for
// the killed processes to go.
func (c *cgroup2) remove() error {
	if c.dir != nil {
		c.dir.Close()
		c.dir = nil
	}
	var err error
	for i := 0; i < 20; i++ {
		err = os.Remove(c.path)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if i == 0 {
			c.signal(syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return err
}

// staleCgroups2 lists the unit cgroups in parent.
func staleCgroups2(parent string) []unitCgroup {
	if !isCgroup2(parent) {
		return nil
	}
	var out []unitCgroup
	for _, name := range subdirs(parent) {
		out = append(out, &cgroup2{path: filepath.Join(parent, name)})
	}
	return out
}
