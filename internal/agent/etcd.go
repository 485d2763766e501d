package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/flotilla/flotilla/internal/monotime"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// The etcd registry mode, fleet's original way: instead of a stream to the
// leader, the agent keeps a lease of its own TTL and, under it, a presence
// key and one key per unit state; it watches assignments/<machine>/ for
// what to run. "Word from a current leader" becomes a lease renewal etcd
// granted, counted from when its request was sent (a renewal is asked
// for a third of the TTL apart): the leader counts a machine's LostAfter=
// from a TTL before its presence key expired, which is no earlier than the
// last renewal granted. A daemon that stops leaves its lease to expire
// rather than revoking it: its units keep running, and the leader must not
// count the machine lost before its TTL has passed.

// runEtcd keeps an etcd session going until ctx is done, the machine has
// left, or its name is in use.
func (a *Agent) runEtcd(ctx context.Context) error {
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		start := a.cfg.Now()
		err := a.etcdSession(ctx)
		if errors.Is(err, ErrNameInUse) {
			if !a.refused(ctx, err) {
				return err
			}
			continue
		}
		if ctx.Err() != nil || a.hasLeft() {
			return nil
		}
		if a.cfg.Now().Sub(start) > 5*time.Second {
			backoff = 50 * time.Millisecond
		}
		if errors.Is(err, rpctypes.ErrPermissionDenied) {
			// With etcd's authentication on, a machine reaches etcd once
			// a server has made it a user (docs/security.md).
			backoff = 2 * time.Second
			a.log.Warn("etcd refused this machine: it is not enrolled (POST /v1/machines/"+a.cfg.Machine.ID+"/enroll on a server's API, with this machine's certificate or an admin token); trying again", "err", err, "backoff", backoff)
		} else {
			a.log.Warn("etcd session ended; starting another", "err", err, "backoff", backoff)
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
		backoff = min(backoff*2, time.Second)
	}
	return nil
}

func (a *Agent) etcdSession(ctx context.Context) error {
	cli, keys := a.cfg.Etcd, a.cfg.Keys
	// A presence key is live while its lease is: one written by another
	// instance (another data dir) means another machine has this name.
	cur, err := cli.Get(ctx, keys.Presence(a.cfg.Machine.ID))
	if err != nil {
		return err
	}
	var curRev int64
	if len(cur.Kvs) > 0 {
		curRev = cur.Kvs[0].ModRevision
		var other agentpb.Machine
		if proto.Unmarshal(cur.Kvs[0].Value, &other) == nil && !other.Leaving && other.Instance != "" &&
			a.cfg.Machine.Instance != "" && other.Instance != a.cfg.Machine.Instance {
			return fmt.Errorf("%w: machine name %q is already in use by a live daemon (IP %s, API %s, instance %s; this daemon is instance %s): give this one another --name, or stop that one first (its presence key expires %ds after it stops)",
				ErrNameInUse, a.cfg.Machine.ID, orUnknown(other.Ip), orUnknown(other.ApiAddr), other.Instance, a.cfg.Machine.Instance, leaseTTL(ctx, cli, cur.Kvs[0].Lease))
		}
	}
	secs := int64((a.cfg.TTL + time.Second - 1) / time.Second)
	lease, err := cli.Grant(ctx, secs)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ttl := time.Duration(lease.TTL) * time.Second
	ka := make(chan monotime.Time, 1) // send times of granted renewals
	kaErr := make(chan error, 1)
	go func() { kaErr <- a.renewLease(sctx, lease.ID, ttl, ka) }()
	hello := a.hello(0)
	pm, _ := proto.Marshal(hello.Machine)
	// The presence key is written only if it is still what was read above.
	txn, err := cli.Txn(sctx).If(clientv3.Compare(clientv3.ModRevision(keys.Presence(a.cfg.Machine.ID)), "=", curRev)).
		Then(clientv3.OpPut(keys.Presence(a.cfg.Machine.ID), string(pm), clientv3.WithLease(lease.ID))).Commit()
	if err != nil {
		return err
	}
	if !txn.Succeeded {
		return errors.New("the machine's presence key changed while registering")
	}
	a.joined()
	var ops []clientv3.Op
	for _, s := range hello.Units {
		b, _ := proto.Marshal(s)
		ops = append(ops, clientv3.OpPut(keys.MachineStates(a.cfg.Machine.ID)+s.Name, string(b), clientv3.WithLease(lease.ID)))
	}
	if err := a.etcdWrite(sctx, ops); err != nil {
		return err
	}
	prefix := keys.Assignments(a.cfg.Machine.ID)
	resp, err := cli.Get(sctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	full := &agentpb.Assignments{Full: true}
	for _, kv := range resp.Kvs {
		var as agentpb.Assignment
		if proto.Unmarshal(kv.Value, &as) == nil {
			full.Units = append(full.Units, &as)
		}
	}
	a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: full}}, 0)

	wch := cli.Watch(clientv3.WithRequireLeader(sctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-kaErr:
			return err
		case <-a.resync:
			return errors.New("units were killed for want of word; registering again")
		case <-a.leaveNow:
			// The units are stopped: write their last states, mark the
			// presence key leaving (the leader places the units elsewhere
			// at once), then revoke the lease, which deletes the presence
			// and every unit state.
			if msg := a.takeUpdate(); msg != nil {
				var ops []clientv3.Op
				for _, name := range msg.GetUpdate().Removed {
					ops = append(ops, clientv3.OpDelete(keys.MachineStates(a.cfg.Machine.ID)+name))
				}
				if err := a.etcdWrite(sctx, ops); err != nil {
					a.requeue(msg.GetUpdate())
					return err
				}
			}
			hello.Machine.Leaving = true
			pm, _ := proto.Marshal(hello.Machine)
			if _, err := cli.Put(sctx, keys.Presence(a.cfg.Machine.ID), string(pm), clientv3.WithLease(lease.ID)); err != nil {
				return fmt.Errorf("leaving: %w", err)
			}
			if _, err := cli.Revoke(sctx, lease.ID); err != nil {
				a.log.Warn("leaving: could not revoke the agent's lease; its keys expire with it", "err", err)
			}
			a.leftOnce.Do(func() { close(a.left) })
			return errLeaveSent
		case sent := <-ka:
			a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Heartbeat{Heartbeat: &agentpb.Heartbeat{}}}, sent)
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				if !ok {
					return errors.New("assignment watch closed")
				}
				return wr.Err()
			}
			delta := &agentpb.Assignments{}
			for _, ev := range wr.Events {
				name := strings.TrimPrefix(string(ev.Kv.Key), prefix)
				if ev.Type == clientv3.EventTypeDelete {
					delta.Removed = append(delta.Removed, name)
					continue
				}
				var as agentpb.Assignment
				if proto.Unmarshal(ev.Kv.Value, &as) == nil {
					delta.Units = append(delta.Units, &as)
				}
			}
			a.received(&agentpb.EngineMessage{Msg: &agentpb.EngineMessage_Assignments{Assignments: delta}}, 0)
		case <-a.flush:
			time.Sleep(5 * time.Millisecond) // let a burst gather
			msg := a.takeUpdate()
			if msg == nil {
				continue
			}
			u := msg.GetUpdate()
			var ops []clientv3.Op
			for _, s := range u.Units {
				b, _ := proto.Marshal(s)
				ops = append(ops, clientv3.OpPut(keys.MachineStates(a.cfg.Machine.ID)+s.Name, string(b), clientv3.WithLease(lease.ID)))
			}
			for _, name := range u.Removed {
				ops = append(ops, clientv3.OpDelete(keys.MachineStates(a.cfg.Machine.ID)+name))
			}
			if err := a.etcdWrite(sctx, ops); err != nil {
				a.requeue(u)
				return err
			}
		}
	}
}

