package engine

import (
	"context"
	"errors"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/flotilla/flotilla/internal/registry"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// The etcd registry mode (Config.Registry "etcd", fleet's original design):
// agents do not stream to the leader. Each agent keeps, under its own
// lease, a presence key and one key per unit state; the leader watches them
// and writes each machine's assignments under assignments/<machine>/,
// fenced like every other write. The same term, loop and agentConn queues
// serve both modes: here a machine is "connected" while its presence key
// exists, and its queued assignments are written to etcd instead of sent.

// followAgentsEtcd feeds agents' presence and states into the term until it ends.
func (t *term) followAgentsEtcd() {
	conns := map[string]*agentConn{}
	defer func() {
		for _, c := range conns {
			c.close()
		}
	}()
	for t.ctx.Err() == nil {
		err := t.followAgentsOnce(conns)
		if t.ctx.Err() != nil {
			return
		}
		t.e.log.Warn("following agents in etcd; retrying", "err", err)
		sleepCtx(t.ctx, 500*time.Millisecond)
	}
}

func (t *term) followAgentsOnce(conns map[string]*agentConn) error {
	cli, keys, ctx := t.e.cfg.Client, t.keys, t.ctx
	pres, err := cli.Get(ctx, keys.Presences(), clientv3.WithPrefix())
	if err != nil {
		return err
	}
	rev := pres.Header.Revision
	sts, err := cli.Get(ctx, keys.States(), clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		return err
	}
	states := map[string][]*agentpb.UnitStatus{}
	for _, kv := range sts.Kvs {
		machine, _, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), keys.States()), "/")
		var s agentpb.UnitStatus
		if ok && proto.Unmarshal(kv.Value, &s) == nil {
			states[machine] = append(states[machine], &s)
		}
	}
	present := map[string]bool{}
	for _, kv := range pres.Kvs {
		var pm agentpb.Machine
		if err := proto.Unmarshal(kv.Value, &pm); err != nil || checkMachine(&pm) != nil {
			t.e.log.Warn("ignoring a malformed presence key", "key", string(kv.Key))
			continue
		}
		if pm.Leaving || t.refuseEtcd(&pm) {
			continue // it left (its lease and keys are about to go), or is refused
		}
		present[pm.Id] = true
		conns[pm.Id] = t.attachEtcd(&pm, states[pm.Id])
	}
	for id, c := range conns {
		if !present[id] {
			t.detachLost(c)
			delete(conns, id)
		}
	}

	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	pw := cli.Watch(wctx, keys.Presences(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	sw := cli.Watch(wctx, keys.States(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for {
		select {
		case <-ctx.Done():
			return nil
		case wr, ok := <-pw:
			if !ok || wr.Err() != nil {
				return watchErr(wr, ok)
			}
			for _, ev := range wr.Events {
				id := strings.TrimPrefix(string(ev.Kv.Key), keys.Presences())
				if ev.Type == clientv3.EventTypeDelete {
					if c := conns[id]; c != nil {
						t.detachLost(c)
						delete(conns, id)
					}
					continue
				}
				var pm agentpb.Machine
				if err := proto.Unmarshal(ev.Kv.Value, &pm); err != nil || pm.Id != id || checkMachine(&pm) != nil {
					continue
				}
				if pm.Leaving {
					// The agent stopped its units and leaves (daemon
					// --stop-units-on-exit): they move at once.
					if c := conns[id]; c != nil {
						t.leave(c)
						c.close()
						delete(conns, id)
					}
					continue
				}
				if t.refuseEtcd(&pm) {
					if c := conns[id]; c != nil {
						t.detachLost(c)
						delete(conns, id)
					}
					continue
				}
				if c := conns[id]; c != nil && ev.Kv.Version > 1 {
					t.updateMachine(&pm) // the same lease, new information
					continue
				}
				// Its states may have been written before its presence
				// reached us (they come on another watch): read them.
				conns[id] = t.attachEtcd(&pm, t.readStates(id))
			}
		case wr, ok := <-sw:
			if !ok || wr.Err() != nil {
				return watchErr(wr, ok)
			}
			t.statesFromEtcd(conns, wr.Events)
		}
	}
}

// refuseEtcd reports whether a presence key's machine speaks an agent
// protocol outside this leader's window, and logs it: the leader then
// takes it for absent, as the gRPC mode refuses its Hello (the etcd mode
// has no channel to tell the agent so).
func (t *term) refuseEtcd(pm *agentpb.Machine) bool {
	err := t.e.checkProtocol(pm)
	if err != nil {
		t.e.log.Warn("ignoring the presence of a machine outside the protocol window", "machine", pm.Id, "err", err)
	}
	return err != nil
}

// readStates reads what a machine's agent reported of its units.
func (t *term) readStates(machine string) []*agentpb.UnitStatus {
	resp, err := t.e.cfg.Client.Get(t.ctx, t.keys.MachineStates(machine), clientv3.WithPrefix())
	if err != nil {
		return nil // they follow on the states watch
	}
	var out []*agentpb.UnitStatus
	for _, kv := range resp.Kvs {
		var s agentpb.UnitStatus
		if proto.Unmarshal(kv.Value, &s) == nil {
			out = append(out, &s)
		}
	}
	return out
}

func watchErr(wr clientv3.WatchResponse, ok bool) error {
	if !ok {
		return errors.New("watch closed")
	}
	return wr.Err()
}

// attachEtcd has the loop register a present machine (attachInput) and
// starts writing its assignments.
func (t *term) attachEtcd(pm *agentpb.Machine, states []*agentpb.UnitStatus) *agentConn {
	at := t.e.cfg.Now()
	c := t.newConn(pm.Id, at)
	t.inbox.put(&attachInput{pm: pm, units: states, conn: c, at: at})
	t.wg.Add(1)
	go func() { defer t.wg.Done(); t.writeAssignments(c) }()
	return c
}

// detachLost has the loop unregister a machine whose presence lease
// expired (detachInput).
func (t *term) detachLost(c *agentConn) {
	c.close()
	t.inbox.put(&detachInput{conn: c, lost: true, at: t.e.cfg.Now()})
}

func (t *term) updateMachine(pm *agentpb.Machine) {
	t.inbox.put(&machineInput{pm: pm, at: t.e.cfg.Now()})
}

// statesFromEtcd queues for the loop the states watch's events of present
// machines.
func (t *term) statesFromEtcd(conns map[string]*agentConn, evs []*clientv3.Event) {
	var mine []*clientv3.Event
	for _, ev := range evs {
		machine, _, ok := strings.Cut(strings.TrimPrefix(string(ev.Kv.Key), t.keys.States()), "/")
		if ok && conns[machine] != nil {
			mine = append(mine, ev)
		}
	}
	if len(mine) > 0 {
		t.inbox.put(&etcdStatesInput{evs: mine, at: t.e.cfg.Now()})
	}
}

// writeAssignments writes a machine's queued assignments to etcd until its
// presence ends or the term does. A full set is diffed against what etcd
// holds, so a new leader rewrites nothing that is already right.
func (t *term) writeAssignments(c *agentConn) {
	prefix := t.keys.Assignments(c.machine)
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		case <-t.ctx.Done():
			return
		}
		msg := c.take(t.info.Rev)
		if msg == nil {
			continue
		}
		as := msg.GetAssignments()
		var ops []registry.Op
		if as.Full {
			resp, err := t.e.cfg.Client.Get(t.ctx, prefix, clientv3.WithPrefix())
			if err != nil {
				t.resend(c)
				continue
			}
			have := map[string]*agentpb.Assignment{}
			for _, kv := range resp.Kvs {
				var a agentpb.Assignment
				if proto.Unmarshal(kv.Value, &a) == nil {
					have[strings.TrimPrefix(string(kv.Key), prefix)] = &a
				}
			}
			for _, a := range as.Units {
				if h := have[a.Name]; h == nil || h.Hash != a.Hash || h.DesiredState != a.DesiredState || h.Global != a.Global {
					ops = append(ops, putAssignment(prefix, a))
				}
				delete(have, a.Name)
			}
			for name := range have {
				ops = append(ops, registry.Op{Key: prefix + name, Delete: true})
			}
		} else {
			for _, a := range as.Units {
				ops = append(ops, putAssignment(prefix, a))
			}
			for _, name := range as.Removed {
				ops = append(ops, registry.Op{Key: prefix + name, Delete: true})
			}
		}
		if err := t.committer.Commit(t.commitCtx, ops); err != nil {
			if errors.Is(err, registry.ErrFenced) {
				t.cancel(err)
				return
			}
			if t.commitCtx.Err() != nil {
				return // degraded: the next term sends them
			}
			t.e.log.Warn("writing assignments; retrying", "machine", c.machine, "err", err)
			sleepCtx(t.ctx, 200*time.Millisecond)
			t.resend(c)
		}
	}
}

// dropAssignment is, in the etcd registry mode, the op that removes a unit
// from a machine's assignments, committed with the change that takes the
// unit off the machine. The machine's writer would remove it too, but only
// while the machine is present: without this, a machine coming back after
// its units were moved would read stale assignments and start them.
func (t *term) dropAssignment(machine, name string) []registry.Op {
	if t.e.cfg.Registry != registry.ModeEtcd {
		return nil
	}
	return []registry.Op{{Key: t.keys.Assignments(machine) + name, Delete: true}}
}

// resend has the loop queue the machine's full desired set again.
func (t *term) resend(c *agentConn) {
	t.inbox.put(&resendInput{conn: c})
}

func putAssignment(prefix string, a *agentpb.Assignment) registry.Op {
	b, _ := proto.Marshal(a)
	return registry.Op{Key: prefix + a.Name, Value: string(b)}
}
