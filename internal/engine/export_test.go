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
