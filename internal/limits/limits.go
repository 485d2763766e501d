// Package limits holds the bounds Flotilla puts on what crosses its
// boundaries: the HTTP API's requests and connections, and the agents'
// gRPC streams. Each is checked where the input arrives, before anything
// reaches etcd or the leader's state, and a request over one is refused
// with 400 or 413 naming the limit (docs/api.md, "Limits").
//
// The size of an etcd record is bounded separately, where records are made
// (internal/registry): these limits are about the shape of a request (how
// many, how long), so that no single request can make the leader do
// unbounded work or hold unbounded memory.
package limits

import "time"

// Machines and their metadata.
const (
	// MachineNameBytes (64) bounds a machine name: --name, the machine of
	// an agent's Hello, the {id} of PATCH /v1/machines/{id}. A name is a
	// host name's first label or a short ID: 64 bytes is DNS's limit for
	// a label (63) with one to spare, and names appear in every placement,
	// log line and etcd key of the machine.
	MachineNameBytes = 64

	// MetadataKeyBytes (128) and MetadataValueBytes (512) bound one
	// metadata pair (--metadata, PATCH /v1/machines/{id}, a Hello). Keys
	// are words like "region" and values like "eu-west-1" or a rack's
	// name; MachineMetadata= constraints compare them on every placement.
	MetadataKeyBytes   = 128
	MetadataValueBytes = 512

	// MetadataPairs (64) bounds the metadata pairs of a machine, and of
	// one PATCH. With the two limits above a machine's metadata stays
	// under 41 KiB, far below an etcd record's limit.
	MetadataPairs = 64
)

// The scheduler's settings (PUT /v1/scheduler).
const (
	// SchedulerRoles (256) bounds the roles given a weight or quota. The
	// dominant-resource-fair pass keeps a queue per role and compares
	// them for every placement.
	SchedulerRoles = 256

	// RoleNameBytes (128) bounds a role's name ([X-Fleet] Role=).
	RoleNameBytes = 128

	// MinRoleWeight (0.001) and MaxRoleWeight (1000) bound a role's
	// weight (0 stands for 1): a ratio of a million between two roles is
	// more than any policy needs, and keeps a share divided by a weight a
	// finite number.
	MinRoleWeight = 0.001
	MaxRoleWeight = 1000

	// MaxCPUPercent (100,000,000: a million CPUs) and MaxMemoryBytes
	// (2^60, 1 EiB) bound a quota, and a machine's capacity in its Hello:
	// far beyond any cluster, and far from overflowing the sums of
	// int64 the scheduler keeps.
	MaxCPUPercent  = 100_000_000
	MaxMemoryBytes = 1 << 60
)

// The HTTP API.
const (
	// UpdateOptions (8) bounds the [X-Update] options a batch overrides:
	// the section has 8.
	UpdateOptions = 8

	// BatchUnits (100,000) bounds the changes of one POST /v1/batch
	// (units and destroy together): the batch is validated and its units
	// parsed before the answer, all in the leader's memory. flotilla bench
	// sends larger runs as several batches.
	BatchUnits = 100_000

	// BatchInstances (1,000,000) bounds the units one batch names in all,
	// each instance of its ranges counted (web@{1..1000}.service is
	// 1,000). A range costs the leader a name and a record per instance
	// while it is validated, so this bounds what a batch makes the leader
	// hold whatever its body (a 1 KB body can name 20 ranges of a million).
	// A range of a template that does not exist is refused before its
	// names are made.
	BatchInstances = 1_000_000

	// BatchBytes (64 MiB) bounds the body of POST /v1/batch: 100,000
	// small units take about 11 MiB; 64 MiB leaves room for larger files
	// while bounding what one request makes the leader hold.
	BatchBytes = 64 << 20

	// RequestBytes (2 MiB) bounds every other request body. The largest
	// is PUT /v1/units/{name} with one unit file (at most 256 KiB, the
	// unit package's MaxFileSize), which JSON escaping can make up to six
	// times larger.
	RequestBytes = 2 << 20

	// JournalFollows (64) bounds the journal follows (GET
	// /v1/units/{name}/journal?follow=true and the machine-local form) a
	// daemon serves at once: each holds a connection, a goroutine and, on
	// the unit's machine, an open log file for as long as the client
	// stays. Beyond it a follow is answered 429.
	JournalFollows = 64

	// JournalFollowsPerToken (16) bounds the journal follows one API
	// token holds on a daemon, so one token cannot take them all.
	JournalFollowsPerToken = 16

	// EventStreams (4096) bounds the GET /v1/events streams a daemon
	// serves at once, and EventStreamsPerToken (1024) those of one API
	// token. A stream costs a connection (a file descriptor), a goroutine
	// and a wake-up per page of events; the events are encoded once for
	// all of them, so the leader's passes do not slow with their number.
	EventStreams         = 4096
	EventStreamsPerToken = 1024

	// TokenWriteRate (50 a second) and TokenWriteBurst (200) are each API
	// token's bucket of writes (every request but GET and HEAD) on a
	// daemon: a person or a script rarely sends more than a few writes a
	// second, and many changes go in one batch; one token cannot keep the
	// leader committing for everyone else. Beyond, 429 with Retry-After.
	// Flags --token-write-rate and --token-write-burst.
	TokenWriteRate  = 50
	TokenWriteBurst = 200

	// HTTPReadHeaderTimeout (10 s) is how long a client may take to send
	// a request's headers.
	HTTPReadHeaderTimeout = 10 * time.Second

	// HTTPReadTimeout (2 min) is how long a client may take to send a
	// whole request: a 64 MiB batch at 1 MB/s fits.
	HTTPReadTimeout = 2 * time.Minute

	// HTTPWriteTimeout (3 min) is how long a request may take from its
	// headers to the end of its answer: a write waits up to a minute for
	// etcd, and /v1/state of 100,000 units is 17 MB to send. Long-lived
	// streams (GET /v1/events, journal follows) clear it, and the read
	// deadline, once they start.
	HTTPWriteTimeout = 3 * time.Minute

	// HTTPIdleTimeout (2 min) closes a keep-alive connection that carries
	// no request for that long.
	HTTPIdleTimeout = 2 * time.Minute

	// HTTP2Streams (100) bounds the concurrent requests on one HTTP/2
	// connection (the API over TLS): the CLI and the dashboard use a
	// handful.
	HTTP2Streams = 100
)

