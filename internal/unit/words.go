package unit

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// word is one item of a value split with systemd's quoting rules.
type word struct {
	text string // unquoted and unescaped
	raw  string // as written in the file
}

// isSpace reports whether c separates words (systemd's WHITESPACE).
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r'
}

// SplitWords splits s into words with systemd's quoting rules (see
// systemd.syntax(7)), as used by Exec*= and Environment=: words are separated
// by unquoted whitespace; double or single quotes group text and may open
// anywhere in a word (a"b c" is the word "ab c"); C-style escapes (\n, \t, \\, \", \', \s,
// \xNN, \NNN octal, \uNNNN, \UNNNNNNNN) are decoded inside and outside quotes.
// A lone "\;" is the word ";". Unknown escapes, NUL characters, a trailing
// backslash and unterminated quotes are errors.
//
// Drivers can use it to split "$FOO" references the way systemd does.
func SplitWords(s string) ([]string, error) {
	ws, err := splitWords(s)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.text
	}
	return out, nil
}

// splitWords is SplitWords keeping each word's raw text, which Exec*= needs
// to tell a separating ";" from a quoted one.
func splitWords(s string) ([]word, error) {
	var words []word
	i := 0
	for {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i == len(s) {
			return words, nil
		}
		start := i
		if strings.HasPrefix(s[i:], `\;`) && (i+2 == len(s) || isSpace(s[i+2])) {
			words = append(words, word{text: ";", raw: `\;`})
			i += 2
			continue
		}
		var b strings.Builder
		var q byte // the open quote, or 0
	scan:
		for i < len(s) {
			c := s[i]
			switch {
			case q == 0 && isSpace(c):
				break scan
			case q == 0 && (c == '"' || c == '\''):
				q = c
				i++
			case c == q:
				q = 0
				i++
			case c == '\\':
				n, err := unescape(&b, s[i:])
				if err != nil {
					return nil, err
				}
				i += n
			default:
				b.WriteByte(c)
				i++
			}
		}
		if q != 0 {
			return nil, fmt.Errorf("unterminated quote: %s has no closing %c", strconv.Quote(s[start:]), q)
		}
		words = append(words, word{text: b.String(), raw: s[start:i]})
	}
}

// simpleEscape returns the byte that a backslash followed by c stands for.
func simpleEscape(c byte) (byte, bool) {
	switch c {
	case 'a':
		return '\a', true
	case 'b':
		return '\b', true
	case 'f':
		return '\f', true
	case 'n':
		return '\n', true
	case 'r':
		return '\r', true
	case 't':
		return '\t', true
	case 'v':
		return '\v', true
	case 's':
		return ' ', true
	case '\\', '"', '\'':
		return c, true
	}
	return 0, false
}

// unescape decodes the escape sequence at the start of s, which begins with a
// backslash, into b. It returns the length of the sequence.
func unescape(b *strings.Builder, s string) (int, error) {
	if len(s) < 2 {
		return 0, errors.New(`trailing backslash (write \\ for a backslash)`)
	}
	if c, ok := simpleEscape(s[1]); ok {
		b.WriteByte(c)
		return 2, nil
	}
	digits := func(n, base int) (uint64, error) {
		if len(s) < 2+n {
			return 0, fmt.Errorf("incomplete escape sequence %s", strconv.Quote(s))
		}
		v, err := strconv.ParseUint(s[2:2+n], base, 32)
		if err != nil {
			return 0, fmt.Errorf("invalid escape sequence %s", strconv.Quote(s[:2+n]))
		}
		return v, nil
	}
	nul := func(n int) error {
		return fmt.Errorf("escape sequence %s is a NUL character, which is not allowed", strconv.Quote(s[:n]))
	}
	switch s[1] {
	case 'x':
		v, err := digits(2, 16)
		if err != nil {
			return 0, err
		}
		if v == 0 {
			return 0, nul(4)
		}
		b.WriteByte(byte(v))
		return 4, nil
	case 'u', 'U':
		n := 4
		if s[1] == 'U' {
			n = 8
		}
		v, err := digits(n, 16)
		if err != nil {
			return 0, err
		}
		if v == 0 {
			return 0, nul(2 + n)
		}
		if v > utf8.MaxRune || !utf8.ValidRune(rune(v)) {
			return 0, fmt.Errorf("escape sequence %s is not a valid Unicode character", strconv.Quote(s[:2+n]))
		}
		b.WriteRune(rune(v))
		return 2 + n, nil
	case '0', '1', '2', '3':
		// \NNN: exactly three octal digits; the first digit starts the number.
		if len(s) < 4 {
			return 0, fmt.Errorf("incomplete escape sequence %s", strconv.Quote(s))
		}
		v, err := strconv.ParseUint(s[1:4], 8, 8)
		if err != nil {
			return 0, fmt.Errorf("invalid escape sequence %s", strconv.Quote(s[:4]))
		}
		if v == 0 {
			return 0, nul(4)
		}
		b.WriteByte(byte(v))
		return 4, nil
	}
	_, size := utf8.DecodeRuneInString(s[1:])
	return 0, fmt.Errorf(`invalid escape sequence %s (write \\ for a backslash)`, strconv.Quote(s[:1+size]))
}

// joinContinuations turns the value of a multi-line option, as go-systemd
// returns it (each continued line ending in a backslash and a newline), into
// one line: systemd replaces each backslash-newline with a space.
func joinContinuations(v string) string {
	if !strings.Contains(v, "\n") {
		return v
	}
	v = strings.ReplaceAll(v, "\\\n", " ")
	return strings.TrimSpace(v)
}

// normalizeSpace collapses each run of whitespace outside quotes in v to one
// space and trims v, keeping quoted text and escapes as they are. It is how
// the hash ignores reformatting that does not change a value's meaning.
func normalizeSpace(v string) string {
	var b strings.Builder
	var q byte
	pending := false // whitespace seen since the last byte written
	for i := 0; i < len(v); i++ {
		c := v[i]
		if q == 0 && isSpace(c) {
			pending = true
			continue
		}
		if pending && b.Len() > 0 {
			b.WriteByte(' ')
		}
		pending = false
		switch {
		case c == '\\' && i+1 < len(v):
			b.WriteByte(c)
			i++
			c = v[i]
		case q == 0 && (c == '"' || c == '\''):
			q = c
		case c == q:
			q = 0
		}
		b.WriteByte(c)
	}
	return b.String()
}
