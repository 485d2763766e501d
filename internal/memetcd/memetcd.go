// Package memetcd is an etcd kept in memory, for tests that drive the engine
// in-process (internal/engine's scripts, inside a testing/synctest bubble).
//
// It sits behind clientv3's own client (clientv3.NewCtxClient with the KV,
// Lease and Watch clients of etcd's gRPC API): the code under test is the
// code that runs against real etcd (registry.Load, registry.Committer,
// election.Campaign, registry.Follower, the schema's migrations), talking
// to a store that keeps etcd's rules: one revision per write transaction,
// multi-version reads at a revision, compares on create and mod revisions,
// versions and values, leases whose keys go when they expire, and watches
// from a past revision.
//
// Faults are injected by the test: the whole store down (no answers; leases
// do not expire meanwhile and are renewed when it comes back, as etcd does
// when it elects a raft leader again), one client cut off (etcd goes on and
// its leases expire), slow answers, and write transactions that fail before
// or after they land.
//
// Time is the process's (time.Now, timers): inside a synctest bubble it is
// the bubble's. Create a Store and its clients inside the bubble.
//
// TestLikeEtcd runs the same requests on a real etcd and on the store and
// compares the answers. What it does not do: compaction (history is kept
// whole; Compact is a no-op), request size limits, a watch cancelled for
// want of a raft leader (WithRequireLeader), periodic progress
// notifications (only RequestProgress's), fragments, auth, and more than
// one member: a store is one etcd, whole or down.
package memetcd

import (
	"bytes"
	"context"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// MaxTxnOps is the store's limit on a transaction's operations (etcd's
// default --max-txn-ops).
const MaxTxnOps = 128

// MinLeaseTTL is the shortest lease the store grants, in seconds: a
// shorter one is granted this long, as etcd does. etcd's minimum is one and
// a half election timeouts (its default, 1s) rounded up to a second.
const MinLeaseTTL = 2

// Write is one revision of the store: what a write transaction (or a
// lease's expiry) changed.
type Write struct {
	Rev    int64
	At     time.Time // when it landed
	Client string    // who wrote it; "" for a lease's expiry
	Events []Event
}

// Event is one key's change in a Write.
type Event struct {
	Delete bool
	Key    string
	Value  []byte
	Lease  int64
}

// keyValue is mvccpb.KeyValue's fields, copied freely.
type keyValue struct {
	Key                                  []byte
	Value                                []byte
	CreateRevision, ModRevision, Version int64
	Lease                                int64
}

func (kv keyValue) pb() *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: kv.Key, Value: kv.Value, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease}
}

type version struct {
	kv      keyValue
	deleted bool
}

type lease struct {
	id      int64
	ttl     int64
	expires time.Time
	timer   *time.Timer
	keys    map[string]bool
}

type watch struct {
	key, end []byte
	next     int64 // the next revision to send
	prevKV   bool
}

// Store is the in-memory etcd.
type Store struct {
	mu       sync.Mutex
	rev      int64
	keys     []string // sorted, every key ever written
	hist     map[string][]version
	leases   map[int64]*lease
	leaseID  int64
	writes   []Write
	changed  chan struct{} // closed and replaced on every change
	down     bool
	slow     time.Duration
	failNext int // write transactions that fail before landing
	lostNext int // write transactions that land but whose answers are lost
}

// New returns an empty store at revision 1, as a new etcd is.
func New() *Store {
	return &Store{rev: 1, hist: map[string][]version{}, leases: map[int64]*lease{}, changed: make(chan struct{})}
}

// bump wakes everything waiting on a change; s.mu is held.
func (s *Store) bump() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Rev is the store's current revision.
func (s *Store) Rev() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev
}

// Writes returns the writes after revision rev, oldest first.
func (s *Store) Writes(after int64) []Write {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := sort.Search(len(s.writes), func(i int) bool { return s.writes[i].Rev > after })
	return slices.Clone(s.writes[i:])
}

