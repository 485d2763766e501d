package unit

import (
	"strings"
	"testing"
	"time"
)

// TestUpdateSection: [X-Update] parses with its defaults filled, and bad
// values are refused naming the option.
func TestUpdateSection(t *testing.T) {
	f, err := Parse("web@.service", []byte("[Service]\nExecStart=/bin/true\n[X-Update]\nMaxParallel=2\nCanary=1\nAutoRevert=yes\nMinHealthyTime=2s\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultUpdate
	want.MaxParallel, want.Canary, want.AutoRevert, want.MinHealthyTime = 2, 1, true, 2*time.Second
	if got := UpdateOf(f); got != want {
		t.Fatalf("update = %+v, want %+v", got, want)
	}
	if got := UpdateOf(&File{}); got != DefaultUpdate {
		t.Fatalf("no section: %+v", got)
	}
	for text, msg := range map[string]string{
		"MaxParallel=0":                          "MaxParallel",
		"Canary=-1":                              "Canary",
		"AutoRevert=maybe":                       "AutoRevert",
		"MinHealthyTime=1m\nHealthyDeadline=30s": "must be longer than MinHealthyTime=1m0s",
		"Parallel=2":                             "Parallel",
		"MinHealthyTime=infinity":                "finite",
	} {
		_, err := Parse("web@.service", []byte("[Service]\nExecStart=/bin/true\n[X-Update]\n"+text+"\n"))
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v, want an error naming %q", text, err, msg)
		}
	}
	if _, err := Parse("t.timer", []byte("[Timer]\nOnCalendar=daily\n[X-Update]\nMaxParallel=2\n")); err == nil {
		t.Error("[X-Update] in a timer accepted")
	}
}
