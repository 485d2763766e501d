//go:build !linux

package engine

// lowerThreadPriority does nothing where threads have no niceness of
// their own.
func lowerThreadPriority() error { return nil }
