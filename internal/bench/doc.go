// Package bench is `flotilla bench`: it starts a real Flotilla cluster on
// this host, starts N units on M simulated agents through the API as a
// user would, and reports how long the units took to become active, with
// what the cluster spent doing it. The figures in docs/benchmarks.md come
// from it.
//
// # A run
//
// Each run (one per registry mode: grpc, etcd) has a cluster of its own,
// in a temporary directory of its own:
//
//  1. An etcd process (flotilla daemon --etcd-embed --no-engine --no-agent),
//     so that etcd's CPU and memory are measured apart from the engine's.
//  2. One or three engine processes (flotilla daemon --no-agent), which
//     reach etcd, and are reached by the agents, through latency proxies
//     when --latency is set (see Proxy). The bench waits for a leader.
//  3. M simulated agents (sim driver) in helper processes (flotilla
//     bench-agents, RunAgents), as many and with the GOMAXPROCS the
//     bench chooses for the host (shape.go) unless the flags say. The
//     bench waits until the leader lists M machines.
//  4. The bench reads etcd's request counters (/metrics) and the CPU time
//     of every process (/proc), starts the --state-pollers, and sends one
//     POST /v1/batch to the leader creating the N units with desired state
//     launched: the start request. Its sending time is t0.
//  5. It waits until the leader reports every unit active, reading the
//     leader's count of units become active where it placed them (the
//     count of flotilla_scheduling_latency_seconds{phase="active"} in its
//     /metrics; when that stalls, the count of active units in its
//     /v1/state) with pauses that grow with the cost of a poll, then reads
//     /v1/unit-states once: each unit's observedAt is when the leader
//     learnt that it was active, by the leader's clock, which is this
//     host's clock. A unit's start latency is observedAt − t0.
//  6. It reads etcd's counters and the CPU times again: the report's
//     request counts and CPU seconds are the differences, over the window
//     from t0 until every unit was seen active. The pollers go on for
//     StateAfter, then stop. Peak memory is each process's VmHWM at the end.
//  7. It stops the agents, the engines, then etcd (SIGTERM, then SIGKILL
//     of the process group after a grace period), closes the proxies and
//     removes the directory. This happens on every way out: an error, the
//     timeout, or Ctrl-C (the context given to Run). Children run in
//     process groups of their own and die with the bench (Pdeathsig) if it
//     is killed outright.
//
// Everything listens on 127.0.0.1 only.
//
// # What is measured, and what is not
//
// Start latency runs from the start request, not from the answer to it: it
// includes validating the unit files and writing them to etcd. The engine's
// CPU time includes answering the bench's polls, kept small as described.
// The proxies and the polling run in the bench process, whose CPU time is
// reported apart (bench_cpu_seconds), as is the time other processes of the
// host took over the window (other_cpu_seconds): on a shared host, a run
// with a large figure there is slower than the cluster is.
package bench
