package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
)

// watchUnits is list-units --watch. It prints the table list-units prints,
// then, as the cluster's event stream (GET /v1/events) tells of changes, a
// line for every row that changed, in the table's columns (kubectl get
// --watch's way): a unit that starts on a machine, changes state there,
// moves, or goes away. A row that goes away is printed once more with "-"
// for its state. With --output json it prints instead every event from now
// on as one JSON object per line (etcdctl watch's way), "reset" included.
// It ends, successfully, when ctx does (Ctrl-C).
func (e *env) watchUnits(ctx context.Context, fields []field[unitRow], full, noLegend bool) error {
	// The stream opens first: the listing read after it is at least as
	// recent as the stream's start, so applying every event to the listing
	// misses nothing (an event already in the listing changes nothing).
	stream, err := e.c.Events(ctx, "")
	if err != nil {
		return fmt.Errorf("follow the cluster's events: %w", err)
	}
	defer stream.Close()
	stream.OnRetry = func(err error, wait time.Duration) {
		fmt.Fprintf(e.errOut, "Lost the event stream (%v); reconnecting in %s\n", err, wait.Round(time.Millisecond))
	}

	var w *unitWatch
	var enc *json.Encoder
	if e.json {
		enc = json.NewEncoder(e.out)
		enc.SetEscapeHTML(false)
	} else {
		w = &unitWatch{fields: fields, full: full, out: e.out}
		if err := w.load(ctx, e.c); err != nil {
			return err
		}
		if err := w.printTable(noLegend); err != nil {
			return err
		}
	}
	for {
		ev, err := stream.Next()
		switch {
		case ctx.Err() != nil:
			return nil // interrupted: the normal end of a watch
		case errors.Is(err, client.ErrMalformedEvent):
			fmt.Fprintf(e.errOut, "Skipped an event: %v\n", err)
			continue
		case err != nil:
			return fmt.Errorf("follow the cluster's events: %w", err)
		}
		if enc != nil {
			if err := enc.Encode(ev); err != nil {
				return err
			}
			continue
		}
		if err := w.apply(ctx, e.c, ev); err != nil {
			return err
		}
	}
}

// unitWatch is what list-units --watch has printed and the cluster state it
// came from, kept up to date by events.
type unitWatch struct {
	fields []field[unitRow]
	full   bool
	out    io.Writer
	widths []int // the columns of the first table, to align later rows

	units    map[string]apiv1.Unit
	states   map[string]map[string]apiv1.UnitState // unit, then machine
	machines []apiv1.Machine
	shown    map[string][]unitRow // unit: its rows as last printed
}

// load reads the cluster as list-units does.
func (w *unitWatch) load(ctx context.Context, c *client.Client) error {
	units, err := c.Units(ctx)
	if err != nil {
		return err
	}
	states, err := c.UnitStates(ctx, client.UnitStateFilter{})
	if err != nil {
		return err
	}
	machines, err := c.Machines(ctx)
	if err != nil {
		return err
	}
	w.units = make(map[string]apiv1.Unit, len(units.Units))
	for _, u := range units.Units {
		w.units[u.Name] = u
	}
	w.states = map[string]map[string]apiv1.UnitState{}
	for _, s := range states.States {
		w.setState(s)
	}
	w.machines = machines.Machines
	return nil
}

func (w *unitWatch) setState(s apiv1.UnitState) {
	m := w.states[s.Name]
	if m == nil {
		m = map[string]apiv1.UnitState{}
		w.states[s.Name] = m
	}
	m[s.Machine] = s
}

// printTable prints the whole table, exactly as list-units does, and
// remembers its column widths.
func (w *unitWatch) printTable(noLegend bool) error {
	var units []apiv1.Unit
	for _, u := range w.units {
		units = append(units, u)
	}
	var states []apiv1.UnitState
	for _, m := range w.states {
		for _, s := range m {
			states = append(states, s)
		}
	}
	rows := unitRows(units, states, w.machines)
	w.shown = map[string][]unitRow{}
	var cells [][]string
	if !noLegend {
		legend := make([]string, len(w.fields))
		for i, f := range w.fields {
			legend[i] = strings.ToUpper(f.name)
		}
		cells = append(cells, legend)
	}
	for _, r := range rows {
		w.shown[r.Unit] = append(w.shown[r.Unit], r)
		cells = append(cells, w.cells(r))
	}
	w.widths = tabWidths(cells)
	return writeTable(w.out, w.fields, rows, w.full, noLegend)
}

func (w *unitWatch) cells(r unitRow) []string {
	out := make([]string, len(w.fields))
	for i, f := range w.fields {
		out[i] = f.value(r, w.full)
	}
	return out
}

