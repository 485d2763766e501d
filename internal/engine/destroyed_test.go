package engine

import (
	"slices"
	"testing"

	"github.com/flotilla/flotilla/internal/unit"
)

// testRec is a launched unit's record.
func testRec(t testing.TB, name string) *unitRec {
	t.Helper()
	f, err := unit.Parse(name, []byte("[Service]\nExecStart=/bin/true\n"))
	if err != nil {
		t.Fatal(err)
	}
	return newTestRec(name, f, unit.Launched, "")
}

// TestDestroyedRemovals: a removal because the unit was destroyed is sent
// as destroyed; one because it moved is not; a unit made again before the
// send is not destroyed.
func TestDestroyedRemovals(t *testing.T) {
	c := newAgentConn("m1")
	c.queue("moved.service", nil)
	c.queueDestroyed("gone.service")
	c.queueDestroyed("again.service")
	c.queue("again.service", testRec(t, "again.service"))
	as := c.take(1).GetAssignments()
	slices.Sort(as.Removed)
	if !slices.Equal(as.Removed, []string{"gone.service", "moved.service"}) {
		t.Errorf("removed = %v, want gone and moved", as.Removed)
	}
	if !slices.Equal(as.Destroyed, []string{"gone.service"}) {
		t.Errorf("destroyed = %v, want gone.service alone", as.Destroyed)
	}
	if msg := c.take(2); msg != nil {
		t.Errorf("a second take sent %v, want nothing", msg)
	}
}