// SetDown takes the whole store away (true) or brings it back. While it is
// down nothing is answered and leases do not expire; when it comes back
// every lease has its full TTL again.
func (s *Store) SetDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down == down {
		return
	}
	s.down = down
	for _, l := range s.leases {
		if down {
			l.timer.Stop()
		} else {
			s.refresh(l)
		}
	}
	s.bump()
}

// SetSlow makes every request take d before the store acts on it (0: none).
// A request whose context ends meanwhile is answered with the context's
// error, and lands anyway.
func (s *Store) SetSlow(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slow = d
}

// FailWrites makes the next n write transactions fail without landing.
func (s *Store) FailWrites(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = n
}

// LoseReplies makes the next n write transactions land, and answers each
// with an error (the client cannot tell whether it landed).
func (s *Store) LoseReplies(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lostNext = n
}

// Put writes one key outside any client (a test's fixture).
func (s *Store) Put(key, value string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rev++
	w := Write{Rev: s.rev, Client: "test"}
	s.put(&w, []byte(key), []byte(value), 0)
	s.commit(w)
	return s.rev
}

// Client returns an etcd client of the store named name (Writes say who
// wrote); Cut cuts it off. Close it with its Close method.
func (s *Store) Client(ctx context.Context, name string) *Client {
	c := &conn{s: s, name: name}
	cli := clientv3.NewCtxClient(ctx)
	cli.KV = protoKV{KV: clientv3.NewKVFromKVClient(kvClient{c}, cli), raw: kvClient{c}}
	cli.Lease = clientv3.NewLeaseFromLeaseClient(leaseClient{c}, cli, 5*time.Second)
	cli.Watcher = &watcher{c: c}
	return &Client{Client: cli, c: c}
}

// protoKV is a client's KV that also gives etcd's own KV client, for
// callers that send etcd's protobuf requests on a client's connection (a
// client of the store has none): registry.Committer.
type protoKV struct {
	clientv3.KV
	raw pb.KVClient
}

// KVClient returns etcd's KV client of the store.
func (k protoKV) KVClient() pb.KVClient { return k.raw }

// Start returns a new store and a client of it named "test", both closed
// when the test ends (after what the test's later cleanups stop). Inside a
// synctest bubble call it in the bubble.
func Start(t testing.TB) (*Store, *Client) {
	t.Helper()
	s := New()
	c := s.Client(context.Background(), "test")
	t.Cleanup(func() {
		c.Close()
		s.Close()
	})
	return s, c
}

// Client is a clientv3 client of a Store.
type Client struct {
	*clientv3.Client
	c *conn
}

// Cut cuts this client off from the store (true) or joins it again: its
// requests go unanswered meanwhile, while the store goes on (and the
// client's leases expire).
func (c *Client) Cut(cut bool) {
	s := c.c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	c.c.cut = cut
	s.bump()
}

type conn struct {
	s    *Store
	name string
	cut  bool
}

// reachable reports whether c's requests are answered; s.mu is held.
func (c *conn) reachable() bool { return !c.s.down && !c.cut }

// do runs f under the store's lock once the store is reachable from c and
// any slowness has passed, or returns ctx's error. f runs even when ctx
// ends during the slowness (the request had reached etcd).
func do[T any](ctx context.Context, c *conn, f func() (T, error)) (T, error) {
	s := c.s
	var zero T
	for {
		s.mu.Lock()
		if c.reachable() {
			break
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return zero, status.FromContextError(ctx.Err()).Err()
		}
	}
	slow := s.slow
	s.mu.Unlock()
	if slow == 0 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return f()
	}
	type res struct {
		v   T
		err error
	}
	done := make(chan res, 1)
	go func() {
		time.Sleep(slow)
		s.mu.Lock()
		defer s.mu.Unlock()
		v, err := f()
		done <- res{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		return zero, status.FromContextError(ctx.Err()).Err()
	}
}

func (s *Store) header() *pb.ResponseHeader {
	return &pb.ResponseHeader{ClusterId: 1, MemberId: 1, Revision: s.rev, RaftTerm: 1}
}

