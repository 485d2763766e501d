package service

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/flotilla/flotilla/internal/unit"
)

// DefaultPath is the PATH systemd gives to services.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Environ is an ordered environment in which a later assignment of a name
// replaces an earlier one in place.
type Environ struct {
	names []string
	vals  map[string]string
}

// NewEnviron is an empty environment.
func NewEnviron() *Environ { return &Environ{vals: make(map[string]string)} }

// Set assigns name=value.
func (e *Environ) Set(name, value string) {
	if _, ok := e.vals[name]; !ok {
		e.names = append(e.names, name)
	}
	e.vals[name] = value
}

// Add assigns each "NAME=value" entry in order; entries without "=" or with
// an empty name are skipped.
func (e *Environ) Add(assignments []string) {
	for _, kv := range assignments {
		name, value, ok := strings.Cut(kv, "=")
		if ok && name != "" {
			e.Set(name, value)
		}
	}
}

// Get is the value of name and whether it is set.
func (e *Environ) Get(name string) (string, bool) {
	v, ok := e.vals[name]
	return v, ok
}

// List is the environment as "NAME=value" entries for exec.
func (e *Environ) List() []string {
	out := make([]string, 0, len(e.names))
	for _, n := range e.names {
		out = append(out, n+"="+e.vals[n])
	}
	return out
}

// Environment returns the environment a unit's processes get beyond the
// driver's base: Environment= in file order, then each EnvironmentFile= in
// order (read now, refused unless a regular file of at most 1 MiB; a missing
// one is an error unless it has the "-" prefix, as is one inside hidden), a
// later assignment winning.
func Environment(svc *unit.Service, hidden ...string) ([]string, error) {
	env, err := UnitEnviron(nil, svc, hidden...)
	if err != nil {
		return nil, err
	}
	return env.List(), nil
}

// UnitEnviron builds a process's environment as systemd does: the base
// (PATH, HOME, and USER/LOGNAME when User= is set), then Environment= in file
// order, then each EnvironmentFile= in order; a later assignment wins. A
// missing EnvironmentFile= is an error unless it was marked optional ("-"),
// as is one inside hidden (the driver's Inaccessible paths), which the driver, reading
// it as itself, would otherwise hand to the unit.
func UnitEnviron(base []string, svc *unit.Service, hidden ...string) (*Environ, error) {
	env := NewEnviron()
	env.Add(base)
	env.Add(svc.Environment)
	for _, ef := range svc.EnvironmentFiles {
		data, err := readEnvFile(ef.Path, hidden...)
		if err != nil {
			if ef.Optional && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("EnvironmentFile=: %w", err)
		}
		env.Add(parseEnvFile(data))
	}
	return env, nil
}

// maxEnvFileBytes bounds an EnvironmentFile=: a larger file is refused.
const maxEnvFileBytes = 1 << 20

// readEnvFile reads an EnvironmentFile= without ever blocking or reading
// without end: it is opened non-blocking (so a FIFO without a writer does not
// wedge the unit), must be a regular file (not a FIFO, a device such as
// /dev/zero, a socket or a directory), at most maxEnvFileBytes long, and,
// as opened (symbolic links followed), not inside any of hidden. Every
// error names the path.
func readEnvFile(path string, hidden ...string) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		syscall.Close(fd)
		return nil, fmt.Errorf("%s is %s, not a regular file", path, fileKind(st.Mode))
	}
	if len(hidden) > 0 {
		// The file opened, not the name: a link swapped since is no way in.
		real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		if h := HiddenBy(real, hidden); err != nil || h != "" {
			syscall.Close(fd)
			return nil, fmt.Errorf("%s is inside %s, which Flotilla keeps from every unit", path, cmp.Or(h, "a hidden path"))
		}
	}
	if st.Size > maxEnvFileBytes {
		syscall.Close(fd)
		return nil, fmt.Errorf("%s is %d bytes, over the limit of %d", path, st.Size, maxEnvFileBytes)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxEnvFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxEnvFileBytes {
		return nil, fmt.Errorf("%s grew past the limit of %d bytes while being read", path, maxEnvFileBytes)
	}
	return data, nil
}

// fileKind names the type of file in a stat mode, for errors.
func fileKind(mode uint32) string {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFIFO:
		return "a FIFO"
	case syscall.S_IFCHR:
		return "a character device"
	case syscall.S_IFBLK:
		return "a block device"
	case syscall.S_IFSOCK:
		return "a socket"
	case syscall.S_IFDIR:
		return "a directory"
	}
	return "a special file"
}

