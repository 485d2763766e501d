package unit

import (
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"0", 0},
		{"5", 5 * time.Second},
		{"5s", 5 * time.Second},
		{" 5 s ", 5 * time.Second},
		{"100ms", 100 * time.Millisecond},
		{"100msec", 100 * time.Millisecond},
		{"20us", 20 * time.Microsecond},
		{"20µs", 20 * time.Microsecond},
		{"1min 30s", 90 * time.Second},
		{"1min30s", 90 * time.Second},
		{"2 h", 2 * time.Hour},
		{"2hours", 2 * time.Hour},
		{"48hr", 48 * time.Hour},
		{"1.5s", 1500 * time.Millisecond},
		{".5s", 500 * time.Millisecond},
		{"5.s", 5 * time.Second},
		{"0.001", time.Millisecond},
		{"1d", 24 * time.Hour},
		{"1w", 7 * 24 * time.Hour},
		{"1M", 2629800 * time.Second},
		{"1y", 31557600 * time.Second},
		{"1y 12month", 2 * 31557600 * time.Second},
		{"55s500ms", 55500 * time.Millisecond},
		{"300ms20s 5day", 300*time.Millisecond + 20*time.Second + 5*24*time.Hour},
		{"1 2", 3 * time.Second},
		{"infinity", Infinity},
	}
	for _, tt := range tests {
		got, err := parseDuration(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("parseDuration(%q) = %v, %v, want %v, nil", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"", " ", "s", "5x", "5 mins", "-1", "1.2.3", "5s-", "infinity 5", "5m infinity", "abc", "1e3", "0x10", "9999999999999999999", "300000y", "5ns"} {
		if got, err := parseDuration(in); err == nil {
			t.Errorf("parseDuration(%q) = %v, nil, want an error", in, got)
		}
	}
}

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"1", 1},
		{"1024", 1024},
		{"1B", 1},
		{"1K", 1 << 10},
		{"512M", 512 << 20},
		{"2G", 2 << 30},
		{"1T", 1 << 40},
		{"1P", 1 << 50},
		{"1E", 1 << 60},
		{"1.5G", 3 << 29},
		{"0.5K", 512},
		{"1.0009765625K", 1025},
		{"7E", 7 << 60},
	}
	for _, tt := range tests {
		got, err := parseBytes(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("parseBytes(%q) = %v, %v, want %v, nil", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"", "M", "1MB", "1k", "1KiB", "10%", "-1", "8E", "99999999999999999999", "1 2", "1.2.3K"} {
		if got, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q) = %v, nil, want an error", in, got)
		}
	}
}

func TestParsePercent(t *testing.T) {
	tests := []struct {
		in    string
		want  int
		exact bool
	}{
		{"150%", 150, true},
		{"1%", 1, true},
		{"12.5%", 13, false},
		{"12.4%", 12, false},
		{"0.1%", 1, false},
		{"0%", 0, true},
		{"100.0%", 100, true},
	}
	for _, tt := range tests {
		got, exact, err := parsePercent(tt.in)
		if err != nil || got != tt.want || exact != tt.exact {
			t.Errorf("parsePercent(%q) = %v, %v, %v, want %v, %v, nil", tt.in, got, exact, err, tt.want, tt.exact)
		}
	}
	for _, in := range []string{"", "%", "150", "abc%", "-5%", "1 0%", "99999999999999%"} {
		if got, _, err := parsePercent(in); err == nil {
			t.Errorf("parsePercent(%q) = %v, nil, want an error", in, got)
		}
	}
}

func TestParseBool(t *testing.T) {
	for _, in := range []string{"1", "yes", "y", "true", "t", "on", "YES", "True", "ON"} {
		if got, err := parseBool(in); err != nil || !got {
			t.Errorf("parseBool(%q) = %v, %v, want true, nil", in, got, err)
		}
	}
	for _, in := range []string{"0", "no", "n", "false", "f", "off", "No", "FALSE"} {
		if got, err := parseBool(in); err != nil || got {
			t.Errorf("parseBool(%q) = %v, %v, want false, nil", in, got, err)
		}
	}
	for _, in := range []string{"", "2", "maybe", "enabled"} {
		if _, err := parseBool(in); err == nil {
			t.Errorf("parseBool(%q) = nil error, want an error", in)
		}
	}
}

func TestParseSignal(t *testing.T) {
	tests := []struct{ in, want string }{
		{"SIGTERM", "SIGTERM"},
		{"TERM", "SIGTERM"},
		{"15", "SIGTERM"},
		{"9", "SIGKILL"},
		{"SIGPOLL", "SIGIO"},
		{"SIGRTMIN", "SIGRTMIN"},
		{"RTMIN+2", "SIGRTMIN+2"},
		{"SIGRTMAX-1", "SIGRTMAX-1"},
	}
	for _, tt := range tests {
		if got, err := parseSignal(tt.in); err != nil || got != tt.want {
			t.Errorf("parseSignal(%q) = %q, %v, want %q, nil", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"", "0", "32", "-1", "SIGFOO", "term", "SIGRTMIN+31", "SIGRTMIN+01", "SIGRTMIN+-1"} {
		if got, err := parseSignal(in); err == nil {
			t.Errorf("parseSignal(%q) = %q, nil, want an error", in, got)
		}
	}
	if _, err := parseSignal("sigkill"); err == nil || !strings.Contains(err.Error(), "did you mean SIGKILL?") {
		t.Errorf("parseSignal(%q) = %v, want an error suggesting SIGKILL", "sigkill", err)
	}
}