// at returns key's version at rev, if it existed then.
func (s *Store) at(key string, rev int64) (keyValue, bool) {
	h := s.hist[key]
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].kv.ModRevision <= rev {
			if h[i].deleted {
				return keyValue{}, false
			}
			return h[i].kv, true
		}
	}
	return keyValue{}, false
}

// inRange reports whether k is in [key, end) as etcd reads a range: no end
// is the key alone, "\x00" is every key from key on.
func inRange(k string, key, end []byte) bool {
	if len(end) == 0 {
		return k == string(key)
	}
	if len(end) == 1 && end[0] == 0 {
		return k >= string(key)
	}
	return k >= string(key) && k < string(end)
}

// rangeKeys returns the keys in [key, end) that exist at rev, sorted.
func (s *Store) rangeKeys(key, end []byte, rev int64) []keyValue {
	var out []keyValue
	if len(end) == 0 {
		if kv, ok := s.at(string(key), rev); ok {
			out = append(out, kv)
		}
		return out
	}
	i := sort.SearchStrings(s.keys, string(key))
	for ; i < len(s.keys) && inRange(s.keys[i], key, end); i++ {
		if kv, ok := s.at(s.keys[i], rev); ok {
			out = append(out, kv)
		}
	}
	return out
}

func (s *Store) rangeReq(r *pb.RangeRequest) (*pb.RangeResponse, error) {
	rev := r.Revision
	if rev <= 0 {
		rev = s.rev
	}
	if rev > s.rev {
		return nil, rpctypes.ErrGRPCFutureRev
	}
	kvs := s.rangeKeys(r.Key, r.RangeEnd, rev)
	count := len(kvs) // as etcd counts: before the revision filters
	kvs = slices.DeleteFunc(kvs, func(kv keyValue) bool {
		return (r.MinModRevision > 0 && kv.ModRevision < r.MinModRevision) ||
			(r.MaxModRevision > 0 && kv.ModRevision > r.MaxModRevision) ||
			(r.MinCreateRevision > 0 && kv.CreateRevision < r.MinCreateRevision) ||
			(r.MaxCreateRevision > 0 && kv.CreateRevision > r.MaxCreateRevision)
	})
	if r.SortOrder != pb.RangeRequest_NONE || r.SortTarget != pb.RangeRequest_KEY {
		by := func(a, b keyValue) int {
			switch r.SortTarget {
			case pb.RangeRequest_VERSION:
				return int(a.Version - b.Version)
			case pb.RangeRequest_CREATE:
				return int(a.CreateRevision - b.CreateRevision)
			case pb.RangeRequest_MOD:
				return int(a.ModRevision - b.ModRevision)
			case pb.RangeRequest_VALUE:
				return bytes.Compare(a.Value, b.Value)
			}
			return bytes.Compare(a.Key, b.Key)
		}
		slices.SortStableFunc(kvs, by)
		if r.SortOrder == pb.RangeRequest_DESCEND {
			slices.Reverse(kvs)
		}
	}
	resp := &pb.RangeResponse{Header: s.header(), Count: int64(count)}
	if r.Limit > 0 && int64(len(kvs)) > r.Limit {
		kvs, resp.More = kvs[:r.Limit], true
	}
	if r.CountOnly {
		return resp, nil
	}
	for _, kv := range kvs {
		if r.KeysOnly {
			kv.Value = nil
		}
		resp.Kvs = append(resp.Kvs, kv.pb())
	}
	return resp, nil
}

