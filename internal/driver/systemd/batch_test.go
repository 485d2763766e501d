package systemddriver

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flotilla/flotilla/internal/unit"
)

// LoadBatch loads every unit it can, and gives each unit it cannot (one
// /etc overrides, one systemd refuses, one given twice) its own error.
func TestInsideLoadBatch(t *testing.T) {
	inside(t)
	if err := os.WriteFile("/etc/systemd/system/bshadow.service", []byte("[Service]\nExecStart=/bin/true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove("/etc/systemd/system/bshadow.service")
	systemctl(t, "daemon-reload")
	r := &recorder{}
	d := newDriver(t, r)
	defer closeDriver(t, d)
	text := "[Service]\nExecStart=/bin/sleep infinity\n"
	// unit.Parse refuses what systemd refuses: this file's text is changed
	// after parsing, as a systemd stricter than the parser would see it.
	bad := parse(t, "bbad.service", text)
	bad.Raw = "[Service]\nExecStart=bin/sleep infinity\n"
	files := []*unit.File{
		parse(t, "bok1.service", text), parse(t, "bshadow.service", text), bad,
		parse(t, "bok2.service", text), parse(t, "bok1.service", text), nil,
	}
	errs := d.LoadBatch(files)
	if len(errs) != len(files) {
		t.Fatalf("%d errors for %d files", len(errs), len(files))
	}
	check := func(i int, ok func(error) bool, want string) {
		t.Helper()
		if !ok(errs[i]) {
			t.Errorf("file %d: error %v, want %s", i, errs[i], want)
		}
	}
	isNil := func(err error) bool { return err == nil }
	says := func(s string) func(error) bool {
		return func(err error) bool { return err != nil && strings.Contains(err.Error(), s) }
	}
	check(0, isNil, "none")
	check(1, func(err error) bool { return errors.Is(err, ErrNotOurs) }, "ErrNotOurs")
	check(2, says("systemd could not load it"), "systemd could not load it")
	check(3, isNil, "none")
	check(4, says("twice"), "the batch holds it twice")
	check(5, says("nil unit file"), "nil unit file")
	for _, n := range []string{"bshadow.service", "bbad.service"} {
		if _, err := os.Stat("/run/systemd/system/" + n); !os.IsNotExist(err) {
			t.Errorf("the refused unit %s's file stays: %v", n, err)
		}
	}
	var got []string
	for _, s := range d.States() {
		got = append(got, fmt.Sprintf("%s %s/%s/%s %s", s.Name, s.Load, s.Active, s.Sub, s.Hash))
	}
	want := []string{
		fmt.Sprintf("bok1.service loaded/inactive/dead %s", files[0].Hash),
		fmt.Sprintf("bok2.service loaded/inactive/dead %s", files[3].Hash),
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("States = %v, want %v", got, want)
	}
	for _, n := range []string{"bok1.service", "bok2.service"} {
		if err := d.Start(n); err != nil {
			t.Fatal(err)
		}
		if s := r.wait(t, n, "active", "running", 10*time.Second); s.PID == 0 {
			t.Errorf("%s running with no PID", n)
		}
	}
	// A batch that changes a loaded unit and adds one: the changed unit
	// keeps running, and reports the new hash.
	changed := parse(t, "bok1.service", "[Service]\nExecStart=/bin/sleep 1000\n")
	for i, err := range d.LoadBatch([]*unit.File{changed, parse(t, "bok3.service", text)}) {
		if err != nil {
			t.Errorf("second batch, file %d: %v", i, err)
		}
	}
	if s := r.last("bok1.service"); s.Hash != changed.Hash || s.Active != "active" {
		t.Errorf("bok1.service after its new definition: %+v, want active with hash %s", s, changed.Hash)
	}
	if got := systemctl(t, "show", "-P", "NeedDaemonReload", "bok1.service"); got != "no" {
		t.Errorf("systemd's NeedDaemonReload of the changed unit = %s, want no (reloaded)", got)
	}
	if s := r.last("bok3.service"); s.Load != "loaded" || s.Active != "inactive" {
		t.Errorf("bok3.service: %+v, want loaded/inactive", s)
	}
}
