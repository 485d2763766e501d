package version

import (
	"fmt"
	"strconv"
	"strings"
)

// What a cluster running two releases at once during a rolling upgrade
// needs to agree on: the layout of what the engine leader keeps in etcd
// (the schema) and the protocols between daemons (the agent stream,
// proto/agentpb) and between a daemon and its machine's supervisor
// (proto/supervisorpb), which share one protocol number.
//
// A binary speaks ProtocolVersion and accepts peers from
// MinProtocolVersion to MaxProtocolVersion: one release back and one
// ahead, so that either side of a connection may be upgraded first. A
// peer that does not say (a release older than the field) speaks
// protocol 1. The leader refuses an agent outside its window, and a
// daemon a supervisor outside its own, naming both versions.
//
// A leader writes SchemaVersion to etcd when it takes office, migrating
// older data first; a binary that finds a newer schema in etcd refuses to
// lead (it may still run units as an agent).
//
// Each is set with -ldflags -X as a decimal string (tests build binaries
// "from the future" so), e.g.
//
//	go build -ldflags "-X github.com/flotilla/flotilla/internal/version.protocol=3
//	  -X github.com/flotilla/flotilla/internal/version.schema=3"
//
// minProtocol empty means protocol-1 (at least OldestProtocol), and
// maxProtocol empty protocol+1: a release whose window is not one each way
// sets them. A release that raises schema adds the step to it in
// registry.Migrations. Tests in-process set the exported variables
// instead.
var (
	protocol    = "2"
	minProtocol = ""
	maxProtocol = ""
	schema      = "2"
)

var (
	// ProtocolVersion is the protocol this binary speaks.
	ProtocolVersion = mustInt("protocol", protocol)
	// MinProtocolVersion and MaxProtocolVersion bound the protocols of
	// the peers this binary accepts.
	MinProtocolVersion = orDefault("minProtocol", minProtocol, max(ProtocolVersion-1, OldestProtocol))
	MaxProtocolVersion = orDefault("maxProtocol", maxProtocol, ProtocolVersion+1)
	// SchemaVersion is the layout of the data in etcd this binary writes
	// and reads.
	SchemaVersion = mustInt("schema", schema)
)

// OldestProtocol is the protocol of a peer that does not say its own: the
// releases before protocol versions.
const OldestProtocol = 1

// OldestSchema is the schema of etcd data without a schema key: the data
// of releases before schema versions.
const OldestSchema = 1

func mustInt(name, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		panic(fmt.Sprintf("version: %s %q (set with -ldflags -X) is not a positive integer", name, s))
	}
	return n
}

func orDefault(name, s string, def int) int {
	if s == "" {
		return def
	}
	return mustInt(name, s)
}

// PeerProtocol is the protocol of a peer that sent p: OldestProtocol for a
// peer that did not send one (0, protobuf's absent value).
func PeerProtocol(p int32) int {
	if p <= 0 {
		return OldestProtocol
	}
	return int(p)
}

// Window is the range of protocols a binary accepts from its peers.
type Window struct{ Min, Max int }

// ProtocolWindow returns this binary's window.
func ProtocolWindow() Window { return Window{Min: MinProtocolVersion, Max: MaxProtocolVersion} }

// Accepts reports whether a peer speaking protocol p is inside w.
func (w Window) Accepts(p int) bool { return p >= w.Min && p <= w.Max }

func (w Window) String() string {
	if w.Min == w.Max {
		return strconv.Itoa(w.Min)
	}
	return fmt.Sprintf("%d to %d", w.Min, w.Max)
}

// Peer names one end of a connection for a refusal: what it is ("agent
// of machine m2", "this leader"), its release and its protocol.
type Peer struct {
	What     string
	Release  string // "" when unknown (a peer older than the field)
	Protocol int
}

func (p Peer) String() string {
	release := p.Release
	if release == "" {
		release = "unknown release"
	}
	return fmt.Sprintf("%s (%s, protocol %d)", p.What, release, p.Protocol)
}

// CheckProtocol returns nil when w, self's window, accepts peer, else an
// error naming both ends, their releases and protocols, and which of them
// to upgrade.
func CheckProtocol(self Peer, w Window, peer Peer) error {
	if w.Accepts(peer.Protocol) {
		return nil
	}
	older := peer.What
	if peer.Protocol > w.Max {
		older = self.What
	}
	return fmt.Errorf("%s is outside the protocol window of %s, which accepts protocol %s: upgrade %s", peer, self, w, older)
}

// SchemaError says etcd holds data of a newer schema than this binary's.
type SchemaError struct {
	Stored, Own int
	Release     string // this binary's
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("etcd holds schema %d; this binary (%s, schema %d) cannot lead it: upgrade this machine", e.Stored, e.Release, e.Own)
}

// CheckSchema returns nil when this binary can lead a cluster whose data
// in etcd is at schema stored (older schemas it migrates), else a
// *SchemaError naming both versions. release is this binary's.
func CheckSchema(stored int, release string) error {
	if stored <= SchemaVersion {
		return nil
	}
	return &SchemaError{Stored: stored, Own: SchemaVersion, Release: release}
}

// Short is the release and the first 7 digits of the commit, as agents
// report themselves to the leader: 0.2.0+abc1234, with -dirty when the
// tree had changes, or the release alone when the commit is unknown.
func (in Info) Short() string {
	if in.Commit == "" {
		return in.Version
	}
	c, dirty := strings.CutSuffix(in.Commit, "-dirty") // make build's stamp
	if len(c) > 7 {
		c = c[:7]
	}
	if in.Modified || dirty {
		c += "-dirty"
	}
	return in.Version + "+" + c
}