// put writes key at s.rev into w; s.mu is held.
func (s *Store) put(w *Write, key, value []byte, leaseID int64) *mvccpb.KeyValue {
	k := string(key)
	prev, existed := s.at(k, s.rev)
	kv := keyValue{Key: slices.Clone(key), Value: slices.Clone(value), ModRevision: s.rev, CreateRevision: s.rev, Version: 1, Lease: leaseID}
	if existed {
		kv.CreateRevision, kv.Version = prev.CreateRevision, prev.Version+1
		if l := s.leases[prev.Lease]; l != nil && prev.Lease != leaseID {
			delete(l.keys, k)
		}
	}
	if _, ok := s.hist[k]; !ok {
		i := sort.SearchStrings(s.keys, k)
		s.keys = slices.Insert(s.keys, i, k)
	}
	s.hist[k] = append(s.hist[k], version{kv: kv})
	if l := s.leases[leaseID]; l != nil {
		l.keys[k] = true
	}
	w.Events = append(w.Events, Event{Key: k, Value: kv.Value, Lease: leaseID})
	if existed {
		return prev.pb()
	}
	return nil
}

// del deletes the keys in [key, end) at s.rev into w; s.mu is held.
func (s *Store) del(w *Write, key, end []byte) []*mvccpb.KeyValue {
	var prevs []*mvccpb.KeyValue
	for _, kv := range s.rangeKeys(key, end, s.rev) {
		k := string(kv.Key)
		s.hist[k] = append(s.hist[k], version{kv: keyValue{Key: kv.Key, ModRevision: s.rev}, deleted: true})
		if l := s.leases[kv.Lease]; l != nil {
			delete(l.keys, k)
		}
		w.Events = append(w.Events, Event{Delete: true, Key: k})
		prevs = append(prevs, kv.pb())
	}
	return prevs
}

// commit records w, if it changed anything, and wakes watchers; s.mu is
// held and s.rev is w's revision.
func (s *Store) commit(w Write) {
	if len(w.Events) == 0 {
		s.rev--
		return
	}
	w.At = time.Now()
	s.writes = append(s.writes, w)
	s.bump()
}

func (s *Store) compare(c *pb.Compare) bool {
	keys := s.rangeKeys(c.Key, c.RangeEnd, s.rev)
	if len(c.RangeEnd) == 0 && len(keys) == 0 {
		keys = []keyValue{{Key: c.Key}} // a missing key compares as zeros
		if c.Target == pb.Compare_VALUE {
			return false
		}
	}
	for _, kv := range keys {
		var r int
		switch c.Target {
		case pb.Compare_VERSION:
			r = cmpInt(kv.Version, c.GetVersion())
		case pb.Compare_CREATE:
			r = cmpInt(kv.CreateRevision, c.GetCreateRevision())
		case pb.Compare_MOD:
			r = cmpInt(kv.ModRevision, c.GetModRevision())
		case pb.Compare_VALUE:
			r = bytes.Compare(kv.Value, c.GetValue())
		case pb.Compare_LEASE:
			r = cmpInt(kv.Lease, c.GetLease())
		}
		ok := false
		switch c.Result {
		case pb.Compare_EQUAL:
			ok = r == 0
		case pb.Compare_NOT_EQUAL:
			ok = r != 0
		case pb.Compare_GREATER:
			ok = r > 0
		case pb.Compare_LESS:
			ok = r < 0
		}
		if !ok {
			return false
		}
	}
	return true
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkTxn refuses what etcd refuses before it runs a transaction: too
// many operations, a lease that does not exist, and a key put twice, or put
// and deleted, in one branch (deleting a key twice is allowed, as etcd's
// checkIntervals allows it).
func (s *Store) checkTxn(r *pb.TxnRequest) error {
	if len(r.Compare) > MaxTxnOps || len(r.Success) > MaxTxnOps || len(r.Failure) > MaxTxnOps {
		return rpctypes.ErrGRPCTooManyOps
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		type span struct{ key, end []byte }
		var dels []span
		for _, op := range ops {
			if d := op.GetRequestDeleteRange(); d != nil {
				dels = append(dels, span{d.Key, d.RangeEnd})
			}
		}
		puts := map[string]bool{}
		for _, op := range ops {
			if t := op.GetRequestTxn(); t != nil {
				if err := s.checkTxn(t); err != nil {
					return err
				}
				continue
			}
			p := op.GetRequestPut()
			if p == nil {
				continue
			}
			if p.Lease != 0 && s.leases[p.Lease] == nil {
				return rpctypes.ErrGRPCLeaseNotFound
			}
			k := string(p.Key)
			if puts[k] {
				return rpctypes.ErrGRPCDuplicateKey
			}
			for _, d := range dels {
				if inRange(k, d.key, d.end) {
					return rpctypes.ErrGRPCDuplicateKey
				}
			}
			puts[k] = true
		}
	}
	return nil
}

func isWrite(r *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			if op.GetRequestRange() == nil {
				return true
			}
		}
	}
	return false
}

