package unit

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"
)

// hashOptions returns the hex SHA-1 of the canonical serialization of a
// unit's options: a unit file holding each section once, in the order
// [Unit], [Service], [Install], [X-Fleet], with that section's options in
// file order, each as "Name=value" with the value's unquoted whitespace
// collapsed. Comments, blank lines, line continuations, spacing around "="
// and between words, the order and splitting of sections, and deprecated
// [X-Fleet] spellings therefore do not change the hash; any change to an
// option's name, value or position within its section does.
//
// [X-Fleet] values are hashed as parsed, after specifier expansion, so
// instances of one template hash differently when their [X-Fleet]
// requirements differ.
func hashOptions(opts []option) string {
	h := sha1.New()
	h.Write([]byte(canonical(opts)))
	return hex.EncodeToString(h.Sum(nil))
}

// canonical returns the canonical serialization of opts.
func canonical(opts []option) string {
	var b strings.Builder
	for _, section := range sections {
		header := false
		for _, o := range opts {
			if o.section != section {
				continue
			}
			if !header {
				b.WriteString("[" + section + "]\n")
				header = true
			}
			b.WriteString(o.name + "=" + o.canon + "\n")
		}
	}
	return b.String()
}

// ShortHash returns the abbreviated form of a hash, its first 7 characters,
// as fleetctl showed it.
func ShortHash(h string) string {
	if len(h) > 7 {
		return h[:7]
	}
	return h
}
