package engine

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flotilla/flotilla/internal/election"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// Finding the leader without etcd. Agents learn who leads from etcd. An
// agent whose machine is cut off from etcd but not from the other daemons
// (its etcd member lost quorum; the etcd cluster is behind a broken link)
// would never learn of a new leader, and its singleton units would be
// killed, its others replaced, though the new leader could reach it. So the
// leader tells its agents where every engine candidate listens (engines,
// followed through etcd), and every engine answers Leader with
// the leader its daemon last learnt from etcd; an agent that has had no
// word from its leader for a while asks them (package agent).

// candidatesRetry is how long the leader waits to read the candidates
// again after etcd failed it.
const candidatesRetry = time.Second

// engineList is the candidates' gRPC addresses, numbered so that each stream
// sends them once per change.
type engineList struct {
	gen   uint64
	addrs []string
}

// followCandidates keeps t.engines current until the term ends: it reads
// the candidates, then again each time a key under the election prefix
// changes (a candidate campaigns or goes).
func (t *term) followCandidates() {
	cli, prefix := t.e.cfg.Client, t.keys.Election()
	for t.ctx.Err() == nil {
		cs, rev, err := election.Candidates(t.ctx, cli, prefix)
		if err != nil {
			sleepCtx(t.ctx, candidatesRetry)
			continue
		}
		t.setEngines(cs)
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(t.ctx))
		for wr := range cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
			if wr.Err() != nil || len(wr.Events) > 0 {
				break
			}
		}
		cancel()
	}
}

// setEngines records the candidates' gRPC addresses, numbering a change.
func (t *term) setEngines(cs []election.Info) {
	var addrs []string
	for _, c := range cs {
		if c.GRPCAddr != "" && !slices.Contains(addrs, c.GRPCAddr) {
			addrs = append(addrs, c.GRPCAddr)
		}
	}
	slices.Sort(addrs)
	cur := t.engines.Load()
	if cur != nil && slices.Equal(cur.addrs, addrs) {
		return
	}
	gen := uint64(1)
	if cur != nil {
		gen = cur.gen + 1
	}
	t.engines.Store(&engineList{gen: gen, addrs: addrs})
}

// withEngines adds the candidates to msg if the stream has not had them
// since they last changed; sentGen is the stream's record of that.
func withEngines(msg *agentpb.EngineMessage, list *atomic.Pointer[engineList], sentGen *uint64) {
	cur := list.Load()
	if cur == nil || cur.gen == *sentGen {
		return
	}
	msg.Engines = cur.addrs
	*sentGen = cur.gen
}

// Leader answers which engine leads, as this daemon last learnt from etcd
// (Config.LeaderInfo): NotFound when it knows of none.
func (e *Engine) Leader(ctx context.Context, _ *agentpb.LeaderRequest) (*agentpb.LeaderInfo, error) {
	if e.cfg.LeaderInfo == nil {
		return nil, status.Error(codes.Unimplemented, "this engine does not track the leader")
	}
	in, ok := e.cfg.LeaderInfo()
	if !ok {
		return nil, status.Error(codes.NotFound, "no leader known")
	}
	return &agentpb.LeaderInfo{Machine: in.Machine, GrpcAddr: in.GRPCAddr, ApiAddr: in.APIAddr, Rev: in.Rev}, nil
}
