package scheduler

import (
	"container/heap"
	"slices"
	"strings"
)

// Shares returns each role's dominant share: the largest fraction, over
// CPU and memory, of the cluster's known capacity that the role's placed
// units need. Roles with placed units or a policy in Options are listed.
// Allocate compares shares divided by the roles' weights.
func (c *Cluster) Shares() map[string]float64 {
	out := make(map[string]float64, len(c.roles)+len(c.opts.Roles))
	for role := range c.opts.Roles {
		out[role] = 0
	}
	for role, ru := range c.roles {
		out[role] = c.dominantShare(ru.used)
	}
	return out
}

// dominantShare returns the largest fraction of the cluster's known
// capacity that used is, over CPU and memory.
func (c *Cluster) dominantShare(used Resources) float64 {
	s := 0.0
	if c.total.CPUPercent > 0 {
		s = float64(used.CPUPercent) / float64(c.total.CPUPercent)
	}
	if c.total.MemoryBytes > 0 {
		s = max(s, float64(used.MemoryBytes)/float64(c.total.MemoryBytes))
	}
	return s
}

// Allocate places a batch of pending units that are not global, sharing
// the cluster between their roles by weighted dominant resource fairness
// (Ghodsi et al., NSDI 2011): it repeatedly takes the role whose weighted
// dominant share (see Shares) is lowest, counting the units already
// placed, and decides its next pending unit (a role's units go in name
// order). A unit that cannot be placed is passed over, without holding up
// the rest of its role. Ties go to the role with fewer placed units per
// weight, then to the role name, so that roles of units that declare no
// resources take turns.
//
// Each placement is recorded as Decide then Place would (Displaced units
// are unplaced first), so the engine commits the returned decisions as
// they stand. A Displaced unit that is itself pending, placed earlier in
// the batch, is decided again: its decision is its final one. Other
// Displaced units were scheduled before: the engine deletes their schedule
// and decides them in a later batch. The decisions are returned in the
// order of pending. A global unit gets a decision without a machine; a
// unit listed twice gets the decision of its first listing; a unit already
// placed is decided as Decide does, and stays where it was if no machine
// fits.
func (c *Cluster) Allocate(pending []*Unit) []Decision {
	out := make([]Decision, len(pending))
	// A batch in name order without repeats (the engine's) is searched by
	// name; any other is indexed by a map, its repeats noted. The map was
	// the largest allocation of a batch of a million units.
	ordered := true
	for i := 1; i < len(pending) && ordered; i++ {
		ordered = pending[i-1].Name < pending[i].Name
	}
	var first map[string]int
	if !ordered {
		first = make(map[string]int, len(pending))
	}
	find := func(name string) (int, bool) {
		if first != nil {
			j, ok := first[name]
			return j, ok
		}
		return slices.BinarySearchFunc(pending, name, func(u *Unit, name string) int { return strings.Compare(u.Name, name) })
	}
	queues := map[string]*roleQueue{}
	var dups []int
	for i, u := range pending {
		if first != nil {
			if _, dup := first[u.Name]; dup {
				dups = append(dups, i)
				continue
			}
			first[u.Name] = i
		}
		if u.Fleet.Global {
			out[i] = c.Decide(u)
			continue
		}
		role := u.Role()
		q := queues[role]
		if q == nil {
			q = &roleQueue{role: role, weight: c.opts.policy(role).Weight}
			queues[role] = q
		}
		q.items = append(q.items, i)
	}
	h := make(roleHeap, 0, len(queues))
	for _, q := range queues {
		if !ordered {
			slices.SortFunc(q.items, func(a, b int) int { return strings.Compare(pending[a].Name, pending[b].Name) })
		}
		q.refresh(c)
		q.index = len(h)
		h = append(h, q)
	}
	heap.Init(&h)
	for len(h) > 0 {
		q := h[0]
		i := q.items[q.next]
		q.next++
		d := c.Decide(pending[i])
		out[i] = d
		touched := []*roleQueue{q}
		if d.Machine != "" {
			for _, name := range d.Displaced {
				var dq *roleQueue
				if pl := c.byName(name); pl != nil {
					dq = queues[pl.prep.role]
				}
				c.Unplace(name)
				if j, ok := find(name); ok && dq != nil && out[j].Machine != "" {
					// Placed earlier in this batch: decide it again.
					out[j] = Decision{}
					dq.items = append(dq.items, j)
				}
				if dq != nil {
					touched = append(touched, dq)
				}
			}
			c.Place(pending[i], d.Machine)
		}
		// The roles whose shares changed take their new places; a role
		// with no unit left leaves the heap, one given a unit back returns.
		for _, tq := range touched {
			tq.refresh(c)
			switch left := tq.next < len(tq.items); {
			case tq.index >= 0 && left:
				heap.Fix(&h, tq.index)
			case tq.index >= 0:
				heap.Remove(&h, tq.index)
			case left:
				heap.Push(&h, tq)
			}
		}
	}
	for _, i := range dups {
		out[i] = out[first[pending[i].Name]]
	}
	return out
}

// roleQueue is a role's pending units in Allocate.
type roleQueue struct {
	role   string
	weight float64
	items  []int // indexes into pending, by unit name
	next   int
	index  int // in the heap; -1 once popped

	share float64 // weighted dominant share
	count float64 // placed units per weight
}

func (q *roleQueue) refresh(c *Cluster) {
	q.share, q.count = 0, 0
	if ru := c.roles[q.role]; ru != nil {
		q.share = c.dominantShare(ru.used) / q.weight
		q.count = float64(ru.count) / q.weight
	}
}

// roleHeap orders roles by weighted dominant share, then placed units per
// weight, then name.
type roleHeap []*roleQueue

func (h roleHeap) Len() int { return len(h) }
func (h roleHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.share != b.share {
		return a.share < b.share
	}
	if a.count != b.count {
		return a.count < b.count
	}
	return a.role < b.role
}
func (h roleHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *roleHeap) Push(x any) {
	q := x.(*roleQueue)
	q.index = len(*h)
	*h = append(*h, q)
}
func (h *roleHeap) Pop() any {
	old := *h
	q := old[len(old)-1]
	q.index = -1
	*h = old[:len(old)-1]
	return q
}
