package scheduler

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/flotilla/flotilla/internal/unit"
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// mach returns a machine with metadata "k=v,k=v" and the given capacity.
func mach(id, metadata string, cpuPercent, memBytes int64) Machine {
	md, err := unit.ParseMetadata(metadata)
	if err != nil {
		panic(err)
	}
	return Machine{ID: id, Metadata: md, Capacity: Resources{cpuPercent, memBytes}}
}

// mk parses a unit whose options are given as "Name=value" strings:
// CPUQuota= and MemoryMax= go in [Service], the rest in [X-Fleet].
func mk(t testing.TB, name string, opts ...string) *Unit {
	t.Helper()
	var service, fleet strings.Builder
	service.WriteString("[Service]\nExecStart=/bin/true\n")
	for _, o := range opts {
		if strings.HasPrefix(o, "CPUQuota=") || strings.HasPrefix(o, "MemoryMax=") {
			service.WriteString(o + "\n")
		} else {
			fleet.WriteString(o + "\n")
		}
	}
	text := service.String()
	if fleet.Len() > 0 {
		text += "[X-Fleet]\n" + fleet.String()
	}
	f, err := unit.Parse(name, []byte(text))
	if err != nil {
		t.Fatalf("unit.Parse(%q) = %v", name, err)
	}
	u := NewUnit(f)
	u.ID = testIDs.of(name)
	return u
}

// testIDs numbers the units tests make (mk), as an owner would, for
// Clusters told to use IDs (numbered).
var testIDs = idRegistry{ids: map[string]int32{}}

type idRegistry struct {
	mu  sync.Mutex
	ids map[string]int32
}

// of returns name's ID, numbering it if new.
func (r *idRegistry) of(name string) int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.ids[name]
	if !ok {
		id = int32(len(r.ids) + 1)
		r.ids[name] = id
	}
	return id
}

func (r *idRegistry) lookup(name string) (int32, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.ids[name]
	return id, ok
}

// numbered returns c set to use the IDs units made by mk carry.
func numbered(c *Cluster) *Cluster {
	c.SetIDs(testIDs.lookup)
	return c
}

// at is a unit placed on a machine, for building clusters.
type at struct {
	u *Unit
	m string
}

// build returns a cluster of machines with the units placed.
func build(ms []Machine, placed []at) *Cluster {
	c := NewCluster()
	for _, m := range ms {
		c.SetMachine(m)
	}
	for _, p := range placed {
		c.Place(p.u, p.m)
	}
	return c
}

// machines returns n machines "m01".."mNN" with the same metadata and
// capacity.
func machines(n int, metadata string, cpuPercent, memBytes int64) []Machine {
	out := make([]Machine, n)
	for i := range out {
		out[i] = mach(machineID(i+1), metadata, cpuPercent, memBytes)
	}
	return out
}

func machineID(i int) string {
	return "m" + string(rune('0'+i/10)) + string(rune('0'+i%10))
}

// state renders the placements, for comparing clusters: "a:m1,m2 b:m3".
func (c *Cluster) state() string {
	byUnit := map[string][]string{}
	for _, id := range c.ids {
		for _, pl := range c.machines[id].placed {
			byUnit[pl.u.Name] = append(byUnit[pl.u.Name], id)
		}
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(byUnit)) {
		parts = append(parts, name+":"+strings.Join(byUnit[name], ","))
	}
	return strings.Join(parts, " ")
}
