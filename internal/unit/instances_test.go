package unit

import (
	"strings"
	"testing"
)

func TestParseRange(t *testing.T) {
	for _, tc := range []struct {
		name, tmpl, first, last string
		n                       int
		err                     string
	}{
		{name: "web.service"},
		{name: "web@1.service"},
		{name: "web@{1..1000}.service", tmpl: "web@.service", first: "web@1.service", last: "web@1000.service", n: 1000},
		{name: "web@{001..100}.service", tmpl: "web@.service", first: "web@001.service", last: "web@100.service", n: 100},
		{name: "web@{0..0}.service", tmpl: "web@.service", first: "web@0.service", last: "web@0.service", n: 1},
		{name: "web@{1..1000000}.service", tmpl: "web@.service", first: "web@1.service", last: "web@1000000.service", n: 1000000},
		{name: "web@{1..1000001}.service", err: "at most 1000000"},
		{name: "web@{5..1}.service", err: "TO (1) is below FROM (5)"},
		{name: "web@{a..b}.service", err: "whole numbers"},
		{name: "web@{1-5}.service", err: "FROM..TO"},
		{name: "web{1..5}.service", err: "must follow"},
		{name: "web@x{1..5}.service", err: "must follow"},
		{name: "web@{1..5}{1..2}.service", err: "must follow"},
	} {
		tmpl, r, ok, err := ParseRange(tc.name)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseRange(%q) = %v, want an error containing %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseRange(%q) = %v", tc.name, err)
			continue
		}
		if ok != (tc.tmpl != "") {
			t.Errorf("ParseRange(%q) ok = %v", tc.name, ok)
			continue
		}
		if !ok {
			continue
		}
		if !r.Contains(tmpl, tc.first) || !r.Contains(tmpl, tc.last) || r.Contains(tmpl, "x"+tc.first) || r.Contains(tmpl, RangeName(tmpl, r, 0)+"x") {
			t.Errorf("ParseRange(%q): Contains is wrong about %s or %s", tc.name, tc.first, tc.last)
		}
		if tmpl != tc.tmpl || r.Len() != tc.n || RangeName(tmpl, r, 0) != tc.first || RangeName(tmpl, r, r.Len()-1) != tc.last {
			t.Errorf("ParseRange(%q) = %q %+v: %s..%s (%d), want %q %s..%s (%d)", tc.name, tmpl, r,
				RangeName(tmpl, r, 0), RangeName(tmpl, r, r.Len()-1), r.Len(), tc.tmpl, tc.first, tc.last, tc.n)
		}
	}
}

// TestShareable: instances of a template without specifiers differ only in
// their names, so one parsed instance stands for all.
func TestShareable(t *testing.T) {
	tmpl, err := Parse("web@.service", []byte("[Unit]\nDescription=web\n\n[Service]\nExecStart=/bin/echo %i\n\n[X-Fleet]\nConflicts=web@*.service\n"))
	if err != nil {
		t.Fatal(err)
	}
	if Shareable(tmpl) {
		t.Fatalf("Shareable(a template with %%i) = true")
	}
	tmpl, err = Parse("web@.service", []byte("[Unit]\nDescription=web\n\n[Service]\nExecStart=/bin/sleep infinity\n\n[X-Fleet]\nConflicts=web@*.service\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !Shareable(tmpl) {
		t.Fatalf("Shareable(a template without specifiers) = false")
	}
	sock, err := Parse("web@.socket", []byte("[Socket]\nListenStream=8080\n"))
	if err != nil {
		t.Fatal(err)
	}
	if Shareable(sock) {
		t.Errorf("Shareable(a socket template) = true; its instances trigger services named after them")
	}
	a, err := Instantiate(tmpl, "1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Instantiate(tmpl, "2")
	if err != nil {
		t.Fatal(err)
	}
	if a.Hash != b.Hash || a.Raw != b.Raw || a.Description != b.Description {
		t.Errorf("two instances of a shareable template differ: %s %q vs %s %q", a.Hash, a.Description, b.Hash, b.Description)
	}
}

func TestRangeContains(t *testing.T) {
	_, r, _, _ := ParseRange("web@{8..12}.service")
	_, p, _, _ := ParseRange("web@{08..12}.service")
	for _, tc := range []struct {
		name      string
		in, inPad bool
	}{
		{"web@8.service", true, false}, {"web@08.service", false, true}, {"web@12.service", true, true},
		{"web@13.service", false, false}, {"web@7.service", false, false}, {"web@+9.service", false, false},
		{"db@9.service", false, false}, {"web@9.socket", false, false}, {"web@.service", false, false},
	} {
		if got := r.Contains("web@.service", tc.name); got != tc.in {
			t.Errorf("{8..12}.Contains(%s) = %v", tc.name, got)
		}
		if got := p.Contains("web@.service", tc.name); got != tc.inPad {
			t.Errorf("{08..12}.Contains(%s) = %v", tc.name, got)
		}
	}
}
