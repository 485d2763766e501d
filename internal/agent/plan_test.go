package agent

import (
	"reflect"
	"testing"

	"github.com/flotilla/flotilla/internal/unit"
)

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name  string
		wants map[string]want
		haves map[string]have
		want  []action
	}{
		{name: "nothing to do"},
		{
			name:  "new launched unit is loaded then started",
			wants: map[string]want{"a.service": {Hash: "h1", State: unit.Launched}},
			want:  []action{{actLoad, "a.service"}, {actStart, "a.service"}},
		},
		{
			name:  "new loaded unit is only loaded",
			wants: map[string]want{"a.service": {Hash: "h1", State: unit.Loaded}},
			want:  []action{{actLoad, "a.service"}},
		},
		{
			name:  "unit in its state is left alone (a leader change restarts nothing)",
			wants: map[string]want{"a.service": {Hash: "h1", State: unit.Launched}},
			haves: map[string]have{"a.service": {Hash: "h1", Applied: unit.Launched}},
		},
		{
			name:  "loaded unit is started",
			wants: map[string]want{"a.service": {Hash: "h1", State: unit.Launched}},
			haves: map[string]have{"a.service": {Hash: "h1", Applied: unit.Loaded}},
			want:  []action{{actStart, "a.service"}},
		},
		{
			name:  "launched unit wanted loaded is stopped",
			wants: map[string]want{"a.service": {Hash: "h1", State: unit.Loaded}},
			haves: map[string]have{"a.service": {Hash: "h1", Applied: unit.Launched}},
			want:  []action{{actStop, "a.service"}},
		},
		{
			name:  "unit no longer wanted is unloaded",
			haves: map[string]have{"a.service": {Hash: "h1", Applied: unit.Launched}},
			want:  []action{{actUnload, "a.service"}},
		},
		{
			name:  "changed hash: unload first, load on a later pass",
			wants: map[string]want{"a.service": {Hash: "h2", State: unit.Launched}},
			haves: map[string]have{"a.service": {Hash: "h1", Applied: unit.Launched}},
			want:  []action{{actUnload, "a.service"}},
		},
		{
			name:  "busy unit is waited for",
			wants: map[string]want{"a.service": {Hash: "h2", State: unit.Launched}},
			haves: map[string]have{"a.service": {Hash: "h1", Applied: unit.Launched, Busy: true}},
		},
		{
			name: "several units in name order",
			wants: map[string]want{
				"c.service": {Hash: "h", State: unit.Launched},
				"a.service": {Hash: "h", State: unit.Loaded},
			},
			haves: map[string]have{"b.service": {Hash: "h", Applied: unit.Loaded}},
			want:  []action{{actLoad, "a.service"}, {actUnload, "b.service"}, {actLoad, "c.service"}, {actStart, "c.service"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := plan(tc.wants, tc.haves)
			if !reflect.DeepEqual(got, tc.want) && (len(got) != 0 || len(tc.want) != 0) {
				t.Errorf("plan(%v, %v) = %v, want %v", tc.wants, tc.haves, got, tc.want)
			}
		})
	}
}

func TestPlanBrokenUnit(t *testing.T) {
	wants := map[string]want{"a.service": {Hash: "h1", State: unit.Launched}}
	if got := plan(wants, map[string]have{"a.service": {Hash: "h1", Applied: unit.Launched, Broken: true}}); len(got) != 0 {
		t.Errorf("plan for a unit the driver refused = %v, want nothing until its hash changes", got)
	}
	got := plan(map[string]want{"a.service": {Hash: "h2", State: unit.Launched}}, map[string]have{"a.service": {Hash: "h1", Broken: true}})
	if len(got) != 1 || got[0].Kind != actUnload {
		t.Errorf("plan for a refused unit with a new hash = %v, want an unload (then a fresh load)", got)
	}
}
