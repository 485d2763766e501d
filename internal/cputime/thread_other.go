//go:build !linux

package cputime

import "time"

// Thread cannot be read here: Of falls back on wall time.
func Thread() (time.Duration, bool) { return 0, false }