// ExpandArgv substitutes environment references in a command line as
// systemd does (systemd.service(5), "Command lines"):
//
//   - a word that is exactly "$NAME" is replaced by the value of NAME split
//     at whitespace (quotes group words), which gives zero or more words;
//   - "${NAME}" anywhere in a word is replaced by the exact value (empty if
//     unset), and never splits the word;
//   - "$$" is a literal "$"; "$NAME" inside a longer word is left alone.
//
// The program (argv[0]) is not expanded, as systemd does not allow it to be
// a variable.
func ExpandArgv(argv []string, env *Environ) []string {
	if len(argv) == 0 {
		return nil
	}
	out := []string{argv[0]}
	for _, w := range argv[1:] {
		if len(w) > 1 && w[0] == '$' && w[1] != '{' && w[1] != '$' {
			if v, ok := env.Get(w[1:]); ok {
				out = append(out, splitWords(v)...)
			}
			continue
		}
		out = append(out, expandWord(w, env))
	}
	return out
}

// expandWord replaces "${NAME}" by NAME's value and "$$" by "$". An
// unterminated "${" is kept as it is.
func expandWord(w string, env *Environ) string {
	if !strings.Contains(w, "$") {
		return w
	}
	var b strings.Builder
	for i := 0; i < len(w); {
		switch {
		case w[i] != '$' || i+1 == len(w):
			b.WriteByte(w[i])
			i++
		case w[i+1] == '$':
			b.WriteByte('$')
			i += 2
		case w[i+1] == '{':
			end := strings.IndexByte(w[i+2:], '}')
			if end < 0 {
				b.WriteString(w[i:])
				return b.String()
			}
			v, _ := env.Get(w[i+2 : i+2+end])
			b.WriteString(v)
			i += end + 3
		default:
			b.WriteByte('$')
			i++
		}
	}
	return b.String()
}

// splitWords splits s at whitespace; single and double quotes group words
// (and are removed), and a backslash outside single quotes takes the next
// character literally. An unterminated quote runs to the end of s.
func splitWords(s string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == '\'':
			if c == '\'' {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		case quote == '"':
			if c == '"' {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote = c
			inWord = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// parseEnvFile reads an EnvironmentFile= as systemd does: "NAME=value"
// assignments, one per line; lines starting with "#" or ";" are comments;
// whitespace around the name and before the value is dropped, and after an
// unquoted value too; values may be quoted with '...' (literal) or "..."
// (where \", \\, \`, \$ and backslash-newline are escapes); outside quotes a
// backslash takes the next character literally and a trailing backslash
// continues the line. Lines without a valid name are ignored.
func parseEnvFile(data []byte) []string {
	const (
		preKey = iota
		key
		preValue
		value
		valueEscape
		singleQuote
		doubleQuote
		doubleQuoteEscape
		comment
		commentEscape
	)
	var out []string
	var k, v []byte
	keep := 0 // length of v that trailing-whitespace trimming must not cut
	emit := func() {
		name := string(bytes.TrimRight(k, " \t"))
		if validEnvName(name) {
			out = append(out, name+"="+string(v[:keep]))
		}
		k, v, keep = k[:0], v[:0], 0
	}
	state := preKey
	for _, c := range data {
		switch state {
		case preKey:
			switch {
			case c == '#' || c == ';':
				state = comment
			case !isSpace(c) && c != '\n' && c != '\r':
				state = key
				k = append(k[:0], c)
			}
		case key:
			switch c {
			case '\n', '\r':
				state, k = preKey, k[:0]
			case '=':
				state, v, keep = preValue, v[:0], 0
			default:
				k = append(k, c)
			}
		case preValue, value:
			switch {
			case c == '\n' || c == '\r':
				emit()
				state = preKey
			case c == '\\':
				state = valueEscape
			case state == preValue && c == '\'':
				state = singleQuote
			case state == preValue && c == '"':
				state = doubleQuote
			case state == preValue && isSpace(c):
			default:
				v = append(v, c)
				if !isSpace(c) {
					keep = len(v)
				}
				state = value
			}
		case valueEscape:
			state = value
			if c != '\n' {
				v = append(v, c)
				keep = len(v)
			}
		case singleQuote:
			if c == '\'' {
				state = preValue
			} else {
				v = append(v, c)
				keep = len(v)
			}
		case doubleQuote:
			switch c {
			case '"':
				state = preValue
			case '\\':
				state = doubleQuoteEscape
			default:
				v = append(v, c)
				keep = len(v)
			}
		case doubleQuoteEscape:
			state = doubleQuote
			switch c {
			case '"', '\\', '`', '$':
				v = append(v, c)
			case '\n':
			default:
				v = append(v, '\\', c)
			}
			keep = len(v)
		case comment:
			switch c {
			case '\\':
				state = commentEscape
			case '\n', '\r':
				state = preKey
			}
		case commentEscape:
			state = comment
		}
	}
	switch state {
	case preValue, value, valueEscape, singleQuote, doubleQuote, doubleQuoteEscape:
		emit()
	}
	return out
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' }

// validEnvName reports whether s is a shell variable name, as systemd
// requires of names in environment files.
func validEnvName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// LookPath resolves a program name as systemd does: a name with a slash is
// used as it is (relative to the working directory); otherwise it is searched
// for in the unit's PATH.
func LookPath(file, path string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable %q not found in PATH %s", file, path)
}
