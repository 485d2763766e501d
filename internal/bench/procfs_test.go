package bench

import (
	"os"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	tests := []struct {
		stat string
		want time.Duration
		ok   bool
	}{
		{"1234 (flotilla) S 1 1234 1234 0 -1 4194560 1000 0 0 0 150 25 0 0 20 0 12 0 100 1000000 2000 18446744073709551615",
			1750 * time.Millisecond, true},
		// A command name with spaces and parentheses.
		{"42 (a) b (c)) R 1 42 42 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 5 0 0", 100 * time.Millisecond, true},
		{"42 flotilla S 1", 0, false},
		{"42 (flotilla) S 1 2 3", 0, false},
		{"42 (flotilla) S 1 1 1 0 -1 0 0 0 0 0 x 3 0", 0, false},
	}
	for _, tt := range tests {
		got, err := parseStatCPU([]byte(tt.stat))
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseStatCPU(%q) = %v, %v; want %v, ok=%v", tt.stat, got, err, tt.want, tt.ok)
		}
	}
}

func TestParseStatusHWM(t *testing.T) {
	status := "Name:\tflotilla\nVmPeak:\t  900 kB\nVmHWM:\t   123456 kB\nVmRSS:\t  1000 kB\n"
	got, err := parseStatusHWM([]byte(status))
	if err != nil || got != 123456<<10 {
		t.Errorf("parseStatusHWM = %d, %v; want %d", got, err, 123456<<10)
	}
	for _, bad := range []string{"Name:\tx\n", "VmHWM:\t12 MB\n", "VmHWM:\tlots kB\n"} {
		if _, err := parseStatusHWM([]byte(bad)); err == nil {
			t.Errorf("parseStatusHWM(%q) succeeded, want an error", bad)
		}
	}
}

func TestReadProcStatsSelf(t *testing.T) {
	s, err := readProcStats(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.PeakRSS < 1<<20 {
		t.Errorf("this test's peak RSS = %d bytes, want at least 1 MiB", s.PeakRSS)
	}
	if _, err := readProcStats(-1); err == nil {
		t.Error("readProcStats(-1) succeeded, want an error")
	}
}

func TestParseHostBusy(t *testing.T) {
	stat := "cpu  100 5 50 10000 300 7 8 9 0 0\ncpu0 50 2 25 5000 150 3 4 4 0 0\nintr 1\n"
	got, err := parseHostBusy([]byte(stat))
	if want := 1790 * time.Millisecond; err != nil || got != want { // 100+5+50+7+8+9 ticks
		t.Errorf("parseHostBusy = %v, %v; want %v", got, err, want)
	}
	for _, bad := range []string{"cpu0 1 2 3 4 5 6 7 8\n", "cpu  1 2 3\n", "cpu  1 2 x 4 5 6 7 8\n"} {
		if _, err := parseHostBusy([]byte(bad)); err == nil {
			t.Errorf("parseHostBusy(%q) succeeded, want an error", bad)
		}
	}
	if _, err := readHostBusy(); err != nil {
		t.Errorf("readHostBusy: %v", err)
	}
}
