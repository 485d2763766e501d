package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	apiv1 "github.com/flotilla/flotilla/api"
)

// hasUnitType reports whether name ends in one of systemd's unit types.
func hasUnitType(name string) bool {
	switch path.Ext(name) {
	case ".service", ".socket", ".device", ".mount", ".automount", ".swap",
		".target", ".path", ".timer", ".slice", ".scope":
		return true
	}
	return false
}

// unitName turns a UNIT argument, a unit name or the path of a unit file,
// into a unit name: the base name, with ".service" added when it has no
// unit type, as fleetctl did ("hello" is hello.service).
func unitName(arg string) string {
	name := path.Base(filepath.ToSlash(arg))
	if !hasUnitType(name) {
		name += ".service"
	}
	return name
}

// templateOf returns the template of an instance unit name
// ("web@.service" for "web@1.service").
func templateOf(name string) (string, bool) {
	prefix, rest, ok := strings.Cut(name, "@")
	if !ok || prefix == "" {
		return "", false
	}
	ext := path.Ext(rest)
	if ext == "" || strings.TrimSuffix(rest, ext) == "" {
		return "", false
	}
	return prefix + "@" + ext, true
}

// unitRef is a UNIT argument resolved to a unit.
type unitRef struct {
	Arg  string // as given
	Name string // unit name
	Path string // file File was read from; "" for a unit the cluster should know
	File string // unit file to submit, if any
}

// isPath reports whether a UNIT argument can only mean a file.
func isPath(arg string) bool {
	return strings.ContainsRune(arg, '/') || strings.ContainsRune(arg, filepath.Separator)
}

// readUnitArgs resolves the UNIT arguments of submit, load and start. An
// argument that names an existing file, or contains a "/", is a unit file
// and is read (the unit is named after its base name); for an instance such
// as dir/web@1.service that has no file, the template dir/web@.service is
// read instead. Any other argument names a unit of the cluster. Repeated
// units are resolved once; two different files for one unit are an error.
func readUnitArgs(args []string) ([]unitRef, error) {
	refs := make([]unitRef, 0, len(args))
	seen := map[string]int{}
	for _, arg := range args {
		ref, err := readUnitArg(arg)
		if err != nil {
			return nil, err
		}
		if i, ok := seen[ref.Name]; ok {
			if refs[i].Path != ref.Path {
				return nil, fmt.Errorf("%s and %s both name unit %s", refs[i].Arg, arg, ref.Name)
			}
			continue
		}
		seen[ref.Name] = len(refs)
		refs = append(refs, ref)
	}
	return refs, nil
}

func readUnitArg(arg string) (unitRef, error) {
	if arg == "" {
		return unitRef{}, errors.New("empty unit name")
	}
	candidates := []string{arg}
	if !isPath(arg) && unitName(arg) != arg {
		// "hello" may be the file hello.service.
		candidates = append(candidates, unitName(arg))
	}
	for _, p := range candidates {
		data, err := readIfExists(p)
		if err != nil {
			return unitRef{}, err
		}
		if data != nil {
			return unitRef{Arg: arg, Name: unitName(p), Path: p, File: string(data)}, nil
		}
	}
	name := unitName(arg)
	if !isPath(arg) {
		return unitRef{Arg: arg, Name: name}, nil
	}
	if tmpl, ok := templateOf(name); ok {
		p := filepath.Join(filepath.Dir(arg), tmpl)
		data, err := readIfExists(p)
		if err != nil {
			return unitRef{}, err
		}
		if data != nil {
			return unitRef{Arg: arg, Name: name, Path: p, File: string(data)}, nil
		}
		return unitRef{}, fmt.Errorf("unit file %s not found, nor its template %s", arg, p)
	}
	return unitRef{}, fmt.Errorf("unit file %s not found", arg)
}

// readIfExists returns the contents of the unit file p, or nil if there is
// no such file.
func readIfExists(p string) ([]byte, error) {
	st, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read unit file: %w", err)
	}
	if st.IsDir() {
		return nil, fmt.Errorf("read unit file: %s is a directory", p)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("read unit file: %w", err)
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("read unit file: %s is empty", p)
	}
	return data, nil
}

// nameArgs turns UNIT arguments into unit names without reading files
// (stop, unload, destroy, status...); repeated units appear once.
func nameArgs(args []string) []string {
	names := make([]string, 0, len(args))
	seen := map[string]bool{}
	for _, arg := range args {
		n := unitName(arg)
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	return names
}

// lookupNames returns the names to fetch from the cluster to complete refs:
// every unit, and the template of every instance that has no file.
func lookupNames(refs []unitRef) []string {
	var names []string
	seen := map[string]bool{}
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	for _, r := range refs {
		add(r.Name)
		if r.Path == "" {
			if tmpl, ok := templateOf(r.Name); ok {
				add(tmpl)
			}
		}
	}
	return names
}

// maxQueryNames is the most names put in one GET /v1/units query; more are
// fetched as the whole list, filtered here.
const maxQueryNames = 100

// fetchUnits returns the units of the cluster among names, by name.
func (e *env) fetchUnits(ctx context.Context, names []string) (map[string]apiv1.Unit, error) {
	var query []string
	if len(names) <= maxQueryNames {
		query = names
	}
	l, err := e.c.Units(ctx, query...)
	if err != nil {
		return nil, err
	}
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	units := make(map[string]apiv1.Unit, len(names))
	for _, u := range l.Units {
		if want[u.Name] {
			units[u.Name] = u
		}
	}
	return units, nil
}

// completeRefs gives a file to every reference of a unit the cluster does
// not know, from its template: the template unit of the cluster, else a
// template file in the current directory (fleetctl's order). known holds the
// units of lookupNames(refs).
func (e *env) completeRefs(ctx context.Context, refs []unitRef, known map[string]apiv1.Unit) error {
	templates := map[string]string{}
	var errs []error
	for i := range refs {
		r := &refs[i]
		if r.Path != "" {
			continue
		}
		if _, ok := known[r.Name]; ok {
			continue
		}
		tmpl, ok := templateOf(r.Name)
		if !ok {
			errs = append(errs, fmt.Errorf("unit %s not found: it is neither in the cluster nor a file here", r.Name))
			continue
		}
		file, ok := templates[tmpl]
		if !ok {
			var err error
			if file, err = e.templateFile(ctx, tmpl, known); err != nil {
				errs = append(errs, fmt.Errorf("unit %s not found and %w", r.Name, err))
				continue
			}
			templates[tmpl] = file
		}
		r.File = file
		r.Path = tmpl
	}
	return errors.Join(errs...)
}

func (e *env) templateFile(ctx context.Context, tmpl string, known map[string]apiv1.Unit) (string, error) {
	if _, ok := known[tmpl]; ok {
		u, err := e.c.Unit(ctx, tmpl)
		if err != nil {
			return "", fmt.Errorf("get template %s: %w", tmpl, err)
		}
		return u.File, nil
	}
	data, err := readIfExists(tmpl)
	if err != nil {
		return "", err
	}
	if data == nil {
		return "", fmt.Errorf("its template %s is neither in the cluster nor a file here", tmpl)
	}
	return string(data), nil
}
