//go:build !linux

package api

import "time"

// threadCPU cannot be read here: writeCost falls back on wall time.
func threadCPU() (time.Duration, bool) { return 0, false }
