// Package election finds and becomes the engine leader through etcd.
//
// Candidates campaign with client/v3/concurrency: each holds a key under the
// election prefix, attached to its session's lease; the key with the lowest
// creation revision leads. The leader's value is its Info (JSON), so agents
// and API servers learn where to reach it by reading the same prefix.
//
// A leader stays leader while its session's lease is kept alive. If the
// process dies, the lease expires after the session TTL and the next
// candidate's key becomes the lowest: that is the failover time.
//
// # Knowing the lease is valid
//
// A leader must stop acting for the cluster before its lease could have
// expired, or two leaders act at once. etcd expires a lease TTL after the
// last renewal it granted; that renewal happened after the leader sent its
// request. So a Term renews the lease itself (KeepAliveOnce, a third of the
// TTL apart, beside the session's own keep-alive), notes when it sent each
// request that etcd answered, and Valid reports whether that moment plus the
// granted TTL, less a safety margin for clock rates, is still ahead. A new
// leader also reads its own election key once after winning: a candidate
// can win with a lease that etcd has already expired (after etcd's own
// raft leader was lost) and must not lead then.
package election

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Info describes a leader. Rev is the creation revision of its election key:
// it identifies one term and fences the leader's writes.
type Info struct {
	Machine  string `json:"machine"`
	GRPCAddr string `json:"grpcAddr"`
	APIAddr  string `json:"apiAddr"`
	Key      string `json:"-"`
	Rev      int64  `json:"-"`
}

// ErrLeaseExpired is returned by Campaign when the candidate won with a
// lease etcd had already expired (its key is gone).
var ErrLeaseExpired = errors.New("election: won with an expired lease")

// ErrLeaseGone is returned by a renewal of a term's lease that etcd says
// has expired (or no longer exists): the renewals came too late.
var ErrLeaseGone = errors.New("election: the lease expired before a renewal was granted")

// Term is a won election.
type Term struct {
	Info    Info
	session *concurrency.Session
	elec    *concurrency.Election
	ttl     time.Duration
	// validUntil is when the lease may expire at the earliest, as
	// time.Time's monotonic reading in this process (UnixNano of a
	// time.Time built from the monotonic base; see Valid).
	validUntil atomic.Int64
	base       time.Time // the zero of validUntil's scale (monotonic)
	stop       context.CancelFunc
	// done is closed when the term is over by etcd's word (see Done);
	// cause says why.
	done     chan struct{}
	doneOnce sync.Once
	cause    error
}

// safetyMargin is how long before the lease's earliest expiry the leader
// stops acting: a tenth of the TTL, at least 100ms, covering the difference
// between etcd's and this machine's clock rates and the time a message takes
// to leave.
func safetyMargin(ttl time.Duration) time.Duration {
	return max(ttl/10, 100*time.Millisecond)
}

// Valid reports whether the term's lease is known to be held at now (a
// time.Now reading), with the safety margin to spare.
func (t *Term) Valid(now time.Time) bool {
	return now.Sub(t.base) < time.Duration(t.validUntil.Load())-safetyMargin(t.ttl)
}

// ValidUntil returns the time, less the safety margin, until which the lease
// is known to be held.
func (t *Term) ValidUntil() time.Time {
	return t.base.Add(time.Duration(t.validUntil.Load()) - safetyMargin(t.ttl))
}