// The agents' gRPC streams.
const (
	// EngineRecvBytes (64 MiB) bounds one message an agent sends the
	// engine: a Hello with every unit status of its machine. A status is
	// about 100 bytes, so this carries AgentUnits of them with room for
	// long messages.
	EngineRecvBytes = 64 << 20

	// AgentRecvBytes (256 MiB) bounds one message the leader sends an
	// agent: its full set of assignments, unit files included (a unit
	// file is at most 256 KiB). The agent trusts its leader (mutual TLS
	// with the cluster's CA); the bound is on memory, not on intent.
	AgentRecvBytes = 256 << 20

	// GRPCStreams (4) bounds the concurrent streams on one connection to
	// the engine's gRPC server. An agent needs one; the others let a
	// replacing stream open before the old one is torn down.
	GRPCStreams = 4

	// GRPCHandshakeTimeout (5 s) is how long a connection to the gRPC
	// port may take to finish its handshake (TLS, then HTTP/2's preface)
	// before it is closed: an agent on a busy network needs well under a
	// second, and idle connections are not held (gRPC's default is 2 min).
	GRPCHandshakeTimeout = 5 * time.Second

	// GRPCPendingConns (128) bounds the connections to the gRPC port that
	// have not finished their handshake: while that many are pending, more
	// wait in the kernel's listen queue, not accepted, until one is
	// authenticated or closed. Agents reconnecting to a new leader all at
	// once are taken in as fast as the daemon authenticates them.
	GRPCPendingConns = 128

	// ReservedFDs (256) is how many file descriptors, at least, the daemon
	// keeps from its listeners for the embedded etcd member (its WAL,
	// snapshots, peers and clients) and the units' logs: the API and gRPC
	// listeners hold at most the open-files limit less a quarter of it, or
	// less ReservedFDs if that is more (but never less than half of it),
	// and close connections beyond that as they come.
	ReservedFDs = 256

	// AgentUnits (500,000) bounds the unit statuses in one Hello or status
	// update, and the removed names in one update: more than any machine
	// runs (systemd itself slows past tens of thousands of units).
	AgentUnits = 500_000

	// StatusTextBytes (4 KiB) bounds the free text of a unit status an
	// agent reports (result, message): longer text is cut, not refused,
	// so an agent whose driver wrote a long error is not locked out.
	StatusTextBytes = 4 << 10

	// StatusFieldBytes (64) bounds a unit status's other fields (hash,
	// load, active, sub, applied): systemd's words and a SHA-1 in hex.
	StatusFieldBytes = 64

	// MachineFieldBytes (256) bounds a Hello's IP, API address and
	// version.
	MachineFieldBytes = 256
)
