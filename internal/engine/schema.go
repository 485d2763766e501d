package engine

import (
	"context"
	"errors"
	"time"

	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/internal/version"
)

// The schema of the data in etcd (registry.Schema, version.SchemaVersion).
//
// A leader takes office in three steps before it loads the record: it
// reads the schema key (after winning the election, so no other engine
// writes meanwhile), refuses to lead data of a newer schema than its own,
// and migrates older data to its own schema (registry.Migrate) through its
// fenced committer. An engine that finds a newer schema resigns and does
// not campaign again until the schema is one it can lead (it reads it
// every schemaRecheck): a cluster mid-upgrade is led by its upgraded
// machines, while the others keep running their units as agents (the
// protocol window permitting). Why it does not campaign is logged, and
// Refused returns it for the API (GET /v1/status).

// schemaRecheck is how often an engine that refuses the schema in etcd
// reads it again.
var schemaRecheck = 5 * time.Second

// takeSchema checks the schema of the data in etcd, migrating older data
// to version.SchemaVersion; a *version.SchemaError when it is newer.
func (t *term) takeSchema(ctx context.Context) error {
	e := t.e
	stored, err := e.checkSchema(ctx)
	if err != nil {
		return err
	}
	e.clearRefusal()
	if stored == version.SchemaVersion {
		return nil
	}
	e.log.Info("migrating the data in etcd to this binary's schema", "from", stored, "to", version.SchemaVersion)
	commit := func(ctx context.Context, ops []registry.Op) error { return t.committer.Commit(ctx, ops) }
	return registry.Migrate(ctx, e.cfg.Client, t.keys, registry.Migrations, stored, version.SchemaVersion, commit, func(m registry.Migration) {
		e.log.Info("schema migration step", "from", m.From, "to", m.From+1, "what", m.What)
	})
}

// checkSchema reads the schema of the data in etcd: an error when it
// cannot, when the key is garbled (registry.ErrBadSchema) or when it is
// newer than this binary's (*version.SchemaError).
func (e *Engine) checkSchema(ctx context.Context) (int, error) {
	stored, err := registry.ReadSchema(ctx, e.cfg.Client, e.cfg.Keys, version.OldestSchema)
	if err == nil {
		err = version.CheckSchema(stored, version.Get().Short())
	}
	return stored, err
}

// refusesSchema reports whether err says the schema in etcd is one this
// engine cannot lead (not that etcd could not be read).
func refusesSchema(err error) bool {
	var se *version.SchemaError
	return errors.As(err, &se) || errors.Is(err, registry.ErrBadSchema)
}

// mayLead reports whether the engine may campaign: not while etcd holds
// data of a schema it cannot lead (it then waits schemaRecheck and says
// false). An etcd it cannot read lets it campaign: the campaign waits for
// etcd, and the term checks the schema again.
func (e *Engine) mayLead(ctx context.Context) bool {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := e.checkSchema(rctx)
	cancel()
	switch {
	case err == nil:
		e.clearRefusal()
		return true
	case ctx.Err() != nil || !refusesSchema(err):
		return true
	}
	e.refuse(err)
	sleepCtx(ctx, schemaRecheck)
	return false
}

// refuse records why the engine does not lead, and logs it when it
// changed.
func (e *Engine) refuse(err error) {
	if old := e.refused.Swap(&err); old == nil || (*old).Error() != err.Error() {
		e.log.Error("this engine does not lead; it campaigns again once it can lead the data in etcd, and runs this machine's units as an agent meanwhile", "err", err)
	}
}

func (e *Engine) clearRefusal() {
	if e.refused.Swap(nil) != nil {
		e.log.Info("the data in etcd is of a schema this engine can lead; it campaigns again")
	}
}

// Refused returns why this engine does not campaign (etcd holds data of a
// schema it cannot lead), or nil.
func (e *Engine) Refused() error {
	if p := e.refused.Load(); p != nil {
		return *p
	}
	return nil
}
