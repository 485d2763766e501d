package execdriver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// cgroup1Controllers are the cgroup v1 hierarchies a unit's cgroup is made
// in, where they are mounted: cpu for CPUQuota=, memory for MemoryMax=,
// cpuacct for what the unit used.
var cgroup1Controllers = []string{"cpu", "cpuacct", "memory"}

// cgroup1Unit is a unit's cgroup on a cgroup v1 host (or a hybrid one, whose
// controllers are on v1): a directory of the same path in each of the cpu,
// cpuacct and memory hierarchies, made, limited, listed and removed through
// containerd's cgroups/v3/cgroup1.
//
// cgroup v1 cannot start a process straight into a cgroup (clone3's
// CLONE_INTO_CGROUP is v2 only), and moving a process in after it started
// would let what it forks at once escape. So start moves the OS thread that
// forks (v1 places threads one by one, through the tasks file) into the
// unit's cgroup, starts the process from it, which inherits its cgroups,
// and moves the thread back.
type cgroup1Unit struct {
	root  string // where the controllers' hierarchies are mounted
	group string // the cgroup's path within each hierarchy
	cg    cgroup1.Cgroup
	ctrls []string // the hierarchies it is in
	oom0  uint64   // oom_kill in memory.oom_control when made
}

// cgroup1Hierarchy lists the controllers of cgroup1Controllers mounted under
// root as v1 hierarchies.
func cgroup1Hierarchy(root string) []cgroup1.Subsystem {
	var subs []cgroup1.Subsystem
	for _, c := range cgroup1Controllers {
		if fsType(filepath.Join(root, c)) != cgroup1Magic {
			continue
		}
		switch c {
		case "cpu":
			subs = append(subs, cgroup1.NewCpu(root))
		case "cpuacct":
			subs = append(subs, cgroup1.NewCpuacct(root))
		case "memory":
			subs = append(subs, cgroup1.NewMemory(root))
		}
	}
	return subs
}

// newCgroup1 makes the cgroup group (a path within the hierarchies) in each
// v1 hierarchy of cgroup1Controllers mounted under root, with the limits
// set: cpu.cfs_quota_us over a cfs_period_us of 100 ms for cpuPercent,
// memory.limit_in_bytes for memoryMax (0 is no limit).
func newCgroup1(root, group string, cpuPercent int, memoryMax int64) (*cgroup1Unit, error) {
	subs := cgroup1Hierarchy(root)
	var ctrls []string
	for _, s := range subs {
		ctrls = append(ctrls, string(s.Name()))
	}
	res := &specs.LinuxResources{}
	if cpuPercent > 0 {
		if !slices.Contains(ctrls, "cpu") {
			return nil, fmt.Errorf("the cgroup v1 cpu controller is not mounted at %s", filepath.Join(root, "cpu"))
		}
		quota, period := int64(cpuPercent*cpuPeriod/100), uint64(cpuPeriod)
		res.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	if memoryMax > 0 {
		if !slices.Contains(ctrls, "memory") {
			return nil, fmt.Errorf("the cgroup v1 memory controller is not mounted at %s", filepath.Join(root, "memory"))
		}
		res.Memory = &specs.LinuxMemory{Limit: &memoryMax}
	}
	c := &cgroup1Unit{root: root, group: group, ctrls: ctrls}
	cg, err := cgroup1.New(cgroup1.StaticPath(group), res,
		cgroup1.WithHierarchy(func() ([]cgroup1.Subsystem, error) { return subs, nil }))
	if err != nil {
		c.cg = loadCgroup1(root, group) // remove what was made
		c.remove()
		return nil, fmt.Errorf("cgroup v1 %s: %w", group, err)
	}
	c.cg = cg
	c.oom0 = c.oomKills()
	return c, nil
}

// loadCgroup1 reaches the existing cgroup group in the hierarchies mounted
// under root; nil when it is in none.
func loadCgroup1(root, group string) cgroup1.Cgroup {
	subs := cgroup1Hierarchy(root)
	cg, err := cgroup1.Load(cgroup1.StaticPath(group),
		cgroup1.WithHierarchy(func() ([]cgroup1.Subsystem, error) { return subs, nil }))
	if err != nil {
		return nil
	}
	return cg
}

func (c *cgroup1Unit) where() string {
	return filepath.Join(c.root, "{"+strings.Join(c.ctrls, ",")+"}", c.group)
}

// start starts cmd from an OS thread placed in the unit's cgroup, so that
// the process begins its life there. While the goroutine is locked to the
// thread, the Go runtime creates any new thread from its template thread,
// not from this one, so no runtime thread is born in the unit's cgroup.
// The thread is moved back afterwards; if
// it cannot be, it is kept locked to a goroutine that never ends (were the
// thread to end, the process's parent-death signal would kill it), so that
// no other process is ever started from it.
func (c *cgroup1Unit) start(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		tid := syscall.Gettid()
		self := "/proc/self/task/" + strconv.Itoa(tid) + "/cgroup"
		data, err := os.ReadFile(self)
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("%w: %w", errCgroupPlacement, err)
			return
		}
		if err := c.cg.AddTask(cgroup1.Process{Pid: tid}); err != nil {
			if c.moveBack(tid, string(data)) != nil {
				done <- fmt.Errorf("%w: %w", errCgroupPlacement, err)
				select {} // see above
			}
			runtime.UnlockOSThread()
			done <- fmt.Errorf("%w: %w", errCgroupPlacement, err)
			return
		}
		err = cmd.Start()
		if c.moveBack(tid, string(data)) != nil {
			done <- err
			select {} // see above
		}
		runtime.UnlockOSThread()
		done <- err
	}()
	return <-done
}

