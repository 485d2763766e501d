package bench

import (
	"fmt"
	"time"

	"github.com/prometheus/procfs"
)

// procStats is what the bench measures of one process.
type procStats struct {
	CPU     time.Duration // user + system time of the process (not of its children)
	PeakRSS int64         // peak resident set size (VmHWM), bytes
}

// readProcStats reads the stats of process pid from /proc.
func readProcStats(pid int) (procStats, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return procStats{}, err
	}
	stat, err := p.Stat()
	if err != nil {
		return procStats{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	status, err := p.NewStatus()
	if err != nil {
		return procStats{}, fmt.Errorf("/proc/%d/status: %w", pid, err)
	}
	return procStats{CPU: seconds(stat.CPUTime()), PeakRSS: int64(status.VmHWM)}, nil
}

// readHostBusy returns the CPU time the whole host spent busy (not idle),
// from /proc/stat: user, nice, system, irq, softirq and steal (guest time
// is counted in user already; idle and iowait are not busy).
func readHostBusy() (time.Duration, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, err
	}
	st, err := fs.Stat()
	if err != nil {
		return 0, fmt.Errorf("/proc/stat: %w", err)
	}
	c := st.CPUTotal
	return seconds(c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal), nil
}

// processAlive reports whether pid is a process that is not a zombie.
func processAlive(pid int) bool {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return false
	}
	stat, err := p.Stat()
	return err == nil && stat.State != "Z"
}

// sysctlInts reads the integers of a sysctl ("fs.nr_open") from /proc/sys.
func sysctlInts(name string) ([]int, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, err
	}
	return fs.SysctlInts(name)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