// txn runs r at s.rev+1 into w; s.mu is held.
func (s *Store) txn(w *Write, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := s.checkTxn(r); err != nil {
		return nil, err
	}
	ok := true
	for _, c := range r.Compare {
		if !s.compare(c) {
			ok = false
			break
		}
	}
	ops := r.Failure
	if ok {
		ops = r.Success
	}
	resp := &pb.TxnResponse{Succeeded: ok}
	for _, op := range ops {
		var ro *pb.ResponseOp
		switch {
		case op.GetRequestRange() != nil:
			res, err := s.rangeReq(op.GetRequestRange())
			if err != nil {
				return nil, err
			}
			ro = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: res}}
		case op.GetRequestPut() != nil:
			p := op.GetRequestPut()
			value, leaseID := p.Value, p.Lease
			if p.IgnoreValue || p.IgnoreLease {
				prev, _ := s.at(string(p.Key), s.rev)
				if p.IgnoreValue {
					value = prev.Value
				}
				if p.IgnoreLease {
					leaseID = prev.Lease
				}
			}
			prev := s.put(w, p.Key, value, leaseID)
			res := &pb.PutResponse{}
			if p.PrevKv {
				res.PrevKv = prev
			}
			ro = &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: res}}
		case op.GetRequestDeleteRange() != nil:
			d := op.GetRequestDeleteRange()
			prevs := s.del(w, d.Key, d.RangeEnd)
			res := &pb.DeleteRangeResponse{Deleted: int64(len(prevs))}
			if d.PrevKv {
				res.PrevKvs = prevs
			}
			ro = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: res}}
		case op.GetRequestTxn() != nil:
			res, err := s.txn(w, op.GetRequestTxn())
			if err != nil {
				return nil, err
			}
			ro = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: res}}
		}
		resp.Responses = append(resp.Responses, ro)
	}
	return resp, nil
}

// write runs r as one transaction, with the faults set.
func (s *Store) write(c *conn, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	lost := false
	if isWrite(r) {
		if s.failNext > 0 {
			s.failNext--
			return nil, status.Error(codes.Unavailable, "memetcd: injected failure: the transaction did not land")
		}
		if s.lostNext > 0 {
			s.lostNext--
			lost = true
		}
	}
	s.rev++
	w := Write{Rev: s.rev, Client: c.name}
	resp, err := s.txn(&w, r)
	if err != nil {
		s.rev--
		s.rollback(w)
		return nil, err
	}
	s.commit(w)
	resp.Header = s.header()
	for _, ro := range resp.Responses {
		fillHeaders(ro, resp.Header)
	}
	if lost {
		return nil, status.Error(codes.DeadlineExceeded, "memetcd: injected lost reply: the transaction landed")
	}
	return resp, nil
}

func fillHeaders(ro *pb.ResponseOp, h *pb.ResponseHeader) {
	switch r := ro.Response.(type) {
	case *pb.ResponseOp_ResponseRange:
		r.ResponseRange.Header = h
	case *pb.ResponseOp_ResponsePut:
		r.ResponsePut.Header = h
	case *pb.ResponseOp_ResponseDeleteRange:
		r.ResponseDeleteRange.Header = h
	case *pb.ResponseOp_ResponseTxn:
		r.ResponseTxn.Header = h
		for _, ro := range r.ResponseTxn.Responses {
			fillHeaders(ro, h)
		}
	}
}

