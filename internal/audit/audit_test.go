package audit

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRotation: the log rotates at MaxBytes, keeps Keep files, and Read
// gives back the kept records oldest first, filtered.
func TestRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(Config{Path: path, MaxBytes: 1000, Keep: 2})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for i := range 40 {
		tok := "a"
		if i%2 == 1 {
			tok = "b"
		}
		if err := l.Record(Record{Time: t0.Add(time.Duration(i) * time.Second), TokenID: tok, Method: "PUT", Route: fmt.Sprintf("/v1/units/u%d.service", i), Status: 200, Outcome: "ok"}); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	for _, name := range []string{path, path + ".1", path + ".2"} {
		fi, err := os.Stat(name)
		if err != nil || fi.Size() > 1000 || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want a file of at most 1000 bytes, mode 0600", name, fi, err)
		}
	}
	if _, err := os.Stat(path + ".3"); err == nil {
		t.Errorf("%s.3 kept, want 2 rotated files", path)
	}
	var got []string
	err = Read(path, Filter{Token: "b", Since: t0.Add(30 * time.Second)}, func(r Record) error {
		got = append(got, strings.TrimPrefix(r.Route, "/v1/units/"))
		return nil
	})
	if want := "u31.service u33.service u35.service u37.service u39.service"; err != nil || strings.Join(got, " ") != want {
		t.Errorf("Read(token b, since 30 s) = %v, %v; want %s", got, err, want)
	}
	os.WriteFile(path, []byte("not json\n"), 0o600)
	if err := Read(path, Filter{}, func(Record) error { return nil }); err == nil || !strings.Contains(err.Error(), "audit.log line 1") {
		t.Errorf("Read of a line that is no record = %v, want an error naming the file and line", err)
	}
}
