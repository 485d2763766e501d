package unithide

import (
	"reflect"
	"strings"
	"testing"
)

// TestSpawnFrames: requests and replies read back as they were written,
// frames split anywhere wait for the rest, and a frame no peer would send
// is refused with what is wrong with it.
func TestSpawnFrames(t *testing.T) {
	reqs := []spawnRequest{
		{ID: 1, Path: "/bin/sh", Args: []string{"sh", "-c", "exit 3"}, Env: []string{"A=1", "B="}, Dir: "/tmp", UID: "65534", GID: "65534", Groups: ","},
		{ID: 1 << 40, Kill: true},
		{ID: 2, Path: "/bin/true", Args: []string{"true"}, Env: []string{}, UID: "-", GID: "-", Groups: "-"},
	}
	var b []byte
	for i := range reqs {
		b = appendRequest(b, &reqs[i])
	}
	// Fed a byte at a time, every request comes out once whole.
	var got []spawnRequest
	var buf []byte
	for i := range b {
		buf = append(buf, b[i])
		for {
			body, rest, ok, err := nextFrame(buf)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			r, err := decodeRequest(body)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, r)
			buf = rest
		}
	}
	if len(buf) != 0 || !reflect.DeepEqual(got, reqs) {
		t.Errorf("requests read back as\n%+v\nwant\n%+v (%d bytes left)", got, reqs, len(buf))
	}

	replies := []spawnReply{
		{ID: 7, Status: 3 << 8, Output: "no\n"},
		{ID: 8, Err: "fork/exec /nope: no such file or directory"},
		{ID: 9, Status: 9, Output: strings.Repeat("x", maxSpawnOutput)},
	}
	b = nil
	for i := range replies {
		b = appendReply(b, &replies[i])
	}
	for i := range replies {
		body, rest, ok, err := nextFrame(b)
		if !ok || err != nil {
			t.Fatalf("reply %d: ok %v, %v", i, ok, err)
		}
		r, err := decodeReply(body)
		if err != nil || !reflect.DeepEqual(r, replies[i]) {
			t.Errorf("reply %d read back as %+v, %v; want %+v", i, r, err, replies[i])
		}
		b = rest
	}

	one := appendRequest(nil, &reqs[0])
	for _, c := range []struct {
		name  string
		frame []byte
		want  string
	}{
		{"empty", []byte{0, 0, 0, 0}, "a frame of 0 bytes"},
		{"too long", []byte{0, 0, 0, 0x10}, "a frame of 268435456 bytes"},
		{"unknown kind", []byte{1, 0, 0, 0, 9}, "a request frame of kind 9"},
		{"cut short", append([]byte{byte(len(one) - 4 - 3), 0, 0, 0}, one[4:len(one)-3]...), "a frame ends early"},
		{"trailing bytes", append(append([]byte{byte(len(one) - 4 + 2), 0, 0, 0}, one[4:]...), 0, 0), "2 bytes after a frame's fields"},
	} {
		body, _, ok, err := nextFrame(c.frame)
		if ok {
			_, err = decodeRequest(body)
		}
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if _, err := decodeReply([]byte{frameStart}); err == nil || err.Error() != "a reply frame of kind 1" {
		t.Errorf("a request read as a reply: %v", err)
	}
}

// FuzzSpawnFrames: whatever bytes arrive, splitting and decoding them
// returns frames or an error, never a panic, and a request decoded is
// written back to the same frame.
func FuzzSpawnFrames(f *testing.F) {
	f.Add(appendRequest(nil, &spawnRequest{ID: 3, Path: "/bin/true", Args: []string{"true"}, Env: []string{"A=1"}, UID: "-", GID: "-", Groups: "-"}))
	f.Add(appendRequest(nil, &spawnRequest{ID: 4, Kill: true}))
	f.Add(appendReply(nil, &spawnReply{ID: 5, Status: 256, Output: "out"}))
	f.Add([]byte{5, 0, 0, 0, frameStart, 0x80, 0x80, 0x80, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		for {
			body, rest, ok, err := nextFrame(b)
			if !ok || err != nil {
				return
			}
			if len(rest) >= len(b) {
				t.Fatalf("nextFrame took nothing of %d bytes", len(b))
			}
			b = rest
			if q, err := decodeRequest(body); err == nil {
				if again := appendRequest(nil, &q); string(again[4:]) != string(body) && canonical(body) {
					t.Fatalf("request %+v written back as %x, read from %x", q, again[4:], body)
				}
			}
			decodeReply(body)
		}
	})
}

// canonical says whether a frame's uvarints are all in their shortest
// form, as appendRequest writes them (binary.Uvarint also reads longer
// ones, which decode to the same request).
func canonical(body []byte) bool {
	q, err := decodeRequest(body)
	if err != nil {
		return false
	}
	return len(appendRequest(nil, &q))-4 == len(body)
}
