package registry

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Schema is the key of the schema version of a cluster's data: the layout
// of everything under the prefix, as internal/version.SchemaVersion
// numbers it. The engine leader writes it, fenced, when it takes office,
// after migrating older data (Migrate). Data without it is of schema 1
// (the releases before schema versions).
func (k Keys) Schema() string { return k.p() + "config/schema" }

// PutSchema is the op that records the data's schema version.
func PutSchema(keys Keys, v int) Op { return Op{Key: keys.Schema(), Value: strconv.Itoa(v)} }

// ErrBadSchema is wrapped by ReadSchema's error for a schema key whose
// value is not a schema version.
var ErrBadSchema = errors.New("registry: not a schema version")

// ReadSchema returns the schema version of the data under keys: the schema
// key's, or oldest when there is none. A value that is not a positive
// integer is an error naming the key and what it holds.
func ReadSchema(ctx context.Context, cli *clientv3.Client, keys Keys, oldest int) (int, error) {
	resp, err := cli.Get(ctx, keys.Schema())
	if err != nil {
		return 0, fmt.Errorf("registry: read %s: %w", keys.Schema(), err)
	}
	if len(resp.Kvs) == 0 {
		return oldest, nil
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(resp.Kvs[0].Value)))
	if err != nil || v < 1 {
		return 0, fmt.Errorf("%w: %s holds %q, not a schema version (a positive integer)", ErrBadSchema, keys.Schema(), resp.Kvs[0].Value)
	}
	return v, nil
}

// A Migration is one step of the data's schema, from From to From+1: Ops
// reads what it needs (through cli, under keys) and returns the writes
// that bring the data to the next schema. Migrate commits them, then the
// new schema version in a transaction of its own, so a step must be
// idempotent: a leader deposed between the two leaves the step to the
// next one, which runs it again. Steps run before the leader loads the
// record, and the record a candidate followed (Follower) sees their
// writes like any other.
type Migration struct {
	From int
	// What says what the step does, for the leader's log.
	What string
	Ops  func(ctx context.Context, cli *clientv3.Client, keys Keys) ([]Op, error)
}

// Migrations are the steps from the oldest schema, in order.
var Migrations = []Migration{
	{From: 1, What: "record the schema version (schema 2 is the layout of schema 1 with this key)",
		Ops: func(context.Context, *clientv3.Client, Keys) ([]Op, error) { return nil, nil }},
}

// Migrate brings the data under keys from schema from to schema to, one
// step of steps at a time, committing each step's writes and then its new
// version through commit (the leader's fenced Committer); logf, if set, is
// told each step before it runs. It fails, naming the versions, when steps
// lack one between from and to.
func Migrate(ctx context.Context, cli *clientv3.Client, keys Keys, steps []Migration, from, to int, commit func(context.Context, []Op) error, logf func(m Migration)) error {
	for v := from; v < to; v++ {
		i := -1
		for j, m := range steps {
			if m.From == v {
				i = j
				break
			}
		}
		if i < 0 {
			return fmt.Errorf("registry: no migration from schema %d to %d (migrating from %d to %d)", v, v+1, from, to)
		}
		m := steps[i]
		if logf != nil {
			logf(m)
		}
		ops, err := m.Ops(ctx, cli, keys)
		if err != nil {
			return fmt.Errorf("registry: migrating from schema %d to %d (%s): %w", v, v+1, m.What, err)
		}
		if err := commit(ctx, ops); err != nil {
			return fmt.Errorf("registry: migrating from schema %d to %d (%s): %w", v, v+1, m.What, err)
		}
		if err := commit(ctx, []Op{PutSchema(keys, v+1)}); err != nil {
			return fmt.Errorf("registry: recording schema %d: %w", v+1, err)
		}
	}
	return nil
}
