package engine

import (
	"fmt"
	"testing"
)

// While a pass applies a slice of placements, queued assignments must not
// wake the agent's sender (it would send each unit on its own); once the
// slice is applied the sender wakes once and takes them all in one message.
func TestWakeHoldSendsASliceInOneMessage(t *testing.T) {
	var hold wakeHold
	c := newAgentConn("m1")
	c.hold = &hold

	hold.start()
	for i := range 100 {
		name := fmt.Sprintf("web@%d.service", i)
		c.queue(name, testRec(t, name))
	}
	select {
	case <-c.wake:
		t.Fatal("the sender was woken while the slice was being applied")
	default:
	}
	wakeAll(hold.release())
	select {
	case <-c.wake:
	default:
		t.Fatal("the sender was not woken once the slice was applied")
	}
	msg := c.take(1)
	if n := len(msg.GetAssignments().GetUnits()); n != 100 {
		t.Fatalf("one message carries %d units, want all 100 of the slice", n)
	}

	// Without a hold, a queued assignment wakes the sender at once.
	c.queue("db.service", testRec(t, "db.service"))
	select {
	case <-c.wake:
	default:
		t.Fatal("an assignment queued outside a slice did not wake the sender")
	}
}
