// Package flagconfig sets the flags of cobra commands from two more places
// than the command line, as etcd and fleet do:
//
//   - environment variables: $PREFIX_<FLAG>, the flag's name in capitals with
//     '-' as '_' (FLOTILLA_DATA_DIR for --data-dir), for every flag of every
//     command, found by walking the command tree, so flags added later get
//     a variable without further work;
//   - a YAML configuration file whose keys are the flag names (data-dir:
//     /var/lib/flotilla), as etcd's --config-file.
//
// A flag given on the command line wins over its environment variable, which
// wins over the file, which wins over the flag's default. Values are parsed
// by the flags themselves, so a bad one is refused with the same message,
// prefixed by where it came from ($FLOTILLA_AGENT_TTL, or flotilla.yaml:7).
package flagconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// Sources remembers where each flag's value came from, for one run of a
// command tree.
type Sources struct {
	prefix  string
	from    map[*pflag.Flag]string // "$PREFIX_NAME" or "file:line"
	envErrs map[*pflag.Flag]error
	unknown []string // variables with the prefix that name no flag
}

// EnvName is the environment variable of flag name: prefix, '_', and the
// name in capitals with '-' as '_'.
func EnvName(prefix, name string) string {
	return prefix + "_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// New returns the Sources of commands whose environment variables start
// with prefix and '_'.
func New(prefix string) *Sources {
	return &Sources{prefix: prefix, from: map[*pflag.Flag]string{}, envErrs: map[*pflag.Flag]error{}}
}

// FromEnv sets every flag of root and of the commands under it for which
// environ (os.Environ() form, KEY=VALUE) holds $PREFIX_<FLAG>. Call it once
// the command tree is built and before root.Execute. Values the flags
// refuse are reported by Check when a command that has the flag runs; the
// flag keeps its default.
func (s *Sources) FromEnv(root *cobra.Command, environ []string) {
	prefix := s.prefix
	env := map[string]string{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(k, prefix+"_") {
			env[k] = v
		}
	}
	used := map[string]bool{}
	seen := map[*pflag.Flag]bool{}
	visit := func(f *pflag.Flag) {
		if seen[f] || f.Name == "help" {
			return
		}
		seen[f] = true
		name := EnvName(prefix, f.Name)
		v, ok := env[name]
		if !ok {
			return
		}
		used[name] = true
		if err := set(f, v, nil); err != nil {
			s.envErrs[f] = fmt.Errorf("$%s: invalid value %q for --%s: %w", name, v, f.Name, err)
			return
		}
		s.from[f] = "$" + name
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.PersistentFlags().VisitAll(visit)
		c.Flags().VisitAll(visit)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	for k := range env {
		if !used[k] {
			s.unknown = append(s.unknown, k)
		}
	}
	sort.Strings(s.unknown)
}

// Check returns the errors of the environment variables that set flags of
// cmd (not overridden on the command line), and warns on w of variables
// with the prefix that name no flag of any command.
func (s *Sources) Check(cmd *cobra.Command, w io.Writer) error {
	for _, name := range s.unknown {
		fmt.Fprintf(w, "WARNING: $%s is set but no command has a flag --%s\n", name,
			strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, s.prefix+"_"), "_", "-")))
	}
	var errs []error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err, ok := s.envErrs[f]; ok && !f.Changed {
			errs = append(errs, err)
		}
	})
	return errors.Join(errs...)
}

// LoadFile sets the flags of fs that neither the command line nor the
// environment set from the YAML file at path: a mapping whose keys are flag
// names and whose values are scalars, or lists of scalars for flags that
// take comma-separated lists. Keys in skip (such as the flag naming the
// file itself) and help are refused. An unknown key, a repeated key, or a
// value the flag refuses is an error naming the file and line.
func (s *Sources) LoadFile(fs *pflag.FlagSet, path string, skip ...string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, yamlError(err))
	}
	if len(doc.Content) == 0 {
		return nil // an empty file sets nothing
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return fmt.Errorf("%s:%d: want a mapping of flag names to values (data-dir: /var/lib/flotilla), got a %s", path, m.Line, kindName(m.Kind))
	}
	lines := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		at := fmt.Sprintf("%s:%d", path, k.Line)
		if k.Kind != yaml.ScalarNode {
			return fmt.Errorf("%s: a key must be a flag name, got a %s", at, kindName(k.Kind))
		}
		key := k.Value
		if first, ok := lines[key]; ok {
			return fmt.Errorf("%s: key %q repeats the one on line %d", at, key, first)
		}
		lines[key] = k.Line
		f := fs.Lookup(key)
		if f == nil || key == "help" || contains(skip, key) {
			return fmt.Errorf("%s: unknown key %q: keys are the flags of the command without \"--\"%s", at, key, suggest(fs, key, skip))
		}
		val, items, err := fileValue(v)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", at, key, err)
		}
		if f.Changed {
			continue // the command line wins
		}
		if from, ok := s.from[f]; ok && strings.HasPrefix(from, "$") {
			continue // so does the environment
		}
		if err := set(f, val, items); err != nil {
			return fmt.Errorf("%s: %s: invalid value %q: %w", at, key, val, err)
		}
		s.from[f] = at
	}
	return nil
}

