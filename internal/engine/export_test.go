package engine

import (
	"testing"
	"time"
)

// SetSchemaRecheck makes engines that refuse the schema in etcd read it
// again every d, for the test.
func SetSchemaRecheck(t testing.TB, d time.Duration) {
	old := schemaRecheck
	schemaRecheck = d
	t.Cleanup(func() { schemaRecheck = old })
}

// LoadedFrom says where the engine's term took its state from (term.loadedFrom), "" while it does not lead.
func (e *Engine) LoadedFrom() string {
	if t := e.leader(); t != nil {
		return t.loadedFrom
	}
	return ""
}

// SendWorkers is how many goroutines a term starts to send the agents'
// streams their messages (senders.go) before any is stuck.
func SendWorkers() int { return sendWorkers() }
