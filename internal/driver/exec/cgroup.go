package execdriver

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// Magic numbers of the cgroup file systems, as statfs reports them.
const (
	cgroup2Magic = 0x63677270 // CGROUP2_SUPER_MAGIC
	cgroup1Magic = 0x27e0eb   // CGROUP_SUPER_MAGIC
)

// cpuPeriod is the CPU bandwidth period (cpu.max on v2, cpu.cfs_period_us on
// v1), in microseconds.
const cpuPeriod = 100000

// unitCgroup is the cgroup one run of a unit is placed in, to enforce
// CPUQuota= and MemoryMax=: a cgroup v2 (cgroup2.go) or a set of cgroup v1
// hierarchies (cgroup1.go). Every process of the run is started inside it,
// so that none escapes by forking early.
type unitCgroup interface {
	// where names the cgroup in messages.
	where() string
	// start starts cmd inside the cgroup. An error wrapping
	// errCgroupPlacement means the process could not be placed and was not
	// started; any other error is cmd.Start's.
	start(cmd *exec.Cmd) error
	// populated reports whether any process is left in the cgroup.
	populated() bool
	// signal sends sig to every process in the cgroup.
	signal(sig syscall.Signal)
	// oomKills is how many processes the kernel's OOM killer has killed in
	// the cgroup since it was made.
	oomKills() uint64
	// remove kills what is left in the cgroup and removes it.
	remove() error
}

// errCgroupPlacement is wrapped by unitCgroup.start when the process could
// not be put in the cgroup.
var errCgroupPlacement = errors.New("cannot place the process in its cgroup")

// cgroupHost is how this machine's cgroups are reached, found once by New:
// a cgroup v2 hierarchy (a unified host), cgroup v1 controller hierarchies
// (a legacy or hybrid host: the controllers are on v1 there), or neither.
type cgroupHost struct {
	version int    // 2, 1, or 0 when neither can be used
	root    string // v2: the hierarchy's mount; v1: the directory holding the controllers' mounts
	parent  string // Config.CgroupParent: the path, within the hierarchies, of the units' cgroups
	why     error  // version 0: why
}

// detectCgroups looks at what is mounted at root (Config.CgroupRoot).
func detectCgroups(root, parent string) *cgroupHost {
	h := &cgroupHost{root: root, parent: parent}
	switch {
	case fsType(root) == cgroup2Magic:
		h.version = 2
	case fsType(filepath.Join(root, "cpu")) == cgroup1Magic || fsType(filepath.Join(root, "memory")) == cgroup1Magic:
		h.version = 1
	default:
		h.why = fmt.Errorf("no cgroup hierarchy at %s: neither cgroup v2 nor the cgroup v1 cpu and memory controllers are mounted there", root)
	}
	return h
}

func fsType(path string) int64 {
	var st syscall.Statfs_t
	if syscall.Statfs(path, &st) != nil {
		return 0
	}
	return int64(st.Type)
}

// String is how the status and the docs name the host's cgroups.
func (h *cgroupHost) String() string {
	switch h.version {
	case 2:
		return "cgroup v2 at " + h.root
	case 1:
		return "cgroup v1 at " + h.root
	}
	return "no cgroups"
}

// newUnitCgroup makes the cgroup of one run of the unit name, with the given
// limits (a cpuPercent or memoryMax of 0 is no limit).
func (h *cgroupHost) newUnitCgroup(name string, cpuPercent int, memoryMax int64) (unitCgroup, error) {
	switch h.version {
	case 2:
		return newCgroup2(filepath.Join(h.root, h.parent), name, cpuPercent, memoryMax)
	case 1:
		return newCgroup1(h.root, filepath.Join(h.parent, name), cpuPercent, memoryMax)
	}
	return nil, h.why
}

// removeStale removes the unit cgroups an earlier driver left under the
// parent, killing what still runs in them.
func (h *cgroupHost) removeStale(log *slog.Logger) {
	var stale []unitCgroup
	switch h.version {
	case 2:
		stale = staleCgroups2(filepath.Join(h.root, h.parent))
	case 1:
		stale = staleCgroups1(h.root, h.parent)
	}
	for _, cg := range stale {
		if cg.populated() {
			log.Warn("killing processes left in a unit cgroup by a previous flotilla", "cgroup", cg.where())
		}
		if err := cg.remove(); err != nil {
			log.Warn("cannot remove stale unit cgroup", "cgroup", cg.where(), "err", err)
		}
	}
}

// removeParent removes the parent of the units' cgroups once they are gone,
// and then its own parent if that is a flotilla.slice left empty (as the
// default /flotilla.slice/exec-<id> leaves it when no other driver uses
// it); a cgroup with children cannot be removed.
func (h *cgroupHost) removeParent() {
	var roots []string
	switch h.version {
	case 2:
		roots = []string{h.root}
	case 1:
		for _, c := range cgroup1Controllers {
			roots = append(roots, filepath.Join(h.root, c))
		}
	}
	for _, root := range roots {
		if os.Remove(filepath.Join(root, h.parent)) == nil && filepath.Base(filepath.Dir(h.parent)) == "flotilla.slice" {
			os.Remove(filepath.Join(root, filepath.Dir(h.parent)))
		}
	}
}

// subdirs lists the directories in dir.
func subdirs(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}
