// Package scenario runs fault scenarios on whole flotilla daemons and checks
// the promises of DESIGN.md from outside: from the process table, the PIDs of
// units, and the HTTP API, never from the daemons' own say alone.
//
// It holds no code of its own; its test does the work. Each testdata/*.txt is
// one scenario, a story read top to bottom, in the syntax of
// github.com/cockroachdb/datadriven (as etcd-io/raft's testdata are): a
// directive, "----", and the output it must give. Output holds only what is
// deterministic (counts, unit names, ok or FAIL); what was measured (how long
// until a replacement ran, how long a unit ran nowhere, the most copies at
// once, the whole timeline) goes to the test log and, when
// $SCENARIO_FIGURES names a directory, to <dir>/<scenario>.txt.
//
// # Running
//
//	go test ./internal/scenario/                        # scenarios whose requirements are built
//	FLOTILLA_SCENARIOS=all go test ./internal/scenario/ # all of them
//	go test ./internal/scenario/ -run 'TestScenarios/etcd-down-grpc' -v
//	go test ./internal/scenario/ -run 'TestScenarios/NAME' -rewrite # rewrite golden output
//	FLOTILLA_SCENARIO_LONG=1 ...                        # long= timings (etcd down 60 s...)
//	SCENARIO_FIGURES=/tmp/figures ...                   # keep the figures
//
// The test builds the flotilla binary once. It needs root: every node is a
// real "flotilla daemon" process in its own network namespace
// (flsc-<pid>-<n>-<node>, address 10.77.X.<n>/24, a veth to a bridge in a hub
// namespace; the test reaches them from the root namespace through one more
// veth). The external etcd is its own process in its own namespace, at
// 10.77.X.100. A partition is iptables DROP rules inside the cut-off node's
// namespace. Everything is removed when the scenario ends, however it ends;
// a run killed outright leaves namespaces that the next run removes. Without
// root the test is skipped, or fails when CI=true. It is skipped with -short.
//
// Daemons run with --election-ttl 1s and --agent-ttl 5s, the shortest the
// daemon accepts (engine.MinAgentTTL), so that a scenario takes tens of
// seconds.
//
// # Units
//
// Every unit is ExecStart=/bin/sleep infinity with
// Environment=SCENARIO=<scenario's id> SCENARIO_UNIT=%n. A copy of a unit is
// a live process with that command line and both variables; the node it runs
// on is the network namespace it runs in. A sampler reads /proc every 50 ms
// for the whole scenario and keeps, per unit, the most copies seen at once,
// how long two or more ran, how long none ran, and every copy's start and
// end.
//
// # Gating
//
// A scenario's first directives may be "requires CAP...": it then runs only
// when each capability is built (the list `built` in scenario_test.go,
// $FLOTILLA_CAPS, or detected: "drain" when the verb exists), or with
// FLOTILLA_SCENARIOS=all. The capabilities are described where `built` is.
//
// # Commands
//
// Nodes are named n1..nN, etcd, "leader" (whoever leads when the command
// runs), or an alias bound by as=. Durations are Go's (5s, 1m). A duration
// argument may carry long=D, used instead when FLOTILLA_SCENARIO_LONG is set.
//
// Cluster:
//
//	requires CAP...              skip unless built (see Gating); no output
//	start-etcd                   an external etcd: `flotilla daemon --etcd-embed --no-engine --no-agent`
//	start-daemons N [registry=grpc|etcd] [etcd=external|embedded] [metadata=k=v,...]
//	              [engines=K] [agent-ttl=D]
//	                             N daemons (at most 20), each an engine candidate and an
//	                             agent; with an external etcd n1 starts first and leads;
//	                             waits until every machine is connected; engines=K: only
//	                             n1..nK are engine candidates (the rest --no-engine);
//	                             agent-ttl=D: their --agent-ttl instead of the default
//	start NAME|NAME@A..B [singleton] [global] [lost-after=D] [slow-stop=D] [meta=k=v]
//	                             submit and launch units (NAME@A..B: a template and its
//	                             instances); singleton: Singleton=true; slow-stop=D:
//	                             ExecStop=/bin/sleep D, so the old copy runs D longer
//	                             when stopped; meta: MachineMetadata=
//	set-metadata NODE k=v...     PATCH /v1/machines/NODE
//	drain NODE                   flotilla drain NODE
//	start-writer                 a writer through every daemon in turn (see check lost-writes)
//
// Faults (each marks the timeline; later figures say how long after it):
//
//	freeze NODE [D]              SIGSTOP the daemon; SIGCONT after D in the background
//	thaw NODE                    SIGCONT now
//	                             (freeze, thaw, partition and heal also take nA..nB:
//	                             those nodes at once)
//	kill NODE                    SIGKILL the daemon (only its process)
//	stop NODE                    SIGTERM, wait until it exits
//	restart NODE                 SIGTERM, then start again on the same data dir
//	start-daemon NODE            start a stopped or killed daemon again
//	etcd down [D] | etcd up      SIGSTOP / SIGCONT the external etcd
//	partition NODE from=leader|etcd|all|NODE [D]
//	                             drop NODE's traffic with the leader (as of now), etcd
//	                             (external: its address; embedded: the other members'
//	                             peer port), everything, or one node; heal after D
//	heal NODE                    remove the partition now
//	oversized-metadata NODE size=1.8MB
//	                             PATCH one metadata value that large through the leader;
//	                             prints the answer, and whether the leader's election
//	                             revision (its term) stayed the same
//
// Waiting:
//
//	sleep D
//	wait-leader [not=NODE] [as=ALIAS] [within=30s]
//	wait-active N [glob=G] [within=30s]   the API reports N launched units active
//	wait-copies [glob=G] [within=10s]     each launched unit runs exactly one copy (/proc)
//	wait-etcd [within=90s]               etcd thawed and healthy
//	wait-not-leader NODE [within=5s]     NODE's /v1/status says another daemon leads
//	record-pids [glob=G]                 remember each unit's one copy (PID and node)
//	where UNIT as=ALIAS                  bind ALIAS to the node running UNIT's one copy
//	mark-procs [glob=G]                  from now, count the copies each unit starts and
//	                                     the fewest units of G running at once (/proc)
//	wait-deployment NAME@ STATUS|reverted|done=N [within=60s]
//	                                     the template's latest deployment has STATUS
//	                                     (succeeded, failed...), was a revert that ended,
//	                                     or has N instances done
//
// Deployments: "start NAME@1..N" also takes [X-Update] options
// (max-parallel=N min-healthy=D healthy-deadline=D canary=N auto-revert), and
//
//	replace NAME@ version=N [failing-check] [X-Update options]
//	                             give the template a new file (SCENARIO_VERSION=N in its
//	                             environment), with failing-check a [X-Check] that never passes
//
// Checks, judged from outside:
//
//	check at-most-one [glob=G]    no unit ever had two copies at once, for the whole scenario
//	check no-restarts [glob=G] [not-on=NODE]
//	                              each unit recorded (except on NODE) still runs its recorded PID
//	check started N [glob=G]      each unit started exactly N new copies since mark-procs
//	check min-running N           never fewer than N units of mark-procs' glob ran at once
//	check none-on NODE [glob=G]   no copy of a unit runs on NODE now
//	check elsewhere NODE [glob=G] each unit has a copy on a node other than NODE now
//	                              (both also take nA..nB: those nodes together, and
//	                              within=D: wait until it holds, at most D)
//	check lost-writes             stops the writer; every acknowledged write is in the state
//	                              read back (an unacknowledged one may or may not be)
//	check reads [etcd-gone]       every live daemon answers list-units (the CLI) and /v1/state
//	                              with every unit; with etcd-gone, both also say etcd is
//	                              unreachable (CLI output, a response header)
//	check writes-refused etcd     a write through every live daemon answers 503 naming etcd
//	check fails-fast NODE [within=2s]
//	                              NODE, cut off from the leader, answers three reads and a
//	                              write it would forward with 503 naming the leader, each
//	                              within the bound
//
// The two checks of an etcd outage (reads etcd-gone, writes-refused) fail
// the test if etcd is no longer down when they end: put them between
// "etcd down" and "etcd up".
//
// A check or wait that does not hold prints FAIL and why, which differs from
// the golden output; an error of the script or the harness fails the test.
//
// # Jepsen
//
// TestJepsen (jepsen_test.go) is a Jepsen-style test of the API's reads and
// writes of units' desired state, on the same harness: three daemons with
// embedded etcd, each in its own namespace. Two clients per daemon (or
// FLOTILLA_JEPSEN_CLIENTS), from the root namespace, each send one request
// at a time (3 s timeout) to their daemon: GET /v1/units/U or PUT /v1/units/U {"desiredState": S} of three
// units (jp-a, jp-b, jp-c) and a random S of inactive, loaded, launched. The
// history records each call and return, what was read, and whether the
// answer carried X-Flotilla-Etcd-Unreachable-Since.
//
// The nemesis makes one fault at a time, for 5 to 9 s (5 to 20 s in long
// runs), then waits until a write is acknowledged again (at least 3 s):
//
//	partition-leader       the leader cut off from the others, both ways
//	partition-random       a random daemon cut off from the others
//	partition-leader-etcd  only the leader's etcd peer traffic (port 2380) cut
//	partition-ring         Jepsen's majorities ring: each daemon drops what it
//	                       receives from the one daemon outside "its" majority
//	                       (one way; over TCP, no pair talks well)
//	partition-bridge       two daemons cut from each other, the third sees both
//	kill                   SIGKILL the leader or a random daemon; start it again
//	pause                  SIGSTOP the leader or a random daemon; SIGCONT
//
// A partition is iptables INPUT DROP rules in the namespaces of the nodes it
// cuts; the clients' traffic passes. Everything is undone after each fault,
// and the namespaces (with their rules and processes) are removed however the
// test ends.
//
// Checks, per seed:
//
//   - Each unit's history is linearizable for a register (porcupine), with
//     the reads answered with the header set aside (they may be stale) and
//     nothing else: a write that timed out, or failed without saying that
//     nothing was changed, is indeterminate (it may land at any time after
//     its call, as Jepsen's :info); a write refused as a bad request (4xx),
//     whose connection was refused, or answered "nothing was changed" did
//     not happen. A violation prints the smallest window of operations (and
//     the nemesis's events) that is itself not linearizable, says whether it
//     holds also with every failed write indeterminate, and writes
//     porcupine's HTML view of the window and the whole history to
//     $SCENARIO_FIGURES (or a new directory under $TMPDIR).
//   - Once every fault is healed, every daemon's answer and every etcd
//     member's copy (a serializable read) of each unit agree within a
//     minute, untagged; that round is checked with the history.
//   - After the start and the end of a fault that leaves a majority
//     connected (all but the ring), a write is acknowledged within 12 s, and
//     no 12 s pass without one until the next fault. The test log shows,
//     per fault, these times and the tagged and indeterminate answers.
//
// It runs in every run of the suite (jepsenByDefault); FLOTILLA_JEPSEN=0
// skips it. Its environment:
//
//	FLOTILLA_JEPSEN_SEEDS=1,2,3       seeds, one run each (default 1): the order of the
//	                                  faults, their targets and lengths, the clients' requests
//	FLOTILLA_JEPSEN_DURATION=2m       faults for this long per seed (default: each once, ~80 s)
//	FLOTILLA_JEPSEN_NEMESES=kill,...  only these faults (default all)
//	FLOTILLA_JEPSEN_CLIENTS=4         clients per daemon (default 2)
//
// The default run takes about 2 minutes. Longer runs need a larger -timeout:
//
//	go test ./internal/scenario/ -run 'TestJepsen$' -v
//	FLOTILLA_JEPSEN_SEEDS=1,2,3,4,5,6,7,8,9,10 FLOTILLA_JEPSEN_DURATION=2m \
//	    go test ./internal/scenario/ -run 'TestJepsen$' -v -timeout 60m
//
// TestJepsenCheck and TestJepsenWindow test the checker itself on small
// histories, without root.
package scenario
