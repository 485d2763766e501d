package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// field is a column that list commands can print, named as in fleetctl's
// --fields.
type field[T any] struct {
	name  string
	value func(row T, full bool) string
}

// parseFields returns the fields of spec, a comma-separated list of names
// among all.
func parseFields[T any](spec string, all []field[T]) ([]field[T], error) {
	valid := make([]string, len(all))
	for i, f := range all {
		valid[i] = f.name
	}
	if strings.TrimSpace(spec) == "" {
		return nil, fmt.Errorf("--fields is empty: want a comma-separated list of %s", strings.Join(valid, ", "))
	}
	var fields []field[T]
next:
	for _, name := range strings.Split(spec, ",") {
		name = strings.TrimSpace(name)
		for _, f := range all {
			if f.name == name {
				fields = append(fields, f)
				continue next
			}
		}
		return nil, fmt.Errorf("invalid field %q in --fields: valid fields are %s", name, strings.Join(valid, ", "))
	}
	return fields, nil
}

// fieldNames returns the names of fields, comma-separated.
func fieldNames[T any](fields []field[T]) string {
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.name
	}
	return strings.Join(names, ",")
}

// writeTable prints rows in fleetctl's layout: tab-aligned columns under an
// upper-case legend.
func writeTable[T any](w io.Writer, fields []field[T], rows []T, full, noLegend bool) error {
	tw := tabwriter.NewWriter(w, 0, 8, 1, '\t', 0)
	cells := make([]string, len(fields))
	if !noLegend {
		for i, f := range fields {
			cells[i] = strings.ToUpper(f.name)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	for _, r := range rows {
		for i, f := range fields {
			cells[i] = f.value(r, full)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// dash shows an empty value as "-".
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shortHash is fleetctl's 7-character hash unless full.
func shortHash(h string, full bool) string {
	if h == "" {
		return "-"
	}
	if !full && len(h) > 7 {
		return h[:7]
	}
	return h
}
