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
		A: difflib.SplitLines(withNewline(a)), B: difflib.SplitLines(withNewline(b)),
		FromFile: from, ToFile: to, Context: 3,
	})
	if err != nil { // only a failed write to its strings.Builder
		return ""
	}
	return d
}

func withNewline(s string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		return s + "\n"
	}
	return s
}
