package unit

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxRangeInstances is the most instances one range names.
const MaxRangeInstances = 1_000_000

// Range is a run of numbered instances of a template, written in a unit
// name as shells write a sequence: "web@{1..1000}.service" names web@1.service
// to web@1000.service. As in bash, when either bound is written with a
// leading zero every instance is padded to the wider bound's width
// ("web@{001..100}.service": web@001.service to web@100.service).
type Range struct {
	From, To int
	// Width pads instance numbers with zeros to this many digits (0: no
	// padding).
	Width int
}

// Len is how many instances r names.
func (r Range) Len() int { return r.To - r.From + 1 }

// Instance returns the i-th instance string of r (i from 0).
func (r Range) Instance(i int) string {
	n := strconv.Itoa(r.From + i)
	if len(n) < r.Width {
		n = strings.Repeat("0", r.Width-len(n)) + n
	}
	return n
}

// String is r as written in a name: "{1..1000}".
func (r Range) String() string {
	return "{" + r.Instance(0) + ".." + r.Instance(r.Len()-1) + "}"
}

// ParseRange splits a unit name naming a range of instances,
// "web@{1..1000}.service", into its template ("web@.service") and range.
// ok is false for a name without "{" (an ordinary name); a name with one
// that is not a valid range is an error naming what is wrong.
func ParseRange(name string) (template string, r Range, ok bool, err error) {
	open := strings.IndexByte(name, '{')
	if open < 0 {
		return "", Range{}, false, nil
	}
	bad := func(why string) (string, Range, bool, error) {
		return "", Range{}, true, &Error{Unit: name, Field: "name", Msg: "a range of instances is written like \"web@{1..1000}.service\": " + why}
	}
	close := strings.IndexByte(name, '}')
	if open == 0 || name[open-1] != '@' || close < open || strings.Count(name, "{") != 1 || strings.Count(name, "}") != 1 {
		return bad("\"{FROM..TO}\" must follow the \"@\" and end the instance")
	}
	template = name[:open] + name[close+1:]
	if !IsTemplate(template) {
		return bad(fmt.Sprintf("%s is not a template name", quote(template)))
	}
	from, to, found := strings.Cut(name[open+1:close], "..")
	if !found {
		return bad("want FROM..TO between the braces")
	}
	f, err1 := strconv.Atoi(from)
	t, err2 := strconv.Atoi(to)
	if err1 != nil || err2 != nil || f < 0 || t < 0 || from[0] == '+' || to[0] == '+' {
		return bad("FROM and TO must be whole numbers of 0 or more")
	}
	if t < f {
		return bad(fmt.Sprintf("TO (%d) is below FROM (%d)", t, f))
	}
	r = Range{From: f, To: t}
	if r.Len() > MaxRangeInstances {
		return bad(fmt.Sprintf("it names %d instances; at most %d at once", r.Len(), MaxRangeInstances))
	}
	if (len(from) > 1 && from[0] == '0') || (len(to) > 1 && to[0] == '0') {
		r.Width = max(len(from), len(to))
	}
	if err := ValidateName(RangeName(template, r, r.Len()-1)); err != nil {
		return bad(err.Error())
	}
	return template, r, true, nil
}

// RangeName is the name of the i-th instance of r of template.
func RangeName(template string, r Range, i int) string {
	return Prefix(template) + "@" + r.Instance(i) + template[strings.LastIndexByte(template, '.'):]
}

// Shareable reports whether every instance of tmpl is the same unit but for
// its name: a .service template whose text has no specifier ("%"), so an
// instance's options, hash and placement do not depend on its name, and
// one parsed instance can stand for all (see Instantiate). Other types
// derive values from their names (a socket's or timer's unit to trigger).
func Shareable(tmpl *File) bool {
	return tmpl != nil && TypeOf(tmpl.Name) == "service" && !strings.Contains(tmpl.Raw, "%")
}

// Contains reports whether name is an instance of template in r.
func (r Range) Contains(template, name string) bool {
	prefix := Prefix(template) + "@"
	suffix := template[strings.LastIndexByte(template, '.'):]
	if len(name) <= len(prefix)+len(suffix) || !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, suffix) {
		return false
	}
	inst := name[len(prefix) : len(name)-len(suffix)]
	n, err := strconv.Atoi(inst)
	if err != nil || n < r.From || n > r.To || inst[0] == '+' || inst[0] == '-' {
		return false
	}
	return inst == r.Instance(n-r.From)
}
