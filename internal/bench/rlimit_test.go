package bench

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestRaiseFileLimit: as root, the processes the bench starts get the
// raised open-file limit.
func TestRaiseFileLimit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("raising the hard limit needs root")
	}
	var before syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &before); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &before) })
	raiseFileLimit()
	var after syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &after); err != nil {
		t.Fatal(err)
	}
	if after.Max == before.Max && syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: before.Cur, Max: before.Max + 1}) != nil {
		t.Skipf("this root may not raise its hard limit (%d): no CAP_SYS_RESOURCE", before.Max)
	}
	out, err := exec.Command("/bin/sh", "-c", "ulimit -n").Output()
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	want := uint64(maxOpenFiles)
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if v, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); v > 0 && v < want {
			want = v
		}
	}
	if n < want {
		t.Errorf("a child's open-file limit is %d, want %d (it was %d/%d)", n, want, before.Cur, before.Max)
	}
}
