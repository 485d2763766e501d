package registry

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestPack: random requests are packed into transactions within the op and
// byte bounds, every op exactly once and in order, a request that fits in
// one transaction never split, a request writing a key an earlier one
// wrote left for later, and each transaction's requests counted.
func TestPack(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 500 {
		c := &Committer{maxOps: 1 + rng.IntN(20), maxBytes: 64 + rng.IntN(400)}
		var pending []*commitReq
		for range 1 + rng.IntN(6) {
			var ops []Op
			for range 1 + rng.IntN(3*c.maxOps) {
				o := Op{Key: fmt.Sprintf("k%d", rng.IntN(200)), Value: strings.Repeat("v", rng.IntN(100))}
				if rng.IntN(5) == 0 {
					o = Op{Key: o.Key, Delete: true}
				}
				ops = append(ops, o)
			}
			pending = append(pending, &commitReq{ops: ops})
		}
		var keys map[string]bool
		if len(pending) > 1 {
			keys = map[string]bool{}
		}
		plans, later := c.pack(pending, keys)
		var want, got []Op
		written := map[string]bool{}
		for _, r := range pending {
			if slices.Contains(later, r) {
				if !touchesAny(written, r.ops) {
					t.Fatalf("iter %d: a request left for later writes no key written before it", iter)
				}
				continue
			}
			for _, o := range r.ops {
				written[o.Key] = true
			}
			want = append(want, r.ops...)
		}
		txns := map[*commitReq]int{}
		for _, p := range plans {
			ops := p.requestOps()
			if len(ops) != p.n || p.n == 0 || p.n > c.maxOps {
				t.Fatalf("iter %d: a transaction of %d ops (n %d, max %d)", iter, len(ops), p.n, c.maxOps)
			}
			size := 0
			for _, run := range p.runs {
				size += opsSize(run)
			}
			for _, o := range ops { // what etcd is sent, as the requests' ops
				if put := o.GetRequestPut(); put != nil {
					got = append(got, Op{Key: string(put.Key), Value: string(put.Value)})
				} else {
					got = append(got, Op{Key: string(o.GetRequestDeleteRange().Key), Delete: true})
				}
			}
			if p.n > 1 && size > c.maxBytes {
				t.Fatalf("iter %d: a transaction of %d bytes (max %d)", iter, size, c.maxBytes)
			}
			for _, r := range p.parts {
				txns[r]++
			}
			if len(p.parts) != len(p.runs) {
				t.Fatalf("iter %d: %d requests for %d runs", iter, len(p.parts), len(p.runs))
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("iter %d: packed ops differ from the requests' ops", iter)
		}
		for _, r := range pending {
			if r.remaining != txns[r] {
				t.Fatalf("iter %d: a request counts %d transactions, is in %d", iter, r.remaining, txns[r])
			}
			if len(r.ops) <= c.maxOps && opsSize(r.ops) <= c.maxBytes && txns[r] > 1 {
				t.Fatalf("iter %d: a request that fits in one transaction was split in %d", iter, txns[r])
			}
		}
	}
}
