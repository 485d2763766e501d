package machine

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDetect(t *testing.T) {
	c := Detect()
	if c.CPUPercent < 100 {
		t.Errorf("Detect().CPUPercent = %d, want at least 100", c.CPUPercent)
	}
	if c.MemoryBytes <= 0 {
		t.Errorf("Detect().MemoryBytes = %d, want the host's memory", c.MemoryBytes)
	}
}

func TestMemTotal(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		text    string
		want    int64
		wantErr bool
	}{
		{"MemTotal:       24576000 kB\nMemFree: 1 kB\n", 24576000 * 1024, false},
		{"MemFree: 1 kB\n", 0, true},
		{"MemTotal: lots kB\n", 0, true},
		{"", 0, true},
	} {
		os.WriteFile(filepath.Join(dir, "meminfo"), []byte(tc.text), 0o644)
		got, err := memTotal(dir)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("memTotal(%q) = %d, %v; want %d, error %v", tc.text, got, err, tc.want, tc.wantErr)
		}
	}
	if _, err := memTotal(filepath.Join(dir, "missing")); err == nil {
		t.Error("memTotal of a missing proc file system succeeded")
	}
}

func TestParseCPUs(t *testing.T) {
	for in, want := range map[string]int64{"4": 400, "0.5": 50, "1.25": 125, "0": 0} {
		if got, err := ParseCPUs(in); err != nil || got != want {
			t.Errorf("ParseCPUs(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "four", "-1"} {
		if _, err := ParseCPUs(in); err == nil {
			t.Errorf("ParseCPUs(%q) succeeded, want an error", in)
		}
	}
}