// renew keeps validUntil current until ctx ends, and ends the term (Done)
// once etcd says the lease is gone, or once no renewal has been granted
// for a TTL past the lease's earliest expiry.
//
// A renewal is sent every third of the TTL whether or not the ones before
// it have been answered (up to renewalsInFlight at once), and each is
// given a TTL to be answered: an answer that comes late still moves
// validUntil from when its request was sent, which etcd's renewal came
// after. On a host whose CPUs were busy, a leader of a million units'
// goroutines waited up to 1.9 s to run (p99 1.1 s: bench --profile's
// memory.txt), and a request and its answer pass through several of them;
// renewals abandoned after a third of the TTL, and sent again only a third
// later, let the term's known validity lapse (the leader then falls
// silent to every agent) and, under three engines, its lease expire,
// while etcd answered each renewal it got within milliseconds.
func (t *Term) renew(ctx context.Context, cli *clientv3.Client) {
	answers := make(chan error, renewalsInFlight) // never blocks: no more are in flight
	inFlight := 0
	send := func() {
		inFlight++
		go func() { answers <- t.renewOnce(ctx, cli) }()
	}
	every := time.NewTicker(t.ttl / 3)
	defer every.Stop()
	send()
	var last error
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-answers:
			inFlight--
			if errors.Is(err, ErrLeaseGone) || errors.Is(err, rpctypes.ErrLeaseNotFound) {
				t.end(fmt.Errorf("etcd says the lease is gone: %w", err))
				return
			}
			if err != nil && ctx.Err() == nil {
				last = err
			}
		case <-every.C:
			if inFlight < renewalsInFlight {
				send()
			}
		}
		if last != nil && ctx.Err() == nil && time.Since(t.base) > time.Duration(t.validUntil.Load())+t.ttl {
			t.end(fmt.Errorf("no renewal granted for %v past the lease's earliest expiry (last error: %w)", t.ttl, last))
			return
		}
	}
}

// renewalsInFlight bounds the renewals sent and not yet answered: each is
// given a TTL, and one is sent every third of it.
const renewalsInFlight = 3

func (t *Term) end(cause error) {
	t.doneOnce.Do(func() {
		t.cause = cause
		close(t.done)
	})
}

// Err says why Done was closed; nil while it is open.
func (t *Term) Err() error {
	select {
	case <-t.done:
		return t.cause
	default:
		return nil
	}
}

// renewOnce renews the lease once and, if etcd granted it, moves validUntil.
func (t *Term) renewOnce(ctx context.Context, cli *clientv3.Client) error {
	rctx, cancel := context.WithTimeout(ctx, t.ttl)
	defer cancel()
	sent := time.Since(t.base)
	resp, err := cli.KeepAliveOnce(rctx, t.session.Lease())
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return ErrLeaseGone
	}
	if err != nil {
		return err
	}
	if resp.TTL <= 0 {
		return ErrLeaseGone
	}
	until := int64(sent + time.Duration(resp.TTL)*time.Second)
	for {
		cur := t.validUntil.Load()
		if until <= cur || t.validUntil.CompareAndSwap(cur, until) {
			return nil
		}
	}
}

// Fence is the condition under which this term's writes may land.
func (t *Term) Fence() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(t.Info.Key), "=", t.Info.Rev)
}

// Done is closed when the term ends because the lease was lost: etcd
// answered a renewal saying the lease is gone, or no renewal has been
// granted for a TTL past the lease's earliest expiry (etcd unreachable, or
// this process frozen). It is not the session's own keep-alive giving up:
// that happens when its answers come late to a process starved of CPU
// (a leader of a million units on a 2-CPU host lost its lease that way
// while etcd renewed every renewal it was sent). Valid says meanwhile
// whether the term may act.
func (t *Term) Done() <-chan struct{} { return t.done }

// Resign gives up leadership at once so a standby can take over without
// waiting for the lease to expire.
func (t *Term) Resign(ctx context.Context) error {
	t.stop()
	err := t.elec.Resign(ctx)
	t.session.Close()
	return err
}

// Campaign blocks until this candidate leads (or ctx ends). ttl is the
// session lease TTL, rounded up to whole seconds (etcd's unit).
//
// A candidate's lease may expire while it waits (its etcd member was cut
// off from the others, or this process froze): its key is then gone, and
// waiting on would "win" with the expired lease once the leader goes, and
// fail. So when the session hears its lease is gone, or the first renewal
// after a win finds it gone, the candidate campaigns again at once with a
// new lease (TestCampaignOutlivesExpiredLease).
func Campaign(ctx context.Context, cli *clientv3.Client, prefix string, ttl time.Duration, me Info) (*Term, error) {
	for {
		t, err := campaignOnce(ctx, cli, prefix, ttl, me)
		if !errors.Is(err, ErrLeaseExpired) || ctx.Err() != nil {
			return t, err
		}
		sleep(ctx, retryExpired)
	}
}

// retryExpired is the pause before a candidate whose lease expired
// campaigns again: a new lease needs etcd's quorum, so the loop cannot spin
// faster than etcd answers, and this keeps it from spinning at all.
const retryExpired = 50 * time.Millisecond