// apply takes one event in and prints the rows it changed.
func (w *unitWatch) apply(ctx context.Context, c *client.Client, ev apiv1.Event) error {
	switch ev.Type {
	case "unit":
		if ev.Removed {
			delete(w.units, ev.Unit)
		} else {
			u := w.units[ev.Unit]
			u.Name, u.Hash, u.DesiredState, u.Machine, u.Reason, u.Global = ev.Unit, ev.Hash, ev.DesiredState, ev.Machine, ev.Reason, ev.Global
			w.units[ev.Unit] = u
		}
		return w.sync(ev.Unit)
	case "state":
		if ev.Removed {
			delete(w.states[ev.Unit], ev.Machine)
			if len(w.states[ev.Unit]) == 0 {
				delete(w.states, ev.Unit)
			}
		} else {
			s := w.states[ev.Unit][ev.Machine]
			if s.Hash == "" {
				s.Hash = w.units[ev.Unit].Hash
			}
			s.Name, s.Machine, s.Load, s.Active, s.Sub, s.Health = ev.Unit, ev.Machine, ev.Load, ev.Active, ev.Sub, ev.Health
			w.setState(s)
		}
		return w.sync(ev.Unit)
	case "machine":
		// Rows show machines' IPs: learn a new machine's.
		if ev.Removed || slices.ContainsFunc(w.machines, func(m apiv1.Machine) bool { return m.ID == ev.Machine }) {
			return nil
		}
		if l, err := c.Machines(ctx); err == nil {
			w.machines = l.Machines
		}
		return nil
	case "reset":
		// The stream lost its place (a new leader): read everything again
		// and print what differs from what was printed.
		if err := w.load(ctx, c); err != nil {
			return err
		}
		names := map[string]bool{}
		for n := range w.shown {
			names[n] = true
		}
		for n := range w.units {
			names[n] = true
		}
		for n := range w.states {
			names[n] = true
		}
		for _, n := range slices.Sorted(maps.Keys(names)) {
			if err := w.sync(n); err != nil {
				return err
			}
		}
	}
	return nil
}

// sync prints the rows of unit name that differ from what was printed.
func (w *unitWatch) sync(name string) error {
	var units []apiv1.Unit
	if u, ok := w.units[name]; ok {
		units = []apiv1.Unit{u}
	}
	var states []apiv1.UnitState
	for _, s := range w.states[name] {
		states = append(states, s)
	}
	rows := unitRows(units, states, w.machines)
	old := w.shown[name]
	var out []unitRow
	for _, r := range rows {
		i := slices.IndexFunc(old, func(o unitRow) bool { return o.Machine == r.Machine })
		if i < 0 || !slices.Equal(w.cells(old[i]), w.cells(r)) {
			out = append(out, r)
		}
	}
	unreported := slices.ContainsFunc(rows, func(r unitRow) bool { return r.Machine == "" })
	for _, o := range old {
		if slices.ContainsFunc(rows, func(r unitRow) bool { return r.Machine == o.Machine }) {
			continue
		}
		if o.Machine == "" && len(rows) > 0 || unreported {
			// The "-" row replaced by a machine's, or a machine's by the
			// "-" row of a unit no machine reports now: the new row says it.
			continue
		}
		gone := o
		gone.Load, gone.Active, gone.Sub, gone.Health = "", "", "", ""
		if !slices.Equal(w.cells(gone), w.cells(o)) {
			out = append(out, gone)
		}
	}
	if len(rows) > 0 {
		w.shown[name] = rows
	} else {
		delete(w.shown, name)
	}
	for _, r := range out {
		if err := w.printRow(r); err != nil {
			return err
		}
	}
	return nil
}

// printRow prints one row in the columns of the first table.
func (w *unitWatch) printRow(r unitRow) error {
	var b strings.Builder
	cells := w.cells(r)
	for i, c := range cells {
		b.WriteString(c)
		if i == len(cells)-1 {
			break
		}
		b.WriteString(tabPadding(utf8.RuneCountInString(c), w.widths[i]))
	}
	b.WriteByte('\n')
	_, err := io.WriteString(w.out, b.String())
	return err
}

// writeTable's tabwriter: tab width 8, padding 1, padded with tabs.
const tabWidth = 8

// tabWidths returns the width of each column but the last as writeTable's
// tabwriter lays it out for these rows of cells.
func tabWidths(rows [][]string) []int {
	var widths []int
	for _, r := range rows {
		for i, c := range r {
			if i == len(r)-1 {
				break
			}
			for len(widths) <= i {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(c)+1)
		}
	}
	for i := range widths {
		widths[i] = (widths[i] + tabWidth - 1) / tabWidth * tabWidth
	}
	return widths
}

// tabPadding returns the tabs that take a cell of width n to the next
// column, at least one.
func tabPadding(n, width int) string {
	tabs := 1
	if width > n {
		tabs = (width - n + tabWidth - 1) / tabWidth
	}
	return strings.Repeat("\t", tabs)
}