// rollback undoes w's events after a transaction failed halfway; s.mu is
// held.
func (s *Store) rollback(w Write) {
	rev := w.Rev
	for _, ev := range w.Events {
		h := s.hist[ev.Key]
		for len(h) > 0 && h[len(h)-1].kv.ModRevision == rev {
			h = h[:len(h)-1]
		}
		s.hist[ev.Key] = h
	}
}

// grant creates a lease; s.mu is held.
func (s *Store) grant(r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	id := r.ID
	if id == 0 {
		s.leaseID++
		id = 0x1000 + s.leaseID
	}
	if s.leases[id] != nil {
		return nil, rpctypes.ErrGRPCLeaseExist
	}
	l := &lease{id: id, ttl: max(r.TTL, MinLeaseTTL), keys: map[string]bool{}}
	s.leases[id] = l
	s.refresh(l)
	return &pb.LeaseGrantResponse{Header: s.header(), ID: id, TTL: l.ttl}, nil
}

// refresh gives l its full TTL from now; s.mu is held.
func (s *Store) refresh(l *lease) {
	d := time.Duration(l.ttl) * time.Second
	l.expires = time.Now().Add(d)
	if l.timer != nil {
		l.timer.Reset(d)
		return
	}
	l.timer = time.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.leases[l.id] == l && !s.down && !time.Now().Before(l.expires) {
			s.revoke(l, "")
		}
	})
}

// revoke ends l and deletes its keys in one revision; s.mu is held.
func (s *Store) revoke(l *lease, by string) {
	delete(s.leases, l.id)
	l.timer.Stop()
	keys := make([]string, 0, len(l.keys))
	for k := range l.keys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s.rev++
	w := Write{Rev: s.rev, Client: by}
	for _, k := range keys {
		s.del(&w, []byte(k), nil)
	}
	s.commit(w)
	s.bump()
}

// Close ends every lease's timer (the end of a test).
func (s *Store) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.leases {
		l.timer.Stop()
	}
	s.down = true
	s.bump()
}

// Leases returns the IDs of the live leases, sorted.
func (s *Store) Leases() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []int64
	for id := range s.leases {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// KeyValue is a key and its value.
type KeyValue struct {
	Key   string
	Value []byte
}

// Dump returns every key under prefix and its value at the current
// revision, by key.
func (s *Store) Dump(prefix string) []KeyValue {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []KeyValue
	for _, kv := range s.rangeKeys([]byte(prefix), []byte(clientv3.GetPrefixRangeEnd(prefix)), s.rev) {
		out = append(out, KeyValue{Key: string(kv.Key), Value: kv.Value})
	}
	return out
}

type kvClient struct{ c *conn }

func (k kvClient) Range(ctx context.Context, r *pb.RangeRequest, _ ...grpc.CallOption) (*pb.RangeResponse, error) {
	return do(ctx, k.c, func() (*pb.RangeResponse, error) { return k.c.s.rangeReq(r) })
}

func (k kvClient) RangeStream(ctx context.Context, r *pb.RangeRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[pb.RangeStreamResponse], error) {
	return nil, status.Error(codes.Unimplemented, "memetcd: RangeStream")
}

func (k kvClient) Put(ctx context.Context, r *pb.PutRequest, _ ...grpc.CallOption) (*pb.PutResponse, error) {
	resp, err := k.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: r}}}})
	if err != nil {
		return nil, err
	}
	return resp.Responses[0].GetResponsePut(), nil
}

func (k kvClient) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest, _ ...grpc.CallOption) (*pb.DeleteRangeResponse, error) {
	resp, err := k.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: r}}}})
	if err != nil {
		return nil, err
	}
	return resp.Responses[0].GetResponseDeleteRange(), nil
}

func (k kvClient) Txn(ctx context.Context, r *pb.TxnRequest, _ ...grpc.CallOption) (*pb.TxnResponse, error) {
	return do(ctx, k.c, func() (*pb.TxnResponse, error) { return k.c.s.write(k.c, r) })
}

