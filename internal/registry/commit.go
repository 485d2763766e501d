package registry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// ErrFenced means a write was refused because the writer no longer holds
// the election: another engine leads now.
var ErrFenced = errors.New("registry: not the leader any more (write fenced)")

// ErrPartial means a request too large for one transaction failed after
// some of its transactions had landed: etcd holds part of it.
var ErrPartial = errors.New("registry: a write split over several transactions landed in part")

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
// Concurrent Commit calls are coalesced: while transactions are in flight,
// the ops of every waiting call are gathered into the next ones, up to
// MaxOps ops and MaxBytes bytes per transaction (etcd's --max-txn-ops and
// --max-request-bytes), and up to InFlight transactions are sent at once.
// Thousands of changes thus cost tens of transactions and, with etcd far
// away, a few round trips.
type Committer struct {
	kv         txnSender   // the client's connection (txn)
	fence      *pb.Compare // made once: clientv3.Cmp's getters may write
	maxOps     int
	maxBytes   int
	reqs       chan *commitReq
	observe    func(time.Duration)
	inFlight   int
	txnTimeout time.Duration
	rev        atomic.Int64 // revision of the last successful transaction
}

type commitReq struct {
	ops  []Op
	done chan error

	mu        sync.Mutex
	remaining int   // transactions not yet answered
	landed    int   // transactions that succeeded
	err       error // the first failure
}

// CommitterConfig configures a Committer.
type CommitterConfig struct {
	// MaxOps is the most ops in one transaction; default 128 (etcd's default
	// --max-txn-ops).
	MaxOps int
	// MaxBytes bounds one transaction's payload; default 1 MiB (etcd's
	// default --max-request-bytes is 1.5 MiB).
	MaxBytes int
	// InFlight is how many transactions may be in flight at once (default
	// 8): with etcd far away, throughput is InFlight×MaxOps per round trip.
	InFlight int
	// TxnTimeout bounds one transaction (default 10s).
	TxnTimeout time.Duration
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
	if cfg.InFlight <= 0 {
		cfg.InFlight = 8
	}
	if cfg.TxnTimeout <= 0 {
		cfg.TxnTimeout = 10 * time.Second
	}
	return &Committer{kv: kvClientOf(cli), fence: fence.GetCompare(), maxOps: cfg.MaxOps, maxBytes: cfg.MaxBytes, observe: cfg.Observe, inFlight: cfg.InFlight, txnTimeout: cfg.TxnTimeout, reqs: make(chan *commitReq, 1024)}
}

// kvClientOf returns the transaction sender on cli's gRPC connection or,
// for a client without one (an in-process etcd behind
// clientv3.NewCtxClient, internal/memetcd), through the KV client its KV
// gives. None (ok false) for no client (a test's core that never commits).
func kvClientOf(cli *clientv3.Client) txnSender {
	if cli == nil {
		return txnSender{}
	}
	if conn := cli.ActiveConnection(); conn != nil {
		return txnSender{conn: conn, codec: newTxnOutcomeCodec()}
	}
	if kv, ok := cli.KV.(interface{ KVClient() pb.KVClient }); ok {
		return txnSender{kv: kv.KVClient()}
	}
	return txnSender{}
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

// Confirm checks through etcd's consensus that the fence still holds,
// bounded by the transaction timeout: nil when it does, ErrFenced when
// another writer leads, etcd's error when etcd did not answer. A leader
// acknowledges a request that changes nothing only after Confirm, so a
// deposed leader cannot acknowledge it from memory.
//
// The transaction reads the fenced key besides comparing it: a transaction
// without a linearizable read or a write is answered by the etcd member
// that receives it from its own copy, and a member cut off from its quorum
// would confirm a fence the others have already deleted
// (TestConfirmNeedsQuorum).
func (c *Committer) Confirm(ctx context.Context) error {
	get := &pb.RangeRequest{Key: c.fence.Key, CountOnly: true}
	return c.txn(ctx, []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: get}}})
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
		pending = c.flush(ctx, pending)
	}
}

// txnPlan is one transaction to send and the requests it carries (part of).
// It holds the requests' ops, runs of them: they become etcd's ops only
// when the transaction is sent. An etcd op is 248 bytes and copies its key
// and value; made for a whole flush, the 160,000 ops of a slice of a
// million-unit start held about 64 MB until the last transaction answered,
// while the next slice was prepared beside them.
type txnPlan struct {
	runs  [][]Op
	n     int // ops in runs
	bytes int
	parts []*commitReq
}

// requestOps returns the plan's ops as etcd's protobuf requests, made in a
// few allocations whatever their number, and sharing the ops' keys and
// values (marshalling only reads them). Through clientv3.Op each op was
// three copies (its own key and value, the Op, then the request the
// transaction converts it to): 790 MB, 15% of what the leader allocated
// starting a million units.
func (p *txnPlan) requestOps() []*pb.RequestOp {
	puts := 0
	for _, run := range p.runs {
		for _, o := range run {
			if !o.Delete {
				puts++
			}
		}
	}
	reqs := make([]pb.RequestOp, p.n)
	out := make([]*pb.RequestOp, p.n)
	putReqs := make([]pb.PutRequest, puts)
	putOps := make([]pb.RequestOp_RequestPut, puts)
	i, j := 0, 0
	for _, run := range p.runs {
		for _, o := range run {
			if o.Delete {
				reqs[i].Request = &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: bytesOf(o.Key)}}
			} else {
				putReqs[j].Key, putReqs[j].Value = bytesOf(o.Key), bytesOf(o.Value)
				putOps[j].RequestPut = &putReqs[j]
				reqs[i].Request = &putOps[j]
				j++
			}
			out[i] = &reqs[i]
			i++
		}
	}
	return out
}

