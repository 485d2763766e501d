package registry

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrFenced means a write was refused because the writer no longer holds
// the election: another engine leads now.
var ErrFenced = errors.New("registry: not the leader any more (write fenced)")

// Op is one put or delete.
type Op struct {
	Key    string
	Value  string
	Delete bool
}

func (o Op) size() int { return len(o.Key) + len(o.Value) + 16 }

// Committer writes batches of ops in transactions fenced on one condition
// (the leader's election key still having its creation revision).
//
// Concurrent Commit calls are coalesced: while one transaction is in flight,
// the ops of every waiting call are gathered into the next ones, up to
// MaxOps ops and MaxBytes bytes per transaction (etcd's --max-txn-ops and
// --max-request-bytes). Thousands of changes thus cost tens of transactions.
type Committer struct {
	cli      *clientv3.Client
	fence    clientv3.Cmp
	maxOps   int
	maxBytes int
	reqs     chan *commitReq
	observe  func(time.Duration)
	rev      atomic.Int64 // revision of the last successful transaction
}

type commitReq struct {
	ops  []Op
	done chan error
}

// CommitterConfig configures a Committer.
type CommitterConfig struct {
	// MaxOps is the most ops in one transaction; default 128 (etcd's default
	// --max-txn-ops).
	MaxOps int
	// MaxBytes bounds one transaction's payload; default 1 MiB (etcd's
	// default --max-request-bytes is 1.5 MiB).
	MaxBytes int
	// Observe, if set, is told how long each transaction took.
	Observe func(time.Duration)
}

// NewCommitter returns a Committer whose transactions succeed only while
// fence holds. Run must be running for Commit to make progress.
func NewCommitter(cli *clientv3.Client, fence clientv3.Cmp, cfg CommitterConfig) *Committer {
	if cfg.MaxOps <= 0 {
		cfg.MaxOps = 128
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 1 << 20
	}
	return &Committer{cli: cli, fence: fence, maxOps: cfg.MaxOps, maxBytes: cfg.MaxBytes, observe: cfg.Observe, reqs: make(chan *commitReq, 1024)}
}

// Commit writes ops and returns once they are durable in etcd (nil), or
// with ErrFenced, a context error, or etcd's error. The ops of one call that
// fit in one transaction are written atomically; a larger call is split.
func (c *Committer) Commit(ctx context.Context, ops []Op) error {
	if len(ops) == 0 {
		return nil
	}
	r := &commitReq{ops: ops, done: make(chan error, 1)}
	select {
	case c.reqs <- r:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Revision returns the etcd revision of the last transaction committed (0
// before the first).
func (c *Committer) Revision() int64 { return c.rev.Load() }

// Run commits queued ops until ctx is done.
func (c *Committer) Run(ctx context.Context) {
	var pending []*commitReq
	for {
		if len(pending) == 0 {
			select {
			case r := <-c.reqs:
				pending = append(pending, r)
			case <-ctx.Done():
				return
			}
		}
	drain:
		for {
			select {
			case r := <-c.reqs:
				pending = append(pending, r)
			default:
				break drain
			}
		}
		pending = c.commitSome(ctx, pending)
	}
}

// commitSome sends one transaction holding as many whole requests from the
// head of pending as fit (at least part of the first), and returns what is
// left.
func (c *Committer) commitSome(ctx context.Context, pending []*commitReq) []*commitReq {
	var (
		ops      []clientv3.Op
		bytes    int
		finished []*commitReq
		split    bool
		keys     = map[string]bool{}
	)
	for len(pending) > 0 {
		r := pending[0]
		if len(ops) > 0 && (len(ops)+len(r.ops) > c.maxOps || bytes+opsSize(r.ops) > c.maxBytes || touchesAny(keys, r.ops)) {
			break // the next request goes whole into the next transaction
		}
		n := 0
		for n < len(r.ops) && len(ops) < c.maxOps && (len(ops) == 0 || bytes+r.ops[n].size() <= c.maxBytes) {
			ops = append(ops, toEtcd(r.ops[n]))
			keys[r.ops[n].Key] = true
			bytes += r.ops[n].size()
			n++
		}
		if n < len(r.ops) { // a request too big for one transaction: send its head
			r.ops = r.ops[n:]
			split = true
			break
		}
		finished = append(finished, r)
		pending = pending[1:]
	}
	err := c.txn(ctx, ops)
	for _, r := range finished {
		r.done <- err
	}
	if err != nil && split {
		// the failed ops were the head of a split request (always the only
		// request in its transaction): fail the rest of it too
		pending[0].done <- err
		pending = pending[1:]
	}
	return pending
}

func (c *Committer) txn(ctx context.Context, ops []clientv3.Op) error {
	start := time.Now()
	resp, err := c.cli.Txn(ctx).If(c.fence).Then(ops...).Commit()
	if c.observe != nil {
		c.observe(time.Since(start))
	}
	if err != nil {
		return fmt.Errorf("registry: etcd write: %w", err)
	}
	if !resp.Succeeded {
		return ErrFenced
	}
	c.rev.Store(resp.Header.Revision)
	return nil
}

func toEtcd(o Op) clientv3.Op {
	if o.Delete {
		return clientv3.OpDelete(o.Key)
	}
	return clientv3.OpPut(o.Key, o.Value)
}

// touchesAny reports whether ops write a key already in keys: etcd refuses
// a key twice in one transaction.
func touchesAny(keys map[string]bool, ops []Op) bool {
	for _, o := range ops {
		if keys[o.Key] {
			return true
		}
	}
	return false
}

func opsSize(ops []Op) int {
	n := 0
	for _, o := range ops {
		n += o.size()
	}
	return n
}
