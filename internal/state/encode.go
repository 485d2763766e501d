package state

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"

	apiv1 "github.com/flotilla/flotilla/api"
)

// AppendState appends st as JSON, the same document encoding/json writes
// for apiv1.State (BenchmarkEncode compares the two; this one is several
// times faster, which matters at 100,000 units).
func AppendState(b []byte, st *apiv1.State) []byte {
	units := make([]Unit, len(st.Units))
	for i := range st.Units {
		units[i] = NewUnit(st.Units[i])
	}
	return appendTail(appendHead(b, st), units, st.Total, st.Next)
}

// appendHead appends the document up to its first unit: what every view of
// a snapshot shares (its machines among them).
func appendHead(b []byte, st *apiv1.State) []byte {
	b = append(b, `{"revision":`...)
	b = strconv.AppendInt(b, st.Revision, 10)
	b = append(b, `,"generation":`...)
	b = strconv.AppendUint(b, st.Generation, 10)
	b = append(b, `,"leader":`...)
	b = appendString(b, st.Leader)
	if st.EtcdUnreachableSince != "" {
		b = append(b, `,"etcdUnreachableSince":`...)
		b = appendString(b, st.EtcdUnreachableSince)
	}
	b = append(b, `,"machines":[`...)
	for i := range st.Machines {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendMachine(b, &st.Machines[i])
	}
	return append(b, `],"units":[`...)
}

// appendTail appends the rest of the document after appendHead's: units,
// then the total of the view and the name to page on.
func appendTail(b []byte, units []Unit, total int, next string) []byte {
	for i := range units {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendUnit(b, &units[i])
	}
	return appendTotal(b, total, next)
}

// appendUnits appends units as appendTail does, and returns where each
// begins in b (the last entry: where the last one ends; nil past 4 GiB).
// The units also in base (an encoded snapshot, or nil) and the same there
// are copied from its bytes, a run of them at a time: between two states
// of a cluster most units are unchanged, and a copy costs a fraction of
// an encoding. Both snapshots' units are in name order.
func appendUnits(b []byte, units []Unit, base *Snapshot) ([]byte, []uint32) {
	at := make([]uint32, len(units)+1)
	var (
		old   []Unit
		oldAt []uint32
	)
	if base != nil {
		old, oldAt = base.Units, base.unitAt
	}
	p := 0 // units[i]'s place in old, or where it would be
	start := len(b)
	for i := 0; i < len(units); {
		b = room(b, unitRoom, start, i, len(units))
		if i > 0 {
			b = append(b, ',')
		}
		// (Mostly the same string: == is a pointer's compare then.)
		for p < len(old) && old[p].Name != units[i].Name && old[p].Name < units[i].Name {
			p++
		}
		if p == len(old) || !sameUnit(&old[p], &units[i]) {
			at[i] = uint32(len(b))
			b = appendUnit(b, &units[i])
			i++
			continue
		}
		i0, p0 := i, p
		for i < len(units) && p < len(old) && sameUnit(&old[p], &units[i]) {
			i++
			p++
		}
		from, to := int(oldAt[p0]), int(oldAt[p])
		if p < len(old) {
			to-- // the comma before old[p]
		}
		shift := uint32(len(b) - from)
		for k := i0; k < i; k++ {
			at[k] = oldAt[p0+k-i0] + shift
		}
		b = append(room(b, to-from, start, i0, len(units)), base.json[from:to]...)
	}
	at[len(units)] = uint32(len(b))
	if len(b) > math.MaxUint32 {
		return b, nil
	}
	return b, at
}

// sameUnit reports whether a and b encode to the same bytes.
func sameUnit(a, b *Unit) bool {
	if a.Name != b.Name {
		return false
	}
	x, y := a.Shared, b.Shared
	if x == y {
		return true
	}
	return x.Machine == y.Machine && x.Reason == y.Reason && (x.Spec == y.Spec || *x.Spec == *y.Spec) &&
		(x.Status == y.Status || x.Status != nil && y.Status != nil && *x.Status == *y.Status)
}

// appendTotal ends the document: the total of the view and the name to
// page on.
func appendTotal(b []byte, total int, next string) []byte {
	b = append(b, `],"total":`...)
	b = strconv.AppendInt(b, int64(total), 10)
	if next != "" {
		b = append(b, `,"next":`...)
		b = appendString(b, next)
	}
	return append(b, "}\n"...)
}

