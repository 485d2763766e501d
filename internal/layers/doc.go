// Package layers holds no code: its test keeps the module's layering, which
// docs/design.md draws. The daemon is wired by cmd/flotilla alone; the
// engine is reached only by what serves it (the API, the fleet API, the
// daemon); no driver imports a sibling driver except those listed with a
// reason; and nothing under the engine (agent, drivers, supervisor,
// scheduler, registry, state, unit) imports it.
package layers
