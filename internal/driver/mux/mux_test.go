package mux

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flotilla/flotilla/internal/driver"
	"github.com/flotilla/flotilla/internal/driver/sim"
	"github.com/flotilla/flotilla/internal/unit"
)

func parse(t *testing.T, name, text string) *unit.File {
	t.Helper()
	f, err := unit.Parse(name, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func names(ss []unit.Status) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name+"="+s.Active)
	}
	return out
}

func TestMuxRoutesByKind(t *testing.T) {
	notify := func(unit.Status) {}
	execLike, _ := sim.New(sim.Config{Machine: "m", Notify: notify})
	dockerLike, _ := sim.New(sim.Config{Machine: "m", Notify: notify})
	m, err := New(Entry{unit.DriverExec, execLike}, Entry{unit.DriverDocker, dockerLike})
	if err != nil {
		t.Fatal(err)
	}
	if m.Kinds() != unit.DriverExec|unit.DriverDocker {
		t.Errorf("Kinds = %v", m.Kinds())
	}
	web := parse(t, "web.service", "[Service]\nExecStart=/bin/web\n")
	db := parse(t, "db.service", "[X-Container]\nImage=db:1\n")
	timer := parse(t, "t.timer", "[Timer]\nOnActiveSec=1s\n")
	for _, f := range []*unit.File{web, db} {
		if err := m.Load(f); err != nil {
			t.Fatal(err)
		}
		if err := m.Start(f.Name); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Load(timer); err == nil || !strings.Contains(err.Error(), "no driver of this machine (exec,docker) can run t.timer: it needs a machine with the systemd driver") {
		t.Errorf("Load(timer) = %v", err)
	}
	if got := names(execLike.States()); len(got) != 1 || got[0] != "web.service=active" {
		t.Errorf("exec states = %v", got)
	}
	if got := names(dockerLike.States()); len(got) != 1 || got[0] != "db.service=active" {
		t.Errorf("docker states = %v", got)
	}
	if len(m.States()) != 2 {
		t.Errorf("States = %v", names(m.States()))
	}

	// A new definition that needs the other driver moves the unit.
	web2 := parse(t, "web.service", "[X-Container]\nImage=web:2\n")
	if err := m.Load(web2); err != nil {
		t.Fatal(err)
	}
	if got := names(execLike.States()); len(got) != 0 {
		t.Errorf("exec states after web became a container = %v", got)
	}
	if err := m.Start("web.service"); err != nil {
		t.Fatal(err)
	}
	if got := names(dockerLike.States()); len(got) != 2 {
		t.Errorf("docker states = %v", got)
	}

	if err := m.Kill(context.Background(), "db.service"); err != nil {
		t.Fatal(err)
	}
	if err := m.Start("db.service"); !errors.Is(err, driver.ErrUnknownUnit) {
		t.Errorf("Start after Kill = %v, want ErrUnknownUnit", err)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestMuxAdopts(t *testing.T) {
	notify := func(unit.Status) {}
	a, _ := sim.New(sim.Config{Machine: "m", Notify: notify})
	b, _ := sim.New(sim.Config{Machine: "m", Notify: notify})
	web := parse(t, "web.service", "[Service]\nExecStart=/bin/web\n")
	if err := b.Load(web); err != nil {
		t.Fatal(err)
	}
	// The unit an earlier daemon left with the systemd driver stays there,
	// though exec comes first.
	m, err := New(Entry{unit.DriverExec, a}, Entry{unit.DriverSystemd, b})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start("web.service"); err != nil {
		t.Fatal(err)
	}
	if err := m.Load(web); err != nil {
		t.Fatal(err)
	}
	if len(a.States()) != 0 || len(b.States()) != 1 {
		t.Errorf("states: a %v, b %v", names(a.States()), names(b.States()))
	}
	if err := a.Load(web); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Entry{unit.DriverExec, a}, Entry{unit.DriverSystemd, b}); err == nil {
		t.Error("New with a unit held twice: no error")
	}
}

// recording is a sim driver that records which units the agent started.
type recording struct{ *sim.Driver }

func (recording) Started(name string) (bool, bool) { return name == "started.timer", true }

func TestMuxStartedAsksTheUnitsDriver(t *testing.T) {
	notify := func(unit.Status) {}
	execLike, _ := sim.New(sim.Config{Machine: "m", Notify: notify})
	sd, _ := sim.New(sim.Config{Machine: "m", Notify: notify})
	m, err := New(Entry{unit.DriverExec, execLike}, Entry{unit.DriverSystemd, recording{sd}})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []*unit.File{
		parse(t, "web.service", "[Service]\nExecStart=/bin/web\n"),
		parse(t, "started.timer", "[Timer]\nOnActiveSec=1s\n"),
		parse(t, "other.timer", "[Timer]\nOnActiveSec=1s\n"),
	} {
		if err := m.Load(f); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string][2]bool{
		"web.service":   {false, false}, // exec keeps no record
		"started.timer": {true, true},
		"other.timer":   {false, true},
		"unknown.timer": {false, false},
	} {
		if s, k := m.Started(name); s != want[0] || k != want[1] {
			t.Errorf("Started(%s) = %v, %v; want %v, %v", name, s, k, want[0], want[1])
		}
	}
}

// batching is a sim driver that loads in batches.
type batching struct {
	*sim.Driver
	batches [][]string
}

func (b *batching) LoadBatch(files []*unit.File) []error {
	var names []string
	errs := make([]error, len(files))
	for i, f := range files {
		names = append(names, f.Name)
		errs[i] = b.Load(f)
	}
	b.batches = append(b.batches, names)
	return errs
}

// A batch is split by driver: the one that loads in batches gets its units
// in one LoadBatch, the other a Load each; a unit no driver runs, and a
// nil file, fail alone; a unit whose new definition needs the other driver
// moves.
func TestMuxLoadBatch(t *testing.T) {
	notify := func(unit.Status) {}
	execLike, _ := sim.New(sim.Config{Machine: "m", Notify: notify})
	dockerSim, _ := sim.New(sim.Config{Machine: "m", Notify: notify})
	dockerLike := &batching{Driver: dockerSim}
	m, err := New(Entry{unit.DriverExec, execLike}, Entry{unit.DriverDocker, dockerLike})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Load(parse(t, "moved.service", "[Service]\nExecStart=/bin/web\n")); err != nil {
		t.Fatal(err)
	}
	files := []*unit.File{
		parse(t, "web.service", "[Service]\nExecStart=/bin/web\n"),
		parse(t, "db.service", "[X-Container]\nImage=db:1\n"),
		parse(t, "t.timer", "[Timer]\nOnActiveSec=1s\n"),
		nil,
		parse(t, "cache.service", "[X-Container]\nImage=cache:1\n"),
		parse(t, "moved.service", "[X-Container]\nImage=moved:2\n"),
	}
	errs := m.LoadBatch(files)
	for i, want := range []string{"", "", "no driver of this machine", "nil unit file", "", ""} {
		if got := errs[i]; (want == "") != (got == nil) || got != nil && !strings.Contains(got.Error(), want) {
			t.Errorf("file %d: error %v, want %q", i, got, want)
		}
	}
	if got := fmt.Sprint(dockerLike.batches); got != "[[db.service cache.service]]" {
		t.Errorf("batches %s, want db and cache in one (moved.service moves by Load)", got)
	}
	if got := fmt.Sprint(names(execLike.States())); got != "[web.service=inactive]" {
		t.Errorf("exec states %s", got)
	}
	if got := fmt.Sprint(names(dockerLike.States())); got != "[cache.service=inactive db.service=inactive moved.service=inactive]" {
		t.Errorf("docker states %s", got)
	}
	for _, n := range []string{"web.service", "db.service", "cache.service", "moved.service"} {
		if err := m.Start(n); err != nil {
			t.Errorf("Start(%s) after the batch: %v", n, err)
		}
	}
}
