package agentpb

import "github.com/cespare/xxhash/v2"

// WantsDigest sums up a desired set: how many units, and the sum of a hash
// of each one's name, file hash, desired state and global flag. The sum
// does not depend on the order the units are added in, so the agent adds
// them from its map and the leader from its lists. Two sets that differ
// sum alike with a chance of one in 2^64; a mismatch only costs sending
// the set whole.
type WantsDigest struct {
	Count uint32
	Sum   uint64
	h     xxhash.Digest
}

// Add adds a unit of the set.
func (d *WantsDigest) Add(name, hash, state string, global bool) {
	d.h.Reset()
	d.h.WriteString(name)
	d.h.WriteString("\x00")
	d.h.WriteString(hash)
	d.h.WriteString("\x00")
	d.h.WriteString(state)
	if global {
		d.h.WriteString("\x00g")
	}
	d.Count++
	d.Sum += d.h.Sum64()
}

// Same reports whether d sums up the set the Hello h did; false when h gave
// none.
func (d *WantsDigest) Same(h *Hello) bool {
	return h.GetWantsCount() > 0 && d.Count == h.GetWantsCount() && d.Sum == h.GetWantsDigest()
}