func (k kvClient) Compact(ctx context.Context, r *pb.CompactionRequest, _ ...grpc.CallOption) (*pb.CompactionResponse, error) {
	return do(ctx, k.c, func() (*pb.CompactionResponse, error) {
		return &pb.CompactionResponse{Header: k.c.s.header()}, nil // history is kept whole
	})
}

type leaseClient struct{ c *conn }

func (l leaseClient) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest, _ ...grpc.CallOption) (*pb.LeaseGrantResponse, error) {
	return do(ctx, l.c, func() (*pb.LeaseGrantResponse, error) { return l.c.s.grant(r) })
}

func (l leaseClient) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest, _ ...grpc.CallOption) (*pb.LeaseRevokeResponse, error) {
	return do(ctx, l.c, func() (*pb.LeaseRevokeResponse, error) {
		s := l.c.s
		ls := s.leases[r.ID]
		if ls == nil {
			return nil, rpctypes.ErrGRPCLeaseNotFound
		}
		s.revoke(ls, l.c.name)
		return &pb.LeaseRevokeResponse{Header: s.header()}, nil
	})
}

func (l leaseClient) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest, _ ...grpc.CallOption) (*pb.LeaseTimeToLiveResponse, error) {
	return do(ctx, l.c, func() (*pb.LeaseTimeToLiveResponse, error) {
		s := l.c.s
		ls := s.leases[r.ID]
		if ls == nil {
			return &pb.LeaseTimeToLiveResponse{Header: s.header(), ID: r.ID, TTL: -1}, nil
		}
		resp := &pb.LeaseTimeToLiveResponse{Header: s.header(), ID: r.ID, GrantedTTL: ls.ttl,
			TTL: int64(time.Until(ls.expires).Round(time.Second) / time.Second)}
		if r.Keys {
			for k := range ls.keys {
				resp.Keys = append(resp.Keys, []byte(k))
			}
			slices.SortFunc(resp.Keys, bytes.Compare)
		}
		return resp, nil
	})
}

func (l leaseClient) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest, _ ...grpc.CallOption) (*pb.LeaseLeasesResponse, error) {
	return do(ctx, l.c, func() (*pb.LeaseLeasesResponse, error) {
		resp := &pb.LeaseLeasesResponse{Header: l.c.s.header()}
		for id := range l.c.s.leases {
			resp.Leases = append(resp.Leases, &pb.LeaseStatus{ID: id})
		}
		slices.SortFunc(resp.Leases, func(a, b *pb.LeaseStatus) int { return cmpInt(a.ID, b.ID) })
		return resp, nil
	})
}

func (l leaseClient) LeaseKeepAlive(ctx context.Context, _ ...grpc.CallOption) (grpc.BidiStreamingClient[pb.LeaseKeepAliveRequest, pb.LeaseKeepAliveResponse], error) {
	return &keepAliveStream{stream: stream{ctx: ctx}, c: l.c, in: make(chan int64, 16)}, nil
}

// stream is what the client streams have in common.
type stream struct {
	ctx context.Context
	grpc.ClientStream
}

func (s *stream) Context() context.Context { return s.ctx }
func (s *stream) CloseSend() error         { return nil }

type keepAliveStream struct {
	stream
	c  *conn
	in chan int64
}

func (k *keepAliveStream) Send(r *pb.LeaseKeepAliveRequest) error {
	select {
	case k.in <- r.ID:
		return nil
	case <-k.ctx.Done():
		return status.FromContextError(k.ctx.Err()).Err()
	}
}

func (k *keepAliveStream) Recv() (*pb.LeaseKeepAliveResponse, error) {
	var id int64
	select {
	case id = <-k.in:
	case <-k.ctx.Done():
		return nil, status.FromContextError(k.ctx.Err()).Err()
	}
	return do(k.ctx, k.c, func() (*pb.LeaseKeepAliveResponse, error) {
		s := k.c.s
		l := s.leases[id]
		if l == nil {
			return &pb.LeaseKeepAliveResponse{Header: s.header(), ID: id, TTL: 0}, nil
		}
		s.refresh(l)
		return &pb.LeaseKeepAliveResponse{Header: s.header(), ID: id, TTL: l.ttl}, nil
	})
}