// moveBack puts the thread tid back in the cgroups listed in orig, the
// contents of its /proc cgroup file before it was moved.
func (c *cgroup1Unit) moveBack(tid int, orig string) error {
	var errs []error
	for _, line := range strings.Split(orig, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, ctrl := range strings.Split(parts[1], ",") {
			if !slices.Contains(c.ctrls, ctrl) {
				continue
			}
			tasks := filepath.Join(c.root, ctrl, parts[2], "tasks")
			if err := os.WriteFile(tasks, []byte(strconv.Itoa(tid)), 0); err != nil {
				errs = append(errs, fmt.Errorf("move thread %d back to %s: %w", tid, tasks, err))
			}
		}
	}
	return errors.Join(errs...)
}

// procs lists the processes in the cgroup, in any of its hierarchies.
func (c *cgroup1Unit) procs() []int {
	var pids []int
	if c.cg == nil {
		return nil
	}
	for _, ctrl := range c.ctrls {
		ps, err := c.cg.Processes(cgroup1.Name(ctrl), true)
		if err != nil {
			continue
		}
		for _, p := range ps {
			if !slices.Contains(pids, p.Pid) {
				pids = append(pids, p.Pid)
			}
		}
	}
	return pids
}

// populated reports whether a process other than this one is in the cgroup.
func (c *cgroup1Unit) populated() bool {
	self := os.Getpid()
	for _, pid := range c.procs() {
		if pid != self {
			return true
		}
	}
	return false
}

// signal sends sig to every process in the cgroup but this one, which is
// listed there while one of its threads is (during a start, or for good if
// that thread could not be moved back).
func (c *cgroup1Unit) signal(sig syscall.Signal) {
	self := os.Getpid()
	for _, pid := range c.procs() {
		if pid > 1 && pid != self {
			syscall.Kill(pid, sig)
		}
	}
}

// oomKills reads oom_kill from memory.oom_control (kernels since 4.13).
func (c *cgroup1Unit) oomKills() uint64 {
	if c.cg == nil || !slices.Contains(c.ctrls, "memory") {
		return 0
	}
	m, err := c.cg.Stat(cgroup1.IgnoreNotExist)
	if err != nil || m.MemoryOomControl == nil {
		return 0
	}
	v := m.MemoryOomControl.OomKill
	return v - min(v, c.oom0)
}

// cpuUsage is the CPU time the cgroup's processes used, from cpuacct.
func (c *cgroup1Unit) cpuUsage() (time.Duration, error) {
	if c.cg == nil || !slices.Contains(c.ctrls, "cpuacct") {
		return 0, errors.New("no cpuacct hierarchy")
	}
	m, err := c.cg.Stat(cgroup1.IgnoreNotExist)
	if err != nil {
		return 0, err
	}
	if m.CPU == nil || m.CPU.Usage == nil {
		return 0, errors.New("no CPU usage in the cgroup's stats")
	}
	return time.Duration(m.CPU.Usage.Total), nil
}

// remove kills what is left in the cgroup and removes it from every
// hierarchy, waiting briefly for the killed processes to go.
func (c *cgroup1Unit) remove() error {
	if c.cg == nil {
		return nil
	}
	var err error
	for i := 0; i < 20; i++ {
		if i > 0 {
			c.signal(syscall.SIGKILL)
			time.Sleep(10 * time.Millisecond)
		}
		err = c.cg.Delete()
		if err == nil || errors.Is(err, cgroup1.ErrCgroupDeleted) {
			return nil
		}
	}
	return err
}

// staleCgroups1 lists the unit cgroups under parent, in any hierarchy.
func staleCgroups1(root, parent string) []unitCgroup {
	var names []string
	for _, ctrl := range cgroup1Controllers {
		for _, n := range subdirs(filepath.Join(root, ctrl, parent)) {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	var out []unitCgroup
	for _, n := range names {
		group := filepath.Join(parent, n)
		if cg := loadCgroup1(root, group); cg != nil {
			out = append(out, &cgroup1Unit{root: root, group: group, cg: cg, ctrls: loadedCtrls(cg)})
		}
	}
	return out
}

func loadedCtrls(cg cgroup1.Cgroup) []string {
	var out []string
	for _, s := range cg.Subsystems() {
		out = append(out, string(s.Name()))
	}
	return out
}
