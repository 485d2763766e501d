// Package scheduler decides where units run. It is a pure function of a
// cluster snapshot that the caller keeps up to date: no clock, no network,
// no etcd, no goroutines. The same calls on the same snapshot give the same
// answers, whatever order the snapshot was built in.
//
// A Cluster holds the machines available for placement and the units placed
// on them, with per-machine aggregates (unit count, resources used) and
// indexes (machine metadata, Conflicts= patterns, machines in rank order)
// kept up to date as units are placed. A decision therefore costs time in
// the number of machines it looks at, never in the number of units.
//
// A decision for a unit that is not global runs a pipeline (README.md draws
// it): unit checks (quota, MachineID=, MachineOf=, the metadata index) give
// the candidate machines; a chain of feasibility checkers (MachineMetadata=,
// Conflicts= in both directions, Replaces=, resources) rejects machines,
// each rejection recording its kind; the strategy (spread or binpack) ranks
// the machines left, machine ID breaking ties. When no machine is left, the
// rejections grouped by kind become the reason the user is shown:
//
//	conflicts with web@2.service on m1, m2; needs 4G memory, largest free is 1G on m3
//
// # The caller's duties
//
// The engine keeps the Cluster equal to the committed schedule, on one
// goroutine (a Cluster is not safe for concurrent use):
//
//  1. SetMachine for each machine that may take units (connected to the
//     leader), with its metadata and capacity, whenever either changes;
//     RemoveMachine when it may no longer (its units are forgotten).
//  2. Place each scheduled unit on its machine once the machine is set: a
//     unit that is not global once, a global unit on each machine it runs
//     on. Unplace a unit that stops being scheduled (destroyed, made
//     inactive, or moved off a lost machine); UnplaceFrom a global unit
//     leaving one machine.
//  3. Schedule the pending units that are not global with Allocate, which
//     shares the cluster between roles (see below) and records each
//     placement as Place would. Commit the decisions with a machine. For
//     each Displaced unit, which Allocate has already unplaced, delete its
//     schedule and decide it again (it is pending). A single unit may also
//     be decided with Decide, then recorded with Unplace of the Displaced
//     units and Place.
//  4. For each wanted global unit, in name order, place it on the machines
//     GlobalMachines lists that it is not on yet, and UnplaceFrom the others.
//  5. When a machine's metadata or capacity changed, or a unit moved (its
//     MachineOf= followers), check the units placed there with Fits; Unplace
//     those that no longer fit and schedule them again.
//  6. When a commit fails, the Cluster holds placements that were not
//     committed: rebuild it from the committed schedule (steps 1 and 2).
//
// # Resources, roles and fairness
//
// A unit's Needs are its [Service] CPUQuota= and MemoryMax= (NewUnit fills
// them); a machine's Capacity is what its units may need in all. A zero on
// either side is "not declared": anything fits in that dimension. Every
// unit has a role ([X-Fleet] Role=, DefaultRole when empty). Options give
// each role a weight and a quota, and Allocate places a batch of pending
// units by weighted dominant resource fairness: the role whose dominant
// share of the cluster (Shares) divided by its weight is lowest places its
// next unit first.
//
// # Cost
//
// With 1,000 machines holding 100,000 units on two cores, deciding and
// placing one unit takes about 2 µs, a decision no machine can take (every
// machine checked, the reason gathered) under 50 µs, Allocate of 10,000
// units about 30 ms, and Fits for every placed unit (a full reconcile pass)
// about 30 ms; see scheduler_bench_test.go.
package scheduler
