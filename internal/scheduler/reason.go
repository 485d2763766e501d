package scheduler

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/flotilla/flotilla/internal/unit"
)

// This file turns rejections into the reason a unit is not placed: one
// clause per kind of rejection, in chain order, each naming the first few
// machines by ID, for example
//
//	conflicts with web@2.service on m1, m2; needs 4G memory, largest free is 1G on m3, m4, m5, m6, m7 and 12 more

// maxListed is how many machines a clause names before "and N more".
const maxListed = 5

// group gathers the rejections of one kind.
type group struct {
	n       int
	shown   []rejection // the first maxListed by machine ID, sorted
	maxFree int64       // for CPU and memory, the largest free amount
}

type groups [numKinds]group

func (gs *groups) add(r rejection) {
	g := &gs[r.kind]
	if g.n == 0 || r.free > g.maxFree {
		g.maxFree = r.free
	}
	g.n++
	g.offer(r)
}

// offer keeps r among the shown rejections if its machine sorts among the
// first maxListed.
func (g *group) offer(r rejection) {
	i := len(g.shown)
	for i > 0 && g.shown[i-1].m.ID > r.m.ID {
		i--
	}
	if i >= maxListed {
		return
	}
	if len(g.shown) < maxListed {
		g.shown = append(g.shown, rejection{})
	}
	copy(g.shown[i+1:], g.shown[i:])
	g.shown[i] = r
}

// list names the group's machines: "m1, m2, m3, m4, m5 and 7 more".
func (g *group) list() string {
	ids := make([]string, len(g.shown))
	for i, r := range g.shown {
		ids[i] = r.m.ID
	}
	return strings.Join(ids, ", ") + g.more()
}

func (g *group) more() string {
	if n := g.n - len(g.shown); n > 0 {
		return fmt.Sprintf(" and %d more", n)
	}
	return ""
}

// explain gathers the rejections of a failed decision into its reason.
// Machines the metadata index kept out of the candidates count as
// rejected for their metadata.
func (c *Cluster) explain(e *eval, cands []*machine, metaSubset bool) string {
	var gs groups
	for _, r := range c.rej {
		gs.add(r)
	}
	if metaSubset {
		c.epoch++
		for _, m := range cands {
			m.mark = c.epoch
		}
		g := &gs[kindMetadata]
		g.n += len(c.machines) - len(cands)
		for i, listed := 0, 0; i < len(c.ids) && listed < maxListed; i++ {
			if m := c.machines[c.ids[i]]; m.mark != c.epoch {
				g.offer(rejection{kind: kindMetadata, m: m})
				listed++
			}
		}
	}
	return c.render(e, &gs, true)
}

// render words the groups, in chain order. whole is set when the groups
// cover every machine of the cluster (a decision), not one (Fits).
func (c *Cluster) render(e *eval, gs *groups, whole bool) string {
	var parts []string
	for k := range numKinds {
		if g := &gs[k]; g.n > 0 {
			parts = append(parts, c.phrase(e, k, g, whole))
		}
	}
	return strings.Join(parts, "; ")
}

func (c *Cluster) phrase(e *eval, k kind, g *group, whole bool) string {
	on := " on " + g.list()
	switch k {
	case kindDriver:
		return "needs " + unit.DriversReason(e.u.Name, e.u.Drivers) + ", not" + on
	case kindMachineID:
		return "MachineID=" + e.u.Fleet.MachineID + " rules out " + g.list()
	case kindMetadata:
		if whole && g.n == len(c.machines) {
			return "no machine has " + formatReq(e.pr.req)
		}
		return "metadata does not match " + formatReq(e.pr.req) + on
	case kindMachineOf:
		peer := g.shown[0].name
		if len(placedOn(c, peer)) == 0 {
			return "MachineOf=" + peer + ": that unit is not scheduled"
		}
		return "MachineOf=" + peer + ": that unit is not" + on
	case kindConflict:
		return c.named("conflicts with", g, e.conflictWith)
	case kindReplacedBy:
		return c.named("replaced by", g, nil)
	case kindReplacesGlobal:
		return "Replaces=" + g.shown[0].name + " names a global unit, which runs" + on
	case kindReplaces:
		return "Replaces=" + g.shown[0].name + ": that unit runs" + on
	case kindCPU:
		return fmt.Sprintf("needs %d%% CPU, largest free is %d%%%s", e.u.Needs.CPUPercent, max(g.maxFree, 0), on)
	case kindMemory:
		return fmt.Sprintf("needs %s memory, largest free is %s%s", formatBytes(e.u.Needs.MemoryBytes), formatBytes(max(g.maxFree, 0)), on)
	}
	return "rejected" + on
}

// named words a group whose rejections each name another unit:
// "conflicts with a on m1, m2" when the shown machines all name the same
// one, "conflicts with a on m1, b on m2 and 3 more" otherwise. name finds
// the unit of a rejection that does not record it.
func (c *Cluster) named(verb string, g *group, name func(*machine) string) string {
	names := make([]string, len(g.shown))
	same := true
	for i, r := range g.shown {
		if names[i] = r.name; name != nil {
			names[i] = name(r.m)
		}
		same = same && names[i] == names[0]
	}
	if same {
		return verb + " " + names[0] + " on " + g.list()
	}
	parts := make([]string, len(names))
	for i, r := range g.shown {
		parts[i] = names[i] + " on " + r.m.ID
	}
	return verb + " " + strings.Join(parts, ", ") + g.more()
}

// formatReq words metadata requirements as "region=us|eu, disk=ssd".
func formatReq(req []metaReq) string {
	parts := make([]string, len(req))
	for i, r := range req {
		parts[i] = r.key + "=" + strings.Join(r.values, "|")
	}
	return strings.Join(parts, ", ")
}

// formatResources words the dimensions of r that mask declares:
// "cpu 400%, memory 8G".
func formatResources(r, mask Resources) string {
	var parts []string
	if mask.CPUPercent != 0 {
		parts = append(parts, fmt.Sprintf("cpu %d%%", r.CPUPercent))
	}
	if mask.MemoryBytes != 0 {
		parts = append(parts, "memory "+formatBytes(r.MemoryBytes))
	}
	return strings.Join(parts, ", ")
}

// formatBytes words a byte count the way systemd's MemoryMax= takes it: in
// the largest unit (K, M, G, T, of 1024) that divides it, else with one
// decimal in the largest unit below it.
func formatBytes(b int64) string {
	if b < 0 {
		return "-" + formatBytes(-b)
	}
	units := []struct {
		suffix string
		size   int64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}}
	for _, u := range units {
		if b >= u.size && b%u.size == 0 {
			return strconv.FormatInt(b/u.size, 10) + u.suffix
		}
	}
	for _, u := range units {
		if b >= u.size {
			return strconv.FormatFloat(float64(b)/float64(u.size), 'f', 1, 64) + u.suffix
		}
	}
	return strconv.FormatInt(b, 10) + "B"
}