// watcher is the client's Watcher. It is not clientv3's own over a watch
// stream (clientv3.NewWatchFromWatchClient): that one waits on a channel made
// when clientv3 is initialised, outside any synctest bubble, so a bubble
// could never tell its goroutines were idle.
type watcher struct {
	c        *conn
	mu       sync.Mutex
	progress map[*watch]chan struct{}
	closed   bool
}

func (w *watcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	op := clientv3.OpGet(key, opts...)
	ch := make(chan clientv3.WatchResponse)
	s := w.c.s
	s.mu.Lock()
	next := op.Rev()
	if next <= 0 {
		next = s.rev + 1
	}
	s.mu.Unlock()
	wt := &watch{key: []byte(key), end: op.RangeBytes(), next: next, prevKV: op.IsPrevKV()}
	prog := make(chan struct{}, 1)
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		close(ch)
		return ch
	}
	if w.progress == nil {
		w.progress = map[*watch]chan struct{}{}
	}
	w.progress[wt] = prog
	w.mu.Unlock()
	go func() {
		defer close(ch)
		defer func() {
			w.mu.Lock()
			delete(w.progress, wt)
			w.mu.Unlock()
		}()
		send := func(r clientv3.WatchResponse) bool {
			select {
			case ch <- r:
				return true
			case <-ctx.Done():
				return false
			}
		}
		if op.IsCreatedNotify() {
			s.mu.Lock()
			h := s.header()
			s.mu.Unlock()
			if !send(clientv3.WatchResponse{Header: h, Created: true}) {
				return
			}
		}
		for {
			s.mu.Lock()
			var resp *clientv3.WatchResponse
			if w.c.reachable() {
				if evs := s.eventsSince(wt, op.IsFilterPut(), op.IsFilterDelete()); len(evs) > 0 {
					resp = &clientv3.WatchResponse{Header: s.header(), Events: evs}
				}
			}
			changed := s.changed
			s.mu.Unlock()
			if resp != nil {
				if !send(*resp) {
					return
				}
				continue
			}
			select {
			case <-changed:
			case <-prog:
				s.mu.Lock()
				h := s.header()
				ok := w.c.reachable()
				s.mu.Unlock()
				if ok && !send(clientv3.WatchResponse{Header: h}) {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}

// RequestProgress has every watch of the client say the store's revision.
func (w *watcher) RequestProgress(ctx context.Context) error {
	_, err := do(ctx, w.c, func() (struct{}, error) { return struct{}{}, nil })
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.progress {
		select {
		case p <- struct{}{}:
		default:
		}
	}
	return nil
}

func (w *watcher) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	return nil
}

// eventsSince returns wt's events from wt.next on and moves wt.next past
// them; s.mu is held.
func (s *Store) eventsSince(wt *watch, noPut, noDelete bool) []*clientv3.Event {
	if wt.next > s.rev {
		return nil
	}
	var evs []*clientv3.Event
	i := sort.Search(len(s.writes), func(i int) bool { return s.writes[i].Rev >= wt.next })
	for ; i < len(s.writes); i++ {
		w := s.writes[i]
		for _, ev := range w.Events {
			if !inRange(ev.Key, wt.key, wt.end) || (ev.Delete && noDelete) || (!ev.Delete && noPut) {
				continue
			}
			h := s.hist[ev.Key]
			for j := range h {
				if h[j].kv.ModRevision != w.Rev {
					continue
				}
				e := &clientv3.Event{Kv: h[j].kv.pb()}
				if h[j].deleted {
					e.Type = mvccpb.DELETE
				}
				if wt.prevKV && j > 0 && !h[j-1].deleted {
					e.PrevKv = h[j-1].kv.pb()
				}
				evs = append(evs, e)
			}
		}
	}
	wt.next = s.rev + 1
	return evs
}
