package engine

import (
	"testing"

	"github.com/flotilla/flotilla/internal/unit"
)

// TestRangeNames: rangeNames makes the names unit.RangeName does.
func TestRangeNames(t *testing.T) {
	for _, c := range []struct {
		tmpl string
		r    unit.Range
	}{
		{"web@.service", unit.Range{From: 1, To: 3000}},
		{"web@.service", unit.Range{From: 0, To: 0}},
		{"db-x@.timer", unit.Range{From: 7, To: 2100, Width: 3}},
		{"a@.service", unit.Range{From: 998, To: 1002, Width: 4}},
	} {
		names := rangeNames(c.tmpl, c.r)
		if len(names) != c.r.Len() {
			t.Fatalf("%s%s: %d names, want %d", c.tmpl, c.r, len(names), c.r.Len())
		}
		for i, name := range names {
			if want := unit.RangeName(c.tmpl, c.r, i); name != want {
				t.Fatalf("%s%s: name %d is %q, want %q", c.tmpl, c.r, i, name, want)
			}
		}
	}
}
