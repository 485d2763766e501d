// Package machine describes the machine a daemon runs on: what it offers to
// units (CPU, memory), detected from the host unless set by flags.
package machine

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
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
	if m, err := memTotal("/proc/meminfo"); err == nil {
		c.MemoryBytes = m
	}
	return c
}

func memTotal(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: MemTotal %q: %w", path, fields[1], err)
			}
			return kb * 1024, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s has no MemTotal", path)
}

// ParseCPUs parses a CPU count such as "4" or "0.5" into percent.
func ParseCPUs(s string) (int64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 1e6 {
		return 0, fmt.Errorf("%q is not a number of CPUs (e.g. 4 or 0.5)", s)
	}
	return int64(f*100 + 0.5), nil
}