// renewLease renews the agent's lease a third of its TTL apart and sends
// on granted the time each granted renewal was asked for, until ctx ends or
// the lease is gone.
func (a *Agent) renewLease(ctx context.Context, id clientv3.LeaseID, ttl time.Duration, granted chan<- monotime.Time) error {
	for {
		sent := a.cfg.Mono()
		rctx, cancel := context.WithTimeout(ctx, ttl/3)
		resp, err := a.cfg.Etcd.KeepAliveOnce(rctx, id)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, rpctypes.ErrLeaseNotFound) || (err == nil && resp.TTL <= 0):
			return errors.New("the agent's lease expired")
		case err == nil:
			select {
			case granted <- sent:
			default: // the session is busy; the next renewal tells it
			}
		}
		select {
		case <-time.After(ttl / 3):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// etcdWrite writes ops in transactions of at most 128 (etcd's default
// --max-txn-ops).
func (a *Agent) etcdWrite(ctx context.Context, ops []clientv3.Op) error {
	for len(ops) > 0 {
		n := min(len(ops), 128)
		if _, err := a.cfg.Etcd.Txn(ctx).Then(ops[:n]...).Commit(); err != nil {
			return err
		}
		ops = ops[n:]
	}
	return nil
}

// requeue marks the units of an update that could not be written as
// changed again, so the next session writes them.
func (a *Agent) requeue(u *agentpb.StatusUpdate) {
	a.mu.Lock()
	for _, s := range u.Units {
		a.dirty[s.Name] = true
	}
	for _, name := range u.Removed {
		a.removed[name] = true
	}
	a.mu.Unlock()
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// leaseTTL returns the TTL in seconds of the lease id (0 if unknown).
func leaseTTL(ctx context.Context, cli *clientv3.Client, id int64) int64 {
	resp, err := cli.TimeToLive(ctx, clientv3.LeaseID(id))
	if err != nil {
		return 0
	}
	return resp.GrantedTTL
}
