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

// TestOverrideUpdate: overrides replace only the options they name, and
// are checked as the section is.
func TestOverrideUpdate(t *testing.T) {
	base := DefaultUpdate
	base.Canary, base.Stagger = 2, 3*time.Second
	got, err := OverrideUpdate(base, map[string]string{"MaxParallel": "4", "AutoRevert": "true"})
	want := base
	want.MaxParallel, want.AutoRevert = 4, true
	if err != nil || got != want {
		t.Fatalf("override = %+v %v, want %+v", got, err, want)
	}
	for want, opts := range map[string]map[string]string{
		"Bogus":                       {"Bogus": "1"},
		"MaxParallel":                 {"MaxParallel": "0"},
		"one line each":               {"Canary": "1\nMaxParallel=9"},
		"longer than MinHealthyTime=": {"HealthyDeadline": "1s"},
	} {
		if _, err := OverrideUpdate(base, opts); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: %v, want an error naming %q", opts, err, want)
		}
	}
}
