package unithide

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The spawner's requests and replies travel as frames: a 4-byte
// little-endian length, then the frame's fields, integers as uvarints and
// strings as a uvarint length and the bytes. A frame is decoded with no
// reflection and no copy beyond its strings, and the frames of one grid
// slot's probes go in one write each way. JSON (encoding/json, what the
// spawner spoke before) was a tenth of the spawner's CPU and as much of
// the supervisor's per probe; gob and protobuf were close, but both carry
// more than two fixed records need (gob its type descriptions, protobuf a
// generated package and its runtime).

const (
	frameStart = 1 // spawnRequest to start a command
	frameKill  = 2 // spawnRequest with Kill
	frameReply = 3 // spawnReply

	maxFrame = 16 << 20 // a command's argv and environment, or a reply's output, are far smaller
)

// appendRequest appends r's frame to b.
func appendRequest(b []byte, r *spawnRequest) []byte {
	at := len(b)
	b = append(b, 0, 0, 0, 0)
	if r.Kill {
		b = append(b, frameKill)
		b = binary.AppendUvarint(b, r.ID)
		return endFrame(b, at)
	}
	b = append(b, frameStart)
	b = binary.AppendUvarint(b, r.ID)
	for _, s := range [...]string{r.Path, r.Dir, r.UID, r.GID, r.Groups} {
		b = appendString(b, s)
	}
	b = appendStrings(b, r.Args)
	b = appendStrings(b, r.Env)
	return endFrame(b, at)
}

// appendReply appends r's frame to b.
func appendReply(b []byte, r *spawnReply) []byte {
	at := len(b)
	b = append(b, 0, 0, 0, 0, frameReply)
	b = binary.AppendUvarint(b, r.ID)
	b = binary.AppendUvarint(b, uint64(uint32(r.Status)))
	b = appendString(b, r.Err)
	b = appendString(b, r.Output)
	return endFrame(b, at)
}

func endFrame(b []byte, at int) []byte {
	binary.LittleEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendStrings(b []byte, ss []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = appendString(b, s)
	}
	return b
}

// nextFrame splits the first whole frame off b: its body, and what
// follows it. ok is false when b does not yet hold a whole frame; err
// names a frame no peer of ours would send.
func nextFrame(b []byte) (body, rest []byte, ok bool, err error) {
	if len(b) < 4 {
		return nil, b, false, nil
	}
	n := binary.LittleEndian.Uint32(b)
	if n == 0 || n > maxFrame {
		return nil, b, false, fmt.Errorf("a frame of %d bytes", n)
	}
	if uint64(len(b)-4) < uint64(n) {
		return nil, b, false, nil
	}
	return b[4 : 4+n], b[4+n:], true, nil
}

// frameReader reads a frame's fields; its first error sticks.
type frameReader struct {
	b   []byte
	err error
}

var errShortFrame = errors.New("a frame ends early")

func (r *frameReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errShortFrame
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *frameReader) string() string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.err = errShortFrame
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *frameReader) strings() []string {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) { // each string takes a byte at least
		r.err = errShortFrame
		return nil
	}
	ss := make([]string, n)
	for i := range ss {
		ss[i] = r.string()
	}
	return ss
}

func (r *frameReader) end() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d bytes after a frame's fields", len(r.b))
	}
	return r.err
}

// decodeRequest reads a request frame's body.
func decodeRequest(body []byte) (spawnRequest, error) {
	r := frameReader{b: body[1:]}
	var q spawnRequest
	switch body[0] {
	case frameKill:
		q.Kill = true
		q.ID = r.uvarint()
	case frameStart:
		q.ID = r.uvarint()
		q.Path, q.Dir, q.UID, q.GID, q.Groups = r.string(), r.string(), r.string(), r.string(), r.string()
		q.Args = r.strings()
		q.Env = r.strings()
	default:
		return q, fmt.Errorf("a request frame of kind %d", body[0])
	}
	return q, r.end()
}

// decodeReply reads a reply frame's body.
func decodeReply(body []byte) (spawnReply, error) {
	if body[0] != frameReply {
		return spawnReply{}, fmt.Errorf("a reply frame of kind %d", body[0])
	}
	r := frameReader{b: body[1:]}
	p := spawnReply{ID: r.uvarint()}
	p.Status = int(int32(uint32(r.uvarint())))
	p.Err = r.string()
	p.Output = r.string()
	return p, r.end()
}
