package memetcd_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/flotilla/flotilla/internal/etcdtest"
	"github.com/flotilla/flotilla/internal/memetcd"
)

// exercise runs the same requests on any etcd and says what each answered.
func exercise(t *testing.T, cli *clientv3.Client) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var log []string
	say := func(format string, a ...any) { log = append(log, fmt.Sprintf(format, a...)) }
	errOf := func(err error) string {
		if err == nil {
			return "ok"
		}
		return "error: " + err.Error()
	}
	kvs := func(r *clientv3.GetResponse) string {
		var s []string
		for _, kv := range r.Kvs {
			s = append(s, fmt.Sprintf("%s=%s(c%d m%d v%d)", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version))
		}
		return fmt.Sprintf("rev %d count %d more %v [%s]", r.Header.Revision, r.Count, r.More, strings.Join(s, " "))
	}
	for _, kv := range [][2]string{{"a", "1"}, {"b", "2"}, {"c/x", "3"}, {"c/y", "4"}, {"a", "5"}} {
		r, err := cli.Put(ctx, kv[0], kv[1])
		if err != nil {
			t.Fatal(err)
		}
		say("put %s: rev %d", kv[0], r.Header.Revision)
	}
	get := func(what, key string, opts ...clientv3.OpOption) {
		r, err := cli.Get(ctx, key, opts...)
		if err != nil {
			say("get %s: %s", what, errOf(err))
			return
		}
		say("get %s: %s", what, kvs(r))
	}
	get("a", "a")
	get("a at 2", "a", clientv3.WithRev(2))
	get("prefix c/", "c/", clientv3.WithPrefix())
	get("from b", "b", clientv3.WithFromKey())
	get("first created of c/", "c/", clientv3.WithFirstCreate()...)
	get("last created of c/ before 4", "c/", append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(3))...)
	get("count", "", clientv3.WithPrefix(), clientv3.WithCountOnly())
	get("limit 2 keys only", "", clientv3.WithPrefix(), clientv3.WithLimit(2), clientv3.WithKeysOnly())
	get("future", "a", clientv3.WithRev(100))
	get("missing", "zz")

	txn := func(what string, cmps []clientv3.Cmp, then, els []clientv3.Op) {
		r, err := cli.Txn(ctx).If(cmps...).Then(then...).Else(els...).Commit()
		if err != nil {
			say("txn %s: %s", what, errOf(err))
			return
		}
		var rs []string
		for _, ro := range r.Responses {
			switch {
			case ro.GetResponseRange() != nil:
				rs = append(rs, fmt.Sprintf("range %d", len(ro.GetResponseRange().Kvs)))
			case ro.GetResponsePut() != nil:
				rs = append(rs, "put")
			case ro.GetResponseDeleteRange() != nil:
				rs = append(rs, fmt.Sprintf("deleted %d", ro.GetResponseDeleteRange().Deleted))
			}
		}
		say("txn %s: succeeded %v rev %d %v", what, r.Succeeded, r.Header.Revision, rs)
	}
	txn("create rev of a is 1", []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision("a"), "=", 1)},
		[]clientv3.Op{clientv3.OpPut("a", "6")}, []clientv3.Op{clientv3.OpGet("a")})
	txn("create rev of a is 2", []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision("a"), "=", 2)},
		[]clientv3.Op{clientv3.OpPut("a", "6")}, []clientv3.Op{clientv3.OpGet("a")})
	txn("missing key's create rev is 0", []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision("new"), "=", 0)},
		[]clientv3.Op{clientv3.OpPut("new", "x"), clientv3.OpGet("new")}, nil)
	txn("missing key's value", []clientv3.Cmp{clientv3.Compare(clientv3.Value("none"), "=", "")}, nil, nil)
	txn("mod rev of c/ below 5", []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision("c/").WithPrefix(), "<", 5)}, nil, nil)
	txn("version of a", []clientv3.Cmp{clientv3.Compare(clientv3.Version("a"), ">", 1)}, nil, nil)
	txn("put twice", nil, []clientv3.Op{clientv3.OpPut("b", "1"), clientv3.OpPut("b", "2")}, nil)
	txn("put and delete", nil, []clientv3.Op{clientv3.OpPut("b", "1"), clientv3.OpDelete("b")}, nil)
	txn("delete twice", nil, []clientv3.Op{clientv3.OpDelete("b"), clientv3.OpDelete("b")}, nil)
	txn("read only", nil, []clientv3.Op{clientv3.OpGet("a")}, nil)
	txn("delete nothing", nil, []clientv3.Op{clientv3.OpDelete("nothing")}, nil)
	get("all", "", clientv3.WithPrefix())

	if short, err := cli.Grant(ctx, 1); err != nil {
		say("grant a 1s lease: %s", errOf(err))
	} else {
		say("grant a 1s lease: ttl %d", short.TTL)
		_, err = cli.Revoke(ctx, short.ID)
		say("revoke it: %s", errOf(err))
	}
	l, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cli.Put(ctx, "leased", "x", clientv3.WithLease(l.ID))
	say("put leased: %s", errOf(err))
	_, err = cli.Put(ctx, "bad-lease", "x", clientv3.WithLease(l.ID+1000))
	say("put with an unknown lease: %s", errOf(err))
	ttl, err := cli.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys())
	say("time to live: %s keys %q", errOf(err), ttl.Keys)
	_, err = cli.Revoke(ctx, l.ID)
	say("revoke: %s", errOf(err))
	get("leased", "leased")
	_, err = cli.Revoke(ctx, l.ID)
	say("revoke again: %s", errOf(err))
	_, err = cli.KeepAliveOnce(ctx, l.ID)
	say("keep alive a revoked lease: %s", errOf(err))

	dr, err := cli.Delete(ctx, "c/", clientv3.WithPrefix(), clientv3.WithPrevKV())
	say("delete c/: %s deleted %d prev %d", errOf(err), dr.Deleted, len(dr.PrevKvs))

	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	cur, _ := cli.Get(ctx, "a")
	var evs []string
	for wr := range cli.Watch(wctx, "", clientv3.WithPrefix(), clientv3.WithRev(1), clientv3.WithPrevKV()) {
		for _, ev := range wr.Events {
			prev := ""
			if ev.PrevKv != nil {
				prev = string(ev.PrevKv.Value)
			}
			evs = append(evs, fmt.Sprintf("%s %s=%s@%d prev %q", ev.Type, ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision, prev))
			if ev.Kv.ModRevision == cur.Header.Revision {
				wcancel()
			}
		}
	}
	say("watch from 1:\n  %s", strings.Join(evs, "\n  "))
	return log
}

