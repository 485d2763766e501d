package cli

import (
	"context"
	"fmt"
	"strings"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/unit"
)

// addFollowers adds to refs, for each template among them whose file
// changes, the template's instances in the cluster that follow it (their
// file was made from the template's current one) and that refs do not
// name, each given the new file: replacing a template replaces them too,
// rolled machine by machine as any replaced unit is (replace.go). An
// instance replaced with a file of its own no longer follows.
func (e *env) addFollowers(ctx context.Context, refs []unitRef, known map[string]apiv1.Unit) ([]unitRef, error) {
	named := make(map[string]bool, len(refs))
	for _, r := range refs {
		named[r.Name] = true
	}
	for _, r := range refs {
		cur, ok := known[r.Name]
		if !unit.IsTemplate(r.Name) || r.Path == "" || !ok || !fileChanged(r, cur) {
			continue
		}
		tu, err := e.c.Unit(ctx, r.Name)
		if err != nil {
			return nil, fmt.Errorf("get template %s: %w", r.Name, err)
		}
		if refs, err = e.followers(ctx, r, tu.File, refs, named, known); err != nil {
			return nil, err
		}
	}
	return refs, nil
}

// followers appends to refs the instances of template r.Name that follow
// its file oldFile and that named does not hold, each given r's file, and
// notes them in known and named.
func (e *env) followers(ctx context.Context, r unitRef, oldFile string, refs []unitRef, named map[string]bool, known map[string]apiv1.Unit) ([]unitRef, error) {
	old, err := unit.Parse(r.Name, []byte(oldFile))
	if err != nil {
		return nil, fmt.Errorf("template %s in the cluster: %w", r.Name, err)
	}
	st, err := e.c.State(ctx, client.StateFilter{Unit: strings.Replace(r.Name, "@.", "@*.", 1)})
	if err != nil {
		return nil, err
	}
	for _, su := range st.Units {
		if named[su.Name] || !unit.IsInstance(su.Name) || unit.TemplateOf(su.Name) != r.Name {
			continue
		}
		inst, err := unit.Instantiate(old, unit.Instance(su.Name))
		if err != nil || inst.Hash != su.Hash {
			continue // a file of its own
		}
		named[su.Name] = true
		refs = append(refs, unitRef{Arg: r.Arg, Name: su.Name, Path: r.Path, File: r.File})
		known[su.Name] = apiv1.Unit{Name: su.Name, Hash: su.Hash, DesiredState: su.DesiredState, Machine: su.Machine, Global: su.Global}
	}
	return refs, nil
}