// bytesOf returns s's bytes without copying them, for requests that are
// only read (marshalled). Nothing may write to them.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// flush packs pending requests into transactions and sends them, up to
// InFlight at a time, and returns once all are answered. A request that
// fits in one transaction is never split (it is atomic); a larger one is
// split and fails whole if any part fails. A request writing a key another
// request of this flush writes waits for the next flush, so that requests
// touching the same key are applied in order.
func (c *Committer) flush(ctx context.Context, pending []*commitReq) (later []*commitReq) {
	// The keys written so far, to hold back a request writing one again:
	// only when there are several requests (a request writes each key
	// once), as a pass placing a million units commits them 160,000 ops a
	// request, one request a flush, and the map was a tenth of what the
	// leader allocated.
	var keys map[string]bool
	if len(pending) > 1 {
		keys = map[string]bool{}
	}
	plans, later := c.pack(pending, keys)
	var wg sync.WaitGroup
	sem := make(chan struct{}, c.inFlight)
	for _, p := range plans {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			// A transaction all of whose requests have already failed is
			// not sent: a large request that failed (fenced, etcd slow or
			// gone, the leader stepping down) stops loading etcd at once
			// instead of sending its remaining transactions.
			err := failedAll(p.parts)
			if err == nil {
				err = c.txn(ctx, p.requestOps())
			}
			for _, r := range p.parts {
				r.finish(err)
			}
		}()
	}
	wg.Wait()
	return later
}

// pack packs pending requests into transactions of at most maxOps ops and
// maxBytes bytes (a single larger op goes alone), in order, keeping whole
// each request that fits in one. With keys non-nil, a request writing a key
// an earlier one wrote is left for later.
func (c *Committer) pack(pending []*commitReq, keys map[string]bool) (plans []*txnPlan, later []*commitReq) {
	cur := &txnPlan{}
	closeCur := func() {
		if cur.n > 0 {
			plans = append(plans, cur)
			cur = &txnPlan{}
		}
	}
	for _, r := range pending {
		if keys != nil {
			if touchesAny(keys, r.ops) {
				later = append(later, r)
				continue
			}
			for _, o := range r.ops {
				keys[o.Key] = true
			}
		}
		size := opsSize(r.ops)
		if cur.n+len(r.ops) > c.maxOps || cur.bytes+size > c.maxBytes {
			closeCur() // keep a request that fits in one transaction whole
		}
		for k := 0; k < len(r.ops); {
			// The longest run of r's ops from k that fits in cur.
			j := k
			for j < len(r.ops) && cur.n+(j-k) < c.maxOps && (cur.n+(j-k) == 0 || cur.bytes+r.ops[j].size() <= c.maxBytes) {
				cur.bytes += r.ops[j].size()
				j++
			}
			if j == k {
				closeCur()
				continue
			}
			cur.runs = append(cur.runs, r.ops[k:j])
			cur.n += j - k
			cur.parts = append(cur.parts, r)
			r.remaining++
			k = j
		}
	}
	closeCur()
	return plans, later
}

// failedAll returns the first error of the requests when every one of them
// has already failed, nil otherwise.
func failedAll(rs []*commitReq) error {
	var first error
	for _, r := range rs {
		r.mu.Lock()
		err := r.err
		r.mu.Unlock()
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// finish records one transaction's outcome for the request and answers the
// caller when it was the last.
func (r *commitReq) finish(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil && r.err == nil {
		r.err = err
	}
	if err == nil {
		r.landed++
	}
	r.remaining--
	if r.remaining == 0 {
		if r.err != nil && r.landed > 0 && !errors.Is(r.err, ErrFenced) {
			r.err = fmt.Errorf("%w: %w", ErrPartial, r.err)
		}
		r.done <- r.err
	}
}

func (c *Committer) txn(ctx context.Context, ops []*pb.RequestOp) error {
	if !c.kv.ok() {
		return errors.New("registry: etcd write: the etcd client has no connection to write on")
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, c.txnTimeout)
	defer cancel()
	// The request goes out on the client's own connection, with its
	// interceptors (authentication, retry of requests never sent) and the
	// call options its Txn would use; only clientv3's Op is left out
	// (requestOps).
	resp, err := c.kv.txn(ctx, &pb.TxnRequest{Compare: []*pb.Compare{c.fence}, Success: ops},
		grpc.WaitForReady(true), grpc.MaxCallSendMsgSize(math.MaxInt32), grpc.MaxCallRecvMsgSize(math.MaxInt32))
	if err != nil {
		err = clientv3.ContextError(ctx, err)
	}
	if c.observe != nil {
		c.observe(time.Since(start))
	}
	if err != nil {
		return fmt.Errorf("registry: etcd write: %w", err)
	}
	if !resp.succeeded {
		return ErrFenced
	}
	for {
		cur := c.rev.Load()
		if resp.revision <= cur || c.rev.CompareAndSwap(cur, resp.revision) {
			break
		}
	}
	return nil
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
