package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// userHZ is the unit of CPU times in /proc/PID/stat (USER_HZ, sysconf
// _SC_CLK_TCK): 100 on every Linux architecture Go supports.
const userHZ = 100

// procStats is what the bench measures of one process.
type procStats struct {
	CPU     time.Duration // user + system time of the process (not of its children)
	PeakRSS int64         // peak resident set size (VmHWM), bytes
}

// readProcStats reads the stats of process pid from /proc.
func readProcStats(pid int) (procStats, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStats{}, err
	}
	cpu, err := parseStatCPU(stat)
	if err != nil {
		return procStats{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procStats{}, err
	}
	hwm, err := parseStatusHWM(status)
	if err != nil {
		return procStats{}, fmt.Errorf("/proc/%d/status: %w", pid, err)
	}
	return procStats{CPU: cpu, PeakRSS: hwm}, nil
}

// parseStatCPU returns utime+stime of a /proc/PID/stat line. The command
// name (field 2) is in parentheses and may hold spaces and parentheses, so
// fields are counted from the last ')': state is field 3, utime 14, stime 15.
func parseStatCPU(stat []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name in %q", stat)
	}
	f := bytes.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 13", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] { // fields 14 and 15
		n, err := strconv.ParseInt(string(s), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("cpu time %q: %w", s, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// parseStatusHWM returns VmHWM of a /proc/PID/status, in bytes.
func parseStatusHWM(status []byte) (int64, error) {
	for line := range bytes.Lines(status) {
		rest, ok := bytes.CutPrefix(line, []byte("VmHWM:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0, fmt.Errorf("VmHWM line %q: want <n> kB", bytes.TrimSpace(line))
		}
		n, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("VmHWM %q: %w", f[0], err)
		}
		return n << 10, nil
	}
	return 0, fmt.Errorf("no VmHWM line")
}

// readHostBusy returns the CPU time the whole host spent busy (not idle),
// from /proc/stat.
func readHostBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	d, err := parseHostBusy(b)
	if err != nil {
		return 0, fmt.Errorf("/proc/stat: %w", err)
	}
	return d, nil
}

// parseHostBusy sums the busy times of /proc/stat's "cpu" line: user, nice,
// system, irq, softirq and steal (guest time is counted in user already;
// idle and iowait are not busy).
func parseHostBusy(stat []byte) (time.Duration, error) {
	for line := range bytes.Lines(stat) {
		rest, ok := bytes.CutPrefix(line, []byte("cpu "))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) < 8 {
			return 0, fmt.Errorf("cpu line %q: want at least 8 fields", bytes.TrimSpace(line))
		}
		var ticks int64
		for _, i := range []int{0, 1, 2, 5, 6, 7} { // user nice system [idle iowait] irq softirq steal
			n, err := strconv.ParseInt(string(f[i]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("cpu line: %q: %w", f[i], err)
			}
			ticks += n
		}
		return time.Duration(ticks) * time.Second / userHZ, nil
	}
	return 0, fmt.Errorf("no cpu line")
}
