package unit

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// maxLineLength is the longest line go-systemd's parser accepts reliably
// (it rejects lines of SYSTEMD_LINE_MAX, 2048, bytes or more, depending on
// how its buffer happens to be filled; we reject them all).
const maxLineLength = 2047

// scanned is one option as scan finds it: enough to match it with go-systemd's
// output and to give it a line number.
type scanned struct {
	section, name string
	line          int
}

// scan checks the syntax of a unit file line by line, and that its sections
// are the ones Flotilla knows, and returns its options with their line
// numbers. It follows go-systemd's parser (the one Parse
// uses) where that parser is lenient, except where leniency would hide a
// mistake, which scan reports with its line: text before the first section,
// a line that is neither a section header, an option nor a comment, an
// unterminated section header, an overlong line, a stray carriage return,
// and a comment inside a continued value. It returns warnings for comments
// that a trailing backslash continues onto the next line.
func scan(data string) (opts []scanned, warnings []string, err error) {
	lines := strings.Split(data, "\n")
	section := ""
	for i := 0; i < len(lines); i++ {
		n := i + 1
		line := lines[i]
		if err := checkLine(line, n); err != nil {
			return nil, nil, err
		}
		t := strings.TrimSpace(line)
		switch {
		case t == "":
		case t[0] == '#' || t[0] == ';':
			// go-systemd continues a comment whose line ends in a backslash
			// (after dropping one trailing space); systemd no longer does.
			first := n
			for strings.HasSuffix(strings.TrimSuffix(line, " "), `\`) && i+1 < len(lines) {
				i++
				line = lines[i]
				if err := checkLine(line, i+1); err != nil {
					return nil, nil, err
				}
			}
			if i+1 > first {
				warnings = append(warnings, fmt.Sprintf("line %d: the comment ends in a backslash, so lines %d-%d are part of it", first, first+1, i+1))
			}
		case t[0] == '[':
			end := strings.IndexByte(t, ']')
			if end < 0 {
				return nil, nil, &Error{Msg: fmt.Sprintf("line %d: section header %s has no closing \"]\"", n, quote(t))}
			}
			if rest := strings.TrimSpace(t[end+1:]); rest != "" {
				return nil, nil, &Error{Msg: fmt.Sprintf("line %d: unexpected %s after section header %s", n, quote(rest), t[:end+1])}
			}
			section = t[1:end]
			if sectionIndex(section) < 0 {
				msg := fmt.Sprintf("line %d: unknown section [%s]", n, section)
				if s := suggestSection(section); s != "" {
					msg += fmt.Sprintf("; did you mean [%s]?", s)
				} else {
					msg += "; Flotilla units have [Unit], [Install], [X-Fleet] and their type's section ([Service], [Socket], [Timer], [Path], [Mount], [Automount], [Swap]; [X-Container] in services)"
				}
				return nil, nil, &Error{Msg: msg}
			}
		default:
			if section == "" {
				return nil, nil, &Error{Msg: fmt.Sprintf("line %d: %s comes before any [Section] header", n, quote(t))}
			}
			// The value keeps its trailing spaces: a backslash continues it
			// only if it is the very last character, as in go-systemd.
			name, value, ok := strings.Cut(line, "=")
			if !ok {
				return nil, nil, &Error{Msg: fmt.Sprintf("line %d: %s is not an option assignment (Name=value), a [Section] header or a comment", n, quote(t))}
			}
			name = strings.TrimSpace(name)
			if name == "" {
				return nil, nil, &Error{Msg: fmt.Sprintf("line %d: %s has no option name before \"=\"", n, quote(t))}
			}
			opts = append(opts, scanned{section: section, name: name, line: n})
			// The value continues while its lines end in a backslash; a blank
			// line ends it, as in go-systemd.
			for strings.TrimSpace(value) != "" && strings.HasSuffix(value, `\`) && i+1 < len(lines) {
				i++
				value = lines[i]
				if err := checkLine(value, i+1); err != nil {
					return nil, nil, err
				}
				if c := strings.TrimSpace(value); c != "" && (c[0] == '#' || c[0] == ';') {
					return nil, nil, &Error{Msg: fmt.Sprintf("line %d: comment inside the value of %s= continued from line %d; move the comment out of the value", i+1, name, n)}
				}
			}
		}
	}
	return opts, warnings, nil
}

// checkLine reports a line that is too long or holds a carriage return
// (Parse has turned "\r\n" line endings into "\n").
func checkLine(line string, n int) error {
	if len(line) > maxLineLength {
		return &Error{Msg: fmt.Sprintf("line %d is %d bytes long; the maximum is %d", n, len(line), maxLineLength)}
	}
	if strings.IndexByte(line, '\r') >= 0 {
		return &Error{Msg: fmt.Sprintf("line %d: carriage return not followed by a newline", n)}
	}
	return nil
}

// checkText reports unit file text that is not valid UTF-8 or holds a NUL
// byte, naming the line.
func checkText(data string) error {
	if i := strings.IndexByte(data, 0); i >= 0 {
		return &Error{Msg: fmt.Sprintf("line %d: NUL byte in unit file", 1+strings.Count(data[:i], "\n"))}
	}
	if !utf8.ValidString(data) {
		for i := 0; i < len(data); {
			r, size := utf8.DecodeRuneInString(data[i:])
			if r == utf8.RuneError && size == 1 {
				return &Error{Msg: fmt.Sprintf("line %d: unit file is not valid UTF-8", 1+strings.Count(data[:i], "\n"))}
			}
			i += size
		}
	}
	return nil
}
