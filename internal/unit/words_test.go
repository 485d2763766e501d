package unit

import (
	"reflect"
	"strings"
	"testing"
)

func TestSplitWords(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"   ", nil},
		{"a", []string{"a"}},
		{" a  b\tc ", []string{"a", "b", "c"}},
		{`"a b" 'c d'`, []string{"a b", "c d"}},
		{`"a 'b' c"`, []string{"a 'b' c"}},
		{`'a "b" c'`, []string{`a "b" c`}},
		{`a"b c"d`, []string{"ab cd"}},
		{`""`, []string{""}},
		{`'' x`, []string{"", "x"}},
		{`\"a\"`, []string{`"a"`}},
		{`"a\"b"`, []string{`a"b`}},
		{`'a\'b'`, []string{`a'b`}},
		{`a\\b`, []string{`a\b`}},
		{`\a\b\f\n\r\t\v\s`, []string{"\a\b\f\n\r\t\v "}},
		{`\x41\x42 \101\102`, []string{"AB", "AB"}},
		{`\u00e9 \U0001F600`, []string{"é", "😀"}},
		{`a\sb`, []string{"a b"}},
		{`\;`, []string{";"}},
		{`a \; b`, []string{"a", ";", "b"}},
		{`a ; b`, []string{"a", ";", "b"}},
		{`a\;`, nil}, // an error: "\;" is only an escape as a word of its own
		{"héllo wörld", []string{"héllo", "wörld"}},
	}
	for _, tt := range tests {
		got, err := SplitWords(tt.in)
		if tt.want == nil && tt.in == `a\;` {
			if err == nil {
				t.Errorf("SplitWords(%q) = %q, nil, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) && len(got)+len(tt.want) > 0 {
			t.Errorf("SplitWords(%q) = %q, %v, want %q, nil", tt.in, got, err, tt.want)
		}
	}
	errs := []struct{ in, want string }{
		{`"a`, "unterminated quote"},
		{`'a`, "unterminated quote"},
		{`a"b`, "unterminated quote"},
		{`\`, "trailing backslash"},
		{`a\`, "trailing backslash"},
		{`\q`, `invalid escape sequence "\\q"`},
		{`\é`, `invalid escape sequence "\\é"`},
		{`\x4`, "incomplete escape sequence"},
		{`\x4g`, "invalid escape sequence"},
		{`\x00`, "NUL character"},
		{`\000`, "NUL character"},
		{`\u0000`, "NUL character"},
		{`\400`, "invalid escape sequence"},
		{`\09x`, "invalid escape sequence"},
		{`\uD800`, "not a valid Unicode character"},
		{`\UFFFFFFFF`, "not a valid Unicode character"},
		{`\u12`, "incomplete escape sequence"},
	}
	for _, tt := range errs {
		got, err := SplitWords(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("SplitWords(%q) = %q, %v, want an error containing %q", tt.in, got, err, tt.want)
		}
	}
}

func TestSplitWordsRaw(t *testing.T) {
	words, err := splitWords(`/bin/a ; ";" \; b`)
	if err != nil {
		t.Fatalf("splitWords = %v", err)
	}
	var raw []string
	for _, w := range words {
		raw = append(raw, w.raw)
	}
	if want := []string{"/bin/a", ";", `";"`, `\;`, "b"}; !reflect.DeepEqual(raw, want) {
		t.Errorf("splitWords raw = %q, want %q", raw, want)
	}
}

func TestNormalizeSpace(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"  a   b  ", "a b"},
		{"a\t\tb", "a b"},
		{`a "b   c"  d`, `a "b   c" d`},
		{`a 'b   c'  d`, `a 'b   c' d`},
		{`a\  b`, `a\  b`},
		{`"a\"  b"   c`, `"a\"  b" c`},
	}
	for _, tt := range tests {
		if got := normalizeSpace(tt.in); got != tt.want {
			t.Errorf("normalizeSpace(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
