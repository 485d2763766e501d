package docsrun

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Block is one fenced shell example of a Markdown file.
type Block struct {
	Line   int    // 1-based line of the opening fence
	Script string // the block's text, with the marks of its commands turned into checks
	Skip   string // why it does not run; empty if it runs
	// Interrupt: before the block, the env's flotilla dev gets SIGINT
	// (the reader's Ctrl-C) and the block runs once it has exited.
	Interrupt bool
}

// File is what a Markdown file asks of the runner.
type File struct {
	Env    string // "dev", or "" when the blocks start what they need
	Blocks []Block
}

var (
	markRe  = regexp.MustCompile(`^<!--\s*docs:\s*(\w+)\s*(.*?)\s*-->\s*$`)
	exitsRe = regexp.MustCompile(`#.*\bexits (\d+)\b`)
	heredoc = regexp.MustCompile(`<<-?\s*'?"?(\w+)'?"?`)
)

// Parse reads a Markdown file's shell blocks and marks.
func Parse(r io.Reader) (File, error) {
	var (
		f       File
		sc      = bufio.NewScanner(r)
		n       int
		in      bool   // inside a fence
		run     bool   // the fence is a shell block
		skip    string // the mark before the next fence
		intr    bool   // an interrupt mark before the next fence
		intrP   bool
		start   int
		lines   []string
		pending string
	)
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if !in {
			if m := markRe.FindStringSubmatch(trimmed); m != nil {
				switch m[1] {
				case "env":
					if m[2] != "dev" {
						return f, fmt.Errorf("line %d: unknown env %q (want dev)", n, m[2])
					}
					f.Env = m[2]
				case "interrupt":
					if f.Env != "dev" {
						return f, fmt.Errorf("line %d: an interrupt mark needs the file's env dev first", n)
					}
					intrP = true
				case "skip":
					if m[2] == "" {
						return f, fmt.Errorf("line %d: a skip mark needs a reason", n)
					}
					pending = m[2]
				default:
					return f, fmt.Errorf("line %d: unknown mark %q (want env, skip or interrupt)", n, m[1])
				}
				continue
			}
			if strings.HasPrefix(trimmed, "```") {
				in, run, start, lines = true, strings.TrimSpace(trimmed[3:]) == "sh", n, nil
				skip, pending = pending, ""
				intr, intrP = intrP, false
				continue
			}
			if trimmed != "" {
				pending, intrP = "", false // a mark belongs to the block right after it
			}
			continue
		}
		if trimmed == "```" {
			in = false
			if run {
				f.Blocks = append(f.Blocks, Block{Line: start, Script: script(lines), Skip: skip, Interrupt: intr})
			} else if skip != "" || intr {
				return f, fmt.Errorf("line %d: a mark before a block that is not sh", start)
			}
			continue
		}
		lines = append(lines, line)
	}
	if in {
		return f, fmt.Errorf("line %d: the block is never closed", start)
	}
	return f, sc.Err()
}

// script turns a block's commands that carry a mark into checks: "# exits N"
// becomes `docs_exits N cmd`, a comment naming Ctrl-C `docs_follow cmd`. A
// command is a logical line: lines joined by a trailing backslash; here-docs
// are left alone.
func script(lines []string) string {
	var (
		out   []string
		cmd   []string
		until string // the here-doc's end word
	)
	for _, l := range lines {
		if until != "" {
			out = append(out, l)
			if strings.TrimSpace(l) == until {
				until = ""
			}
			continue
		}
		cmd = append(cmd, l)
		if strings.HasSuffix(l, `\`) {
			continue
		}
		first := cmd[0]
		comment := l[commentAt(l):]
		indent := first[:len(first)-len(strings.TrimLeft(first, " \t"))]
		switch m := exitsRe.FindStringSubmatch(comment); {
		case m != nil:
			code, _ := strconv.Atoi(m[1])
			cmd[0] = fmt.Sprintf("%sdocs_exits %d %s", indent, code, strings.TrimLeft(first, " \t"))
		case strings.Contains(comment, "Ctrl-C"):
			cmd[0] = indent + "docs_follow " + strings.TrimLeft(first, " \t")
		}
		if m := heredoc.FindStringSubmatch(l); m != nil {
			until = m[1]
		}
		out = append(out, cmd...)
		cmd = nil
	}
	out = append(out, cmd...)
	return strings.Join(out, "\n") + "\n"
}

// commentAt is where a shell line's trailing comment starts (len(l) if it has
// none): a # at the start of a word, outside quotes.
func commentAt(l string) int {
	var q byte
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case q != 0:
			if c == q {
				q = 0
			} else if c == '\\' && q == '"' {
				i++
			}
		case c == '\'' || c == '"':
			q = c
		case c == '\\':
			i++
		case c == '#' && (i == 0 || l[i-1] == ' ' || l[i-1] == '\t'):
			return i
		}
	}
	return len(l)
}
