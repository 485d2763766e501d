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
package election

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

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

// Term is a won election.
type Term struct {
	Info    Info
	session *concurrency.Session
	elec    *concurrency.Election
}

// Fence is the condition under which this term's writes may land.
func (t *Term) Fence() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(t.Info.Key), "=", t.Info.Rev)
}

// Done is closed when the term ends because the lease was lost.
func (t *Term) Done() <-chan struct{} { return t.session.Done() }

// Resign gives up leadership at once so a standby can take over without
// waiting for the lease to expire.
func (t *Term) Resign(ctx context.Context) error {
	err := t.elec.Resign(ctx)
	t.session.Close()
	return err
}

// Campaign blocks until this candidate leads (or ctx ends). ttl is the
// session lease TTL, rounded up to whole seconds (etcd's unit).
func Campaign(ctx context.Context, cli *clientv3.Client, prefix string, ttl time.Duration, me Info) (*Term, error) {
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
	if err := e.Campaign(ctx, string(val)); err != nil {
		s.Close()
		return nil, fmt.Errorf("election: campaign: %w", err)
	}
	me.Key = e.Key()
	me.Rev = e.Rev()
	return &Term{Info: me, session: s, elec: e}, nil
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
