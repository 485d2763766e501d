package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestOrder: machines come, go and change rank at random, many more than a
// chunk holds; the order always holds every machine once, sorted, in
// chunks of 1 to maxChunk, and finds each where it is.
func TestOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	o := order{less: spreadLess}
	in := map[*machine]bool{}
	var ids int
	newMachine := func() *machine {
		ids++
		return &machine{Machine: Machine{ID: fmt.Sprintf("m%05d", ids)}, free: r.Int64N(4)}
	}
	for step := range 20000 {
		switch k := r.IntN(10); {
		case k < 4 || len(in) < 10:
			m := newMachine()
			o.insert(m)
			in[m] = true
		case k < 6:
			for m := range in { // a random one (map order)
				o.remove(m)
				delete(in, m)
				break
			}
		default:
			for m := range in {
				p := o.index(m)
				// The spread rank's keys: its unit count, then free.
				if r.IntN(2) == 0 {
					m.placed = append(m.placed, nil)
				} else {
					m.free = r.Int64N(4)
				}
				o.fix(p)
				break
			}
		}
		if step%97 != 0 {
			continue
		}
		all := o.all()
		if len(all) != len(in) {
			t.Fatalf("step %d: order holds %d machines; want %d", step, len(all), len(in))
		}
		want := slices.Clone(all)
		slices.SortFunc(want, func(a, b *machine) int {
			if spreadLess(a, b) {
				return -1
			}
			return 1
		})
		if !slices.Equal(all, want) {
			t.Fatalf("step %d: order not sorted", step)
		}
		for i, ch := range o.chunks {
			if len(ch) == 0 || len(ch) > maxChunk {
				t.Fatalf("step %d: chunk %d of %d holds %d; want 1 to %d", step, i, len(o.chunks), len(ch), maxChunk)
			}
		}
		for m := range in {
			if o.at(o.index(m)) != m {
				t.Fatalf("step %d: index(%s) is another machine", step, m.ID)
			}
		}
	}
	if len(o.chunks) < 3 {
		t.Fatalf("the test never had more than %d chunks", len(o.chunks))
	}
}
