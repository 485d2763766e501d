package engine

// Every test of the engine (this package's and engine_test's, one binary)
// has each state build that copies the last snapshot check every unit's
// view against one made afresh, and the loop check the term's invariants
// before each step (checkTerm).
func init() { verifyViews, checkInvariants = true, true }