// campaignOnce campaigns with one session; ErrLeaseExpired when its lease
// expired before it could lead.
func campaignOnce(ctx context.Context, cli *clientv3.Client, prefix string, ttl time.Duration, me Info) (*Term, error) {
	secs := int((ttl + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(secs), concurrency.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("election: session: %w", err)
	}
	e := concurrency.NewElection(s, prefix)
	val, _ := json.Marshal(me)
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-s.Done(): // the lease is gone: stop waiting with it
			cancel()
		case <-cctx.Done():
		}
	}()
	err = e.Campaign(cctx, string(val))
	cancel()
	if err != nil {
		s.Close()
		if ctx.Err() == nil && isClosed(s.Done()) {
			return nil, fmt.Errorf("election: campaign: %w (the session's lease expired while waiting)", ErrLeaseExpired)
		}
		return nil, fmt.Errorf("election: campaign: %w", err)
	}
	me.Key = e.Key()
	me.Rev = e.Rev()
	t := &Term{Info: me, session: s, elec: e, ttl: time.Duration(secs) * time.Second, base: time.Now(), done: make(chan struct{})}
	// Renew once now: validity starts at a renewal etcd granted after the
	// win, then check the key is still there (the lease may have expired
	// while this candidate waited).
	if err := t.renewOnce(ctx, cli); err != nil {
		s.Close()
		return nil, fmt.Errorf("election: first renewal: %w", err)
	}
	resp, err := cli.Get(ctx, me.Key)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("election: check own key: %w", err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != me.Rev {
		s.Close()
		return nil, ErrLeaseExpired
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	t.stop = cancel
	// The term renews the lease itself until it resigns or etcd says the
	// lease is gone; the session's keep-alive runs beside it (see Done).
	go t.renew(rctx, cli)
	return t, nil
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Current returns the current leader, or ok=false when there is none.
func Current(ctx context.Context, cli *clientv3.Client, prefix string) (Info, int64, bool, error) {
	resp, err := cli.Get(ctx, prefix, clientv3.WithFirstCreate()...)
	if err != nil {
		return Info{}, 0, false, fmt.Errorf("election: read leader: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return Info{}, resp.Header.Revision, false, nil
	}
	kv := resp.Kvs[0]
	var in Info
	if err := json.Unmarshal(kv.Value, &in); err != nil {
		return Info{}, resp.Header.Revision, false, fmt.Errorf("election: decode leader %s: %w", kv.Key, err)
	}
	in.Key = string(kv.Key)
	in.Rev = kv.CreateRevision
	return in, resp.Header.Revision, true, nil
}

// Candidates returns every campaigning engine (the leader first), in order
// of their keys' creation, and the revision read at.
func Candidates(ctx context.Context, cli *clientv3.Client, prefix string) ([]Info, int64, error) {
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, 0, fmt.Errorf("election: read candidates: %w", err)
	}
	var out []Info
	for _, kv := range resp.Kvs {
		var in Info
		if json.Unmarshal(kv.Value, &in) != nil {
			continue
		}
		in.Key, in.Rev = string(kv.Key), kv.CreateRevision
		out = append(out, in)
	}
	return out, resp.Header.Revision, nil
}

// Observe sends the current leader (or the zero Info while there is none)
// each time it changes, until ctx is done. Errors are retried.
func Observe(ctx context.Context, cli *clientv3.Client, prefix string) <-chan Info {
	ch := make(chan Info, 1)
	go func() {
		defer close(ch)
		var last Info
		sent := false
		for ctx.Err() == nil {
			in, rev, _, err := Current(ctx, cli, prefix)
			if err != nil {
				sleep(ctx, 200*time.Millisecond)
				continue
			}
			if !sent || in.Rev != last.Rev {
				select {
				case ch <- in:
				case <-ctx.Done():
					return
				}
				last, sent = in, true
			}
			// Wait for any change under the prefix, then read again.
			wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			wch := cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
			for wr := range wch {
				if wr.Err() != nil || len(wr.Events) > 0 {
					break
				}
			}
			cancel()
		}
	}()
	return ch
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
