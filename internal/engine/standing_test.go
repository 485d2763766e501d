package engine

import (
	"slices"
	"testing"

	"github.com/flotilla/flotilla/internal/unit"
)

// TestPendingRangeIndex: a range finds its instances by name, as
// unit.RangeName formats them, and nothing else.
func TestPendingRangeIndex(t *testing.T) {
	for _, r := range []unit.Range{{From: 1, To: 300}, {From: 0, To: 99, Width: 3}, {From: 95, To: 1005, Width: 4}, {From: 7, To: 7}} {
		pr := newPendingRange("k", "web@.service", r)
		for i := range r.Len() {
			name := unit.RangeName("web@.service", r, i)
			if got, ok := pr.index(name); !ok || got != i {
				t.Errorf("%v: index(%s) = %d, %v; want %d", r, name, got, ok, i)
			}
		}
		for _, name := range []string{"web@.service", "web@x.service", "web@+1.service", "web@-1.service", "db@1.service",
			"web@1.socket", "web@00001.service", "web@1000000.service", "web@99999999999999999999999.service", "web@6.service.service"} {
			if i, ok := pr.index(name); ok && unit.RangeName("web@.service", r, i) != name {
				t.Errorf("%v: index(%s) = %d, but that instance is %s", r, name, i, unit.RangeName("web@.service", r, i))
			}
		}
	}
}

// TestStanding: a range stands for an instance until another range takes
// it or its record is written; each range counts what it stands for and
// names it.
func TestStanding(t *testing.T) {
	s := standing{}
	a := newPendingRange("a", "web@.service", unit.Range{From: 1, To: 100})
	b := newPendingRange("b", "web@.service", unit.Range{From: 51, To: 150})
	other := newPendingRange("c", "db@.service", unit.Range{From: 1, To: 100})
	for _, pr := range []*pendingRange{a, b, other} {
		s.add(pr)
	}
	for i := range 100 {
		s.stand(a, unit.RangeName("web@.service", a.r, i))
		s.stand(other, unit.RangeName("db@.service", other.r, i))
	}
	for i := range 100 {
		s.stand(b, unit.RangeName("web@.service", b.r, i))
	}
	if a.left != 50 || b.left != 100 || other.left != 100 || s.count() != 250 {
		t.Fatalf("left a %d b %d other %d count %d, want 50 100 100 250", a.left, b.left, other.left, s.count())
	}
	s.written("web@60.service")
	s.written("web@10.service")
	s.written("db@10.service")
	s.written("web.service")
	if pr, _ := s.of("web@60.service"); pr != nil {
		t.Errorf("web@60 written, still stood for by %s", pr.key)
	}
	if pr, _ := s.of("web@11.service"); pr != a {
		t.Errorf("web@11 stood for by %v, want a", pr)
	}
	names := slices.Collect(a.names(a.template()))
	if len(names) != 49 || names[0] != "web@1.service" || names[9] != "web@11.service" || names[48] != "web@50.service" {
		t.Errorf("a names %d: %v", len(names), names)
	}
	s.remove(a)
	if pr, _ := s.of("web@11.service"); pr != nil {
		t.Errorf("a removed, web@11 stood for by %s", pr.key)
	}
	if s.count() != 99+99 {
		t.Errorf("count %d after a's removal, want b's 99 and other's 99", s.count())
	}
}
