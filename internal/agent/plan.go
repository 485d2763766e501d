package agent

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/flotilla/flotilla/internal/unit"
)

// want is what the leader asked of a unit.
type want struct {
	Hash   string
	State  unit.DesiredState // loaded or launched
	Global bool
	// The cut-off policy ([X-Fleet] Singleton=, LostAfter=; 0: default).
	Singleton bool
	LostAfter time.Duration
}

// have is what the agent has done with a unit.
type have struct {
	Hash    string
	Applied unit.DesiredState // loaded or launched
	Busy    bool              // an unload is in progress
	Broken  bool              // the driver refused to load it: nothing to start until it changes
}

type actionKind int

const (
	actLoad   actionKind = iota + 1 // load (or reload a changed hash) the unit
	actStart                        // start it
	actStop                         // stop it, keeping it loaded
	actUnload                       // stop and forget it (in the background)
)

func (k actionKind) String() string {
	return [...]string{"", "load", "start", "stop", "unload"}[k]
}

type action struct {
	Kind actionKind
	Name string
}

// plan is the agent's reconciler: a pure diff of what the leader wants
// against what the agent has, in a stable order (by unit). A unit whose hash changed is unloaded first; it is
// loaded again on the next pass, once the unload is done.
func plan(wants map[string]want, haves map[string]have) []action {
	return appendPlan(nil, wants, haves)
}

// appendPlan appends plan's actions to acts. reconcile hands it a slice
// kept for the next pass (actsPool): grown from nil each pass, the
// actions were a third of plan's time in a bench's agents (0.20 s of
// 0.63 s), sorting them with sort.SliceStable another third.
func appendPlan(acts []action, wants map[string]want, haves map[string]have) []action {
	for name, h := range haves {
		w, ok := wants[name]
		if h.Busy {
			continue
		}
		if !ok || w.Hash != h.Hash {
			acts = append(acts, action{actUnload, name})
		}
	}
	for name, w := range wants {
		h, ok := haves[name]
		switch {
		case ok && (h.Busy || h.Hash != w.Hash):
			continue // wait for the unload to finish
		case !ok:
			acts = append(acts, action{actLoad, name})
			if w.State == unit.Launched {
				acts = append(acts, action{actStart, name})
			}
		case h.Broken:
			continue
		case w.State == unit.Launched && h.Applied != unit.Launched:
			acts = append(acts, action{actStart, name})
		case w.State == unit.Loaded && h.Applied == unit.Launched:
			acts = append(acts, action{actStop, name})
		}
	}
	// One unit gets either an unload, or a load then a start, or one of
	// start or stop: by name, then kind, puts load before start.
	slices.SortFunc(acts, func(x, y action) int {
		if c := strings.Compare(x.Name, y.Name); c != 0 {
			return c
		}
		return cmp.Compare(x.Kind, y.Kind)
	})
	return acts
}

// actsPool keeps the slices reconcile plans into, for all the agents of a
// process: an agent holds none while it is idle.
var actsPool = sync.Pool{New: func() any { return new([]action) }}
