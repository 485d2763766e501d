package unit

import (
	"strings"

	"github.com/pmezard/go-difflib/difflib"
)

// Diff returns the unified diff (3 lines of context) of unit file text a,
// labelled from, to text b, labelled to: "" when they are the same.
// go-difflib is the diff testify prints; a file is at most a few hundred
// lines, where its simple algorithm is more than fast enough.
func Diff(from, to, a, b string) string {
	d, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: lines(a), B: lines(b),
		FromFile: from, ToFile: to, Context: 3,
	})
	if err != nil { // only a failed write to its strings.Builder
		return ""
	}
	return d
}

// lines splits s into lines that each end in a newline (difflib's
// SplitLines adds an empty last line to a text that ends in one).
func lines(s string) []string {
	if s == "" {
		return nil
	}
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	l := strings.SplitAfter(s, "\n")
	return l[:len(l)-1] // the "" after the last newline
}
