// Package machine describes the machine a daemon runs on: what it offers to
// units (CPU, memory), detected from the host unless set by flags.
package machine

import (
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"strconv"

	"github.com/prometheus/procfs"
)

// Capacity is what a machine offers: CPU in percent of one CPU (400 = four
// CPUs) and memory in bytes. Zero means unknown (not limited).
type Capacity struct {
	CPUPercent  int64
	MemoryBytes int64
}

// Detect reads the host's CPUs and memory.
func Detect() Capacity {
	c := Capacity{CPUPercent: int64(runtime.NumCPU()) * 100}
	if m, err := memTotal(procfs.DefaultMountPoint); err == nil {
		c.MemoryBytes = m
	}
	return c
}

// memTotal is MemTotal, in bytes, from the meminfo of the proc file system
// mounted at root.
func memTotal(root string) (int64, error) {
	fs, err := procfs.NewFS(root)
	if err != nil {
		return 0, err
	}
	m, err := fs.Meminfo()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", filepath.Join(root, "meminfo"), err)
	}
	if m.MemTotalBytes == nil {
		return 0, fmt.Errorf("%s has no MemTotal", filepath.Join(root, "meminfo"))
	}
	if *m.MemTotalBytes > math.MaxInt64 {
		return 0, fmt.Errorf("%s: MemTotal %d bytes is out of range", filepath.Join(root, "meminfo"), *m.MemTotalBytes)
	}
	return int64(*m.MemTotalBytes), nil
}

// ParseCPUs parses a CPU count such as "4" or "0.5" into percent.
func ParseCPUs(s string) (int64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 1e6 {
		return 0, fmt.Errorf("%q is not a number of CPUs (e.g. 4 or 0.5)", s)
	}
	return int64(f*100 + 0.5), nil
}
