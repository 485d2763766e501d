// Package engine is Flotilla's brain: the elected leader that holds the live
// cluster in memory, schedules units, and serves agents over gRPC.
//
// # Terms
//
// Every daemon with an engine campaigns (package election). The winner starts
// a term:
//
//  1. It checks the schema of the data in etcd (schema.go): older data it
//     migrates, through its fenced committer; newer data it refuses to
//     lead, and it stops campaigning until it can. Then it loads the
//     durable record (unit files, desired states, schedule) from etcd at
//     one revision (registry.Load).
//  2. It starts serving the agent stream. Machines named in the schedule are
//     presumed alive until the agent TTL has passed since the term began, so
//     a leader change never moves a unit: agents reconnect well inside the
//     TTL (the election TTL is a fraction of it) and report what they run.
//  3. It applies user changes and its own scheduling decisions through one
//     loop goroutine: every durable change is committed to etcd in a
//     transaction fenced on the term's election key (registry.Committer)
//     before memory changes, before the API answers and before any agent is
//     told.
//  4. It acts, and answers reads, only while its election lease is known
//     valid; a request that changes nothing is acknowledged only after an
//     empty transaction fenced on the election key commits.
//  5. The term ends when etcd says the election lease is lost (the engine
//     then drops all memory and every agent stream) or when the daemon
//     stops (it resigns, so a standby takes over at once).
//  6. When the lease can no longer be confirmed, or a write's outcome is
//     unknown, and etcd does not answer, the term degrades instead
//     (degraded.go): memory and streams are kept and read, nothing is
//     decided, writes are refused naming etcd, and the engine campaigns
//     again; the next term, this engine's or another's, loads from etcd.
//
// # The agent stream
//
// One bidirectional stream per agent (proto/agentpb):
//
//	agent  -> leader  Hello{machine, every unit's status, leader_rev, wants_count, wants_digest}
//	leader -> agent   Assignments{full: true, units}      the machine's whole desired set
//	                  or Assignments{full, unchanged}     "the set you summed up": nothing listed
//	leader -> agent   Assignments{units, removed}         deltas, as decisions commit
//	agent  -> leader  StatusUpdate{units, removed}        as unit states change
//	both directions   Heartbeat                           when idle, every heartbeat interval (heartbeat.go)
//	agent  -> leader  Leave                               last: its units are stopped, it leaves
//
// An agent whose Hello says files_by_hash is sent each instance's file (its
// template's text) once a stream, in Assignments.files under a key the
// leader gives it, and the instances' assignments name the key
// (stream.go's sendByKey): a machine of a thousand instances gets one copy
// of their file, where older agents get it whole in every assignment.
//
// The Hello sums up the desired set the agent holds from its last leader
// (agentpb.WantsDigest: how many units, and the sum of a hash of each one's
// name, file hash, desired state and global flag). A leader whose full set
// for the machine sums up the same (place.go's fullUnchanged) sends
// Assignments{full, unchanged} with no units: after a change of leader the
// agents hold the very sets the new leader would send, and 10,000 of them
// were a million assignments built, sent and decoded again. Anything
// listed with unchanged is a change to the set, as in a delta. A sum that
// differs (or none: an older agent, or a daemon just started) gets the set
// whole; flotilla_agent_full_sets_total{sent} counts both.
//
// The leader refuses a Hello naming another term (leader_rev), and ends every
// stream when its term ends; the agent then looks the leader up again.
//
// It refuses (agentpb.CodeIncompatible) a Hello whose Machine.protocol is
// outside its window (internal/version), naming both releases and
// protocols; the agent treats it as it treats a name in use, below.
//
// It also refuses (AlreadyExists, naming the machine's IP and API address)
// a Hello for a machine that is live (its stream open, heard within
// muteAfter) under another instance: Machine.instance is a random ID kept
// in the daemon's data dir, so it is the same for a daemon restarted on its
// machine (which takes its machine over at once, its old stream ended) and
// differs for another machine given the same name. The refused agent's
// daemon stays up, its API answering 503 with the error, and its agent
// says Hello again every agent.RefusedRetry until the name is free. In the etcd registry mode the agent itself
// refuses to overwrite a presence key that another instance holds (its
// lease keeps it while that daemon lives), and writes its own only if the
// key is still what it read.
//
// Leave is fleet's shutdown (daemon --stop-units-on-exit): the agent stops
// carrying out assignments, unloads every unit (each stopped within its stop
// timeout), then sends its last StatusUpdate and Leave. The leader drops the
// machine's unit states, marks it left (the plan then places its units
// elsewhere at once, whatever their LostAfter=, and forgets the machine) and
// ends the stream; the agent waits until the schedule in etcd names the
// machine no more, so that a leader elected after this daemon resigns does
// not wait for those units either. In the etcd registry mode the agent
// marks its presence key leaving, then revokes its lease, which deletes the
// presence and every unit state.
//
// Every message the leader sends carries its monotonic send time; the
// leader sends nothing while its lease is not known to be held
// (election.Term.Valid) or to an agent silent for muteAfter.
//
// # Liveness and the cut-off policy
//
// The reconcile pass is a pure plan (plan.go: planReconcile, of a planInput
// and the time, to buckets lost, misfit, waiting, done moving, place and
// gone, and a drain's handover, stay and queued) carried out by
// term.reconcile (place.go). A machine is reachable
// while its stream is open and its agent speaks. An unreachable machine's
// units stay scheduled there until their [X-Fleet] LostAfter= (default the
// agent TTL, "infinity" never) has passed since it was last heard, or since
// the term began: then ordinary units are placed elsewhere, while the
// cut-off machine may still run its copy, which is stopped when it is back.
// A Singleton=true unit waits until LostAfter= (plus a margin) has passed
// since the leader last sent the machine anything, by when its agent (or
// the supervisor holding its deadline) has killed it. Global units are
// never replaced. A machine that left (Leave, above) is gone at once: its
// units are stopped already. While a tenth of the machines (ten at
// least) are unreachable at once, the leader doubts they are gone and
// replaces none of their units for a while (doubt.go). A unit moving off a reachable machine (its constraints no
// longer hold there, Replaces=, or a Singleton= unit of a draining
// machine) is recorded under moves/ in etcd with the machine, and placed
// again only once that copy is gone: a new leader loads the moves, so a
// change of leader never lets it run twice. A draining machine's other
// launched units are handed over: placed elsewhere while the machine's
// copy keeps running (still in its full set), which is stopped once the
// new copy is active; the handover is under moves/ too, so a new leader
// keeps that copy as well. Its units that fit nowhere else stay.
package engine