// set sets f to v, or to items if it is not nil. A list flag (such as a
// string slice) is replaced rather than appended to, so that the command
// line can still replace it.
func set(f *pflag.Flag, v string, items []string) error {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		if items == nil {
			items = strings.Split(v, ",")
		}
		return sv.Replace(items)
	}
	if items != nil {
		v = strings.Join(items, ",")
	}
	return f.Value.Set(v)
}

// fileValue is the flag value of a YAML value: a scalar as written, or the
// items of a list of scalars (which a flag taking a comma-separated list
// gets joined by commas).
func fileValue(v *yaml.Node) (string, []string, error) {
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			return "", nil, errors.New("no value (write \"\" for an empty string)")
		}
		return v.Value, nil, nil
	case yaml.SequenceNode:
		items := make([]string, len(v.Content))
		for i, it := range v.Content {
			if it.Kind != yaml.ScalarNode {
				return "", nil, fmt.Errorf("line %d: a list holds only plain values, got a %s", it.Line, kindName(it.Kind))
			}
			items[i] = it.Value
		}
		return strings.Join(items, ","), items, nil
	}
	return "", nil, fmt.Errorf("want a value or a list of values, got a %s", kindName(v.Kind))
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.AliasNode:
		return "alias"
	}
	return "value"
}

// yamlError drops the "yaml: " prefix; the message names the line.
func yamlError(err error) error {
	return errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// suggest names the flag closest to key, if one is close.
func suggest(fs *pflag.FlagSet, key string, skip []string) string {
	best, bestD := "", 3
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" || contains(skip, f.Name) || f.Hidden {
			return
		}
		if d := distance(key, f.Name); d < bestD {
			best, bestD = f.Name, d
		}
	})
	if best == "" {
		return ""
	}
	return fmt.Sprintf("; did you mean %q?", best)
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// Print writes the flags of fs (but help and those in skip) as a YAML
// configuration file LoadFile reads back, each value followed by a comment
// saying where it came from: the command line, $PREFIX_<FLAG>, file:line,
// or the default.
func (s *Sources) Print(w io.Writer, fs *pflag.FlagSet, skip ...string) error {
	var b bytes.Buffer
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Name == "help" || contains(skip, f.Name) || f.Hidden {
			return
		}
		node := &yaml.Node{Kind: yaml.MappingNode}
		key := &yaml.Node{Kind: yaml.ScalarNode, Value: f.Name}
		var val *yaml.Node
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			val = &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
			for _, it := range sv.GetSlice() {
				val.Content = append(val.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: it})
			}
		} else {
			val = &yaml.Node{Kind: yaml.ScalarNode, Value: f.Value.String()}
			if f.Value.Type() == "string" {
				val.Style = quoteIfNeeded(f.Value.String())
			}
		}
		val.LineComment = s.origin(f)
		node.Content = []*yaml.Node{key, val}
		var out []byte
		if out, err = yaml.Marshal(node); err == nil {
			b.Write(out)
		}
	})
	if err != nil {
		return err
	}
	_, err = w.Write(b.Bytes())
	return err
}

// quoteIfNeeded quotes strings YAML would read as something else.
func quoteIfNeeded(v string) yaml.Style {
	var probe any
	if v == "" || yaml.Unmarshal([]byte(v), &probe) != nil {
		return yaml.DoubleQuotedStyle
	}
	if _, ok := probe.(string); !ok || probe != v {
		return yaml.DoubleQuotedStyle
	}
	return 0
}

func (s *Sources) origin(f *pflag.Flag) string {
	switch from, ok := s.from[f]; {
	case f.Changed:
		return "flag --" + f.Name
	case ok:
		return from
	}
	if f.DefValue == "" || f.DefValue == "[]" {
		return "default (unset)"
	}
	return "default " + strconv.Quote(f.DefValue)
}