// TestLikeEtcd checks the store answers as a real etcd does.
func TestLikeEtcd(t *testing.T) {
	want := exercise(t, etcdtest.Start(t).Client(t))
	s := memetcd.New()
	cli := s.Client(context.Background(), "test")
	defer cli.Close()
	got := exercise(t, cli.Client)
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("memetcd: %s\n    etcd: %s", g, w)
		}
	}
}

// TestLeases checks a lease's keys go when it expires, an election moves
// to the next candidate then, and a store that is down expires nothing.
func TestLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memetcd.New()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c1, c2 := s.Client(ctx, "c1"), s.Client(ctx, "c2")
		defer c1.Close()
		defer c2.Close()
		campaign := func(c *memetcd.Client, name string) (*concurrency.Session, chan struct{}) {
			sess, err := concurrency.NewSession(c.Client, concurrency.WithTTL(2))
			if err != nil {
				t.Fatal(err)
			}
			won := make(chan struct{})
			go func() {
				if concurrency.NewElection(sess, "/e/").Campaign(ctx, name) == nil {
					close(won)
				}
			}()
			return sess, won
		}
		s1, won1 := campaign(c1, "one")
		defer s1.Close()
		<-won1
		s2, won2 := campaign(c2, "two")
		defer s2.Close()

		s.SetDown(true)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		select {
		case <-won2:
			t.Fatal("two won while etcd was down")
		default:
		}
		s.SetDown(false)
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case <-won2:
			t.Fatal("two won though one's lease was renewed when etcd came back")
		default:
		}

		c1.Cut(true) // one's renewals go unanswered: its lease expires
		time.Sleep(3 * time.Second)
		synctest.Wait()
		select {
		case <-won2:
		default:
			t.Fatal("two did not win once one's lease expired")
		}
		c1.Cut(false)
		s.Close()
		cancel()
		time.Sleep(time.Minute)
	})
}
