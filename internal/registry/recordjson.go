package registry

import (
	"encoding/json"
	"unicode/utf8"
)

// A unit record is decoded by hand when it can be: a standby following the
// record, or a new leader loading it, decodes a record a unit, a million
// of them. encoding/json takes 0.8 µs a record by reflection, this a
// seventh of that (BenchmarkRecordJSON). It reads what encoding/json reads
// (TestRecordJSON), and leaves to encoding/json anything but the flat
// object of plain strings that encoding/json writes for a record of
// instance (no file inline, nothing to escape).

// unmarshalRecord is json.Unmarshal(val, r).
func unmarshalRecord(val []byte, r *Record) error {
	if fastRecord(val, r) {
		return nil
	}
	return json.Unmarshal(val, r)
}

// fastRecord decodes val into r if it is a flat object of the record's
// fields with string values free of escapes and of bytes encoding/json
// would treat otherwise, and reports whether it did; r is unchanged when
// it did not. The strings share one copy of val.
func fastRecord(val []byte, r *Record) bool {
	n := len(val)
	if n < 2 || val[0] != '{' || val[n-1] != '}' {
		return false
	}
	s := string(val) // one copy, shared by the fields
	var out Record = *r
	i := 1
	if s[i] == '}' {
		*r = out
		return i == n-1
	}
	for {
		key, next, ok := plainString(s, i)
		if !ok || next >= n || s[next] != ':' {
			return false
		}
		v, next2, ok := plainString(s, next+1)
		if !ok {
			return false
		}
		switch key {
		case "name":
			out.Name = v
		case "file":
			out.File = v
		case "content":
			out.Content = v
		case "desiredState":
			out.DesiredState = v
		case "machine":
			out.Machine = v
		default:
			return false // another field, or another case of one: encoding/json's rules
		}
		i = next2
		if i >= n {
			return false
		}
		if s[i] == '}' {
			if i != n-1 {
				return false
			}
			*r = out
			return true
		}
		if s[i] != ',' {
			return false
		}
		i++
	}
}

// plainString reads the JSON string at s[i] if it has no escape, control
// character or byte beyond ASCII, returning it and the index after it.
func plainString(s string, i int) (string, int, bool) {
	if i >= len(s) || s[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"':
			return s[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			return "", 0, false
		}
	}
	return "", 0, false
}

// appendRecord appends r's JSON as encoding/json writes it (TestRecordJSON
// compares them), in one pass and without reflection: PutUnit runs once a
// unit placed, a million times at a start, and json.Marshal and the copy
// of its result into a string were three allocations a record.
func appendRecord(b []byte, r Record) []byte {
	b = append(b, '{')
	for i, f := range [...]struct {
		key, v    string
		omitEmpty bool
	}{{`"name":`, r.Name, true}, {`"file":`, r.File, true}, {`"content":`, r.Content, true},
		{`"desiredState":`, r.DesiredState, false}, {`"machine":`, r.Machine, true}} {
		if f.omitEmpty && f.v == "" {
			continue
		}
		if i > 0 && len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, f.key...)
		b = appendJSONString(b, f.v)
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string as encoding/json writes it:
// strings of printable ASCII that need no escape (names, keys, states,
// hashes: nearly all) are copied as they are; any other is left to
// encoding/json, whose escapes (HTML characters, U+2028, invalid UTF-8)
// are the ones readers have always seen.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