func appendMachine(b []byte, m *apiv1.Machine) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, m.ID)
	b = append(b, `,"ip":`...)
	b = appendString(b, m.IP)
	b = append(b, `,"metadata":{`...)
	keys := make([]string, 0, len(m.Metadata))
	for k := range m.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, m.Metadata[k])
	}
	b = append(b, `},"leader":`...)
	b = strconv.AppendBool(b, m.Leader)
	if m.APIAddr != "" {
		b = append(b, `,"apiAddr":`...)
		b = appendString(b, m.APIAddr)
	}
	if m.Version != "" {
		b = append(b, `,"version":`...)
		b = appendString(b, m.Version)
	}
	if m.Protocol != 0 {
		b = append(b, `,"protocol":`...)
		b = strconv.AppendInt(b, int64(m.Protocol), 10)
	}
	b = append(b, `,"units":`...)
	b = strconv.AppendInt(b, int64(m.Units), 10)
	if !m.ConnectedAt.IsZero() { // as time.Time's MarshalJSON
		b = append(b, `,"connectedAt":"`...)
		b = m.ConnectedAt.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	b = append(b, `,"capacity":`...)
	b = appendResources(b, m.Capacity)
	b = append(b, `,"free":`...)
	b = appendResources(b, m.Free)
	if m.Draining {
		b = append(b, `,"draining":true`...)
	}
	b = append(b, `,"drivers":`...)
	if m.Drivers == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, d := range m.Drivers {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, d)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

func appendResources(b []byte, r apiv1.Resources) []byte {
	b = append(b, `{"cpuPercent":`...)
	b = strconv.AppendInt(b, r.CPUPercent, 10)
	b = append(b, `,"memoryBytes":`...)
	b = strconv.AppendInt(b, r.MemoryBytes, 10)
	return append(b, '}')
}

func appendUnit(b []byte, u *Unit) []byte {
	b = append(b, `{"name":`...)
	b = appendString(b, u.Name)
	b = append(b, `,"hash":`...)
	b = appendString(b, u.Spec.Hash)
	b = append(b, `,"desiredState":`...)
	b = appendString(b, u.Spec.DesiredState)
	b = appendOpt(b, `,"machine":`, u.Machine)
	if u.Spec.Global {
		b = append(b, `,"global":true`...)
	}
	if u.Spec.Singleton {
		b = append(b, `,"singleton":true`...)
	}
	b = appendOpt(b, `,"lostAfter":`, u.Spec.LostAfter)
	if st := u.Status; st != nil {
		b = appendOpt(b, `,"load":`, st.Load)
		b = appendOpt(b, `,"active":`, st.Active)
		b = appendOpt(b, `,"sub":`, st.Sub)
		b = appendOpt(b, `,"health":`, st.Health)
	}
	b = appendOpt(b, `,"reason":`, u.Reason)
	return append(b, '}')
}

func appendOpt(b []byte, key, v string) []byte {
	if v == "" {
		return b
	}
	b = append(b, key...)
	return appendString(b, v)
}

const hex = "0123456789abcdef"

// appendString appends s as a JSON string, escaping as encoding/json does
// (including <, >, & and U+2028/U+2029, and replacing invalid UTF-8).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// unitRoom is the room appendUnits makes before encoding a unit: more than
// nearly any unit takes (one that takes more grows b as append does).
const unitRoom = 2048

// room returns b with room for n more bytes. Where it must grow b, done of
// total units having been written from b[start:], it grows b to what the
// units left are likely to take (as many bytes each as the ones written
// took, or unitGuess before any, and a sixteenth more), not by doubling:
// an answer is megabytes (hundreds of them at a million units), and each
// doubling copies it all again. Pollers read a new state every tenth of a
// second during a start, and each grew its buffer a few times over when
// its units grew (states and machines filled in) past the last answer's
// size.
func room(b []byte, n, start, done, total int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	left, each := total-done, unitGuess
	if done > 0 {
		each = (len(b) - start) / done
	}
	return slices.Grow(b, n+each*left+each*left/16)
}

// unitGuess is about what a unit takes encoded, before any is.
const unitGuess = 256
