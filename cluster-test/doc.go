// Package clustertest runs raftlog clusters as real processes and breaks
// them while clients use them, then checks what the clients saw. It holds
// tests only; this file carries the package documentation.
//
// # What runs
//
// The tests build cmd/node once per test binary (without -race, so that
// the servers run at full speed while the test code itself may run under
// -race) and start 3- and 5-node clusters of `node serve` processes on
// 127.0.0.1, each node with free ports, its own data dir under
// t.TempDir() and its own log file. Only processes the test started are
// ever signalled, and every one of them is killed and reaped when the
// test ends, pass or fail (on Linux they also die with the test binary).
//
// Nemeses, alone (TestNemeses) and mixed at random from a seed
// (TestRandomized, TestSoak), one at a time or a second one on another
// node while the first holds: SIGKILL of the leader, of a follower, of a
// random node and of every node at once, then restart; SIGTERM and
// restart; SIGSTOP/SIGCONT pauses longer than the election timeout;
// network partitions (majority/minority, isolated leader, and a bridge on
// 5 nodes) through the nodes' fault-injection admin endpoint (node serve
// --fault-injection); a failing disk (every write and fsync fails with
// EIO), after which the node must stop serving; a full disk; and a node
// whose data dir is wiped and which rejoins with --join under its old id
// and addresses. TestWipedNodeRejoin runs one fixed schedule of the last
// kind that makes its danger certain, TestAsyncFlushCrash SIGKILLs nodes
// of a cluster running with --flush async, and TestFailoverGap measures
// how long appends stop when the leader is SIGKILLed.
//
// The workload runs while the nemesis does: appenders through the default
// Client (which retries, with a client id and sequence numbers), through a
// Client that gives up after one short attempt, and with several records
// per Append; linearizable reads of ranges with and without a MaxRecords
// bound; stale reads from chosen nodes; and a tail. Every operation is
// recorded with its call and return times on the monotonic clock and with
// its result or error.
//
// # Named logs
//
// TestLogs runs two clusters at once, each serving three named logs of
// three replicas (log-1 to log-3, created at the start of the run) beside
// the default log, each with a workload of its own (the same workers as a
// single-log run; every record names its log). TestLogs/3-nodes runs 3
// nodes under kill-leader, kill-random, partition, pause-leader and
// kill-log-leader (SIGKILL the leader of a named log chosen at random).
// Leaders spread over the nodes, so a kill usually hits a node that leads
// some logs and not others: each fault's detail lists the logs its node
// led and followed, and the run fails unless at least one SIGKILL hit such
// a node. TestLogs/5-nodes-data-loss runs 5 nodes under wipe,
// wipe-bootstrap, disk-failure, kill-log-leader and kill-random: a node
// whose data dir is lost rejoins as a new member and gets its replicas of
// the named logs back, rebuilt (README, "Named logs"); the fault lasts
// until each of them runs again, votes (its node's /status says so), is a
// voter in its log's committed configuration and has applied what its
// leader had committed, and the run fails unless some replica was rebuilt
// so. Every operation and tail event records its log; each log's history
// is checked on its own, with everything below, against a model of that
// log alone, and the cluster counts as healthy only when every log has a
// leader its members follow. A third of the randomized seeds (not the CI
// seeds) run named logs too, with every nemesis, those that lose a data
// dir included, so TestSoak and RAFTLOG_SEED cover them on 3 and 5 nodes.
//
// TestLogsRemoveNode runs three named logs of three replicas on five
// nodes under load and removes a node that holds replicas with `node
// remove` (the CLI) while a SIGKILL strikes the leader of a log being
// moved; each log's history is checked as above, and afterwards every
// log must have its full replica count, all voters, on the nodes left.
// TestLogRebuildLeaderLoss wipes a member of a named log on three nodes
// and, once the log's leader has made the rebuilt replica a voter but
// before the catalog records the rebuild finished (the planner holds moves
// at their last step: /fault/hold-moves), SIGKILLs that leader: the two
// left must elect one. TestLogsRemoveNode found it: the rebuilt replica
// did not vote until the finish, which needs a leader of the log.
// TestCatalogLeaderCrash SIGKILLs the default log's leader (the
// catalog's) at the moments a catalog change is half done: right after a
// log create is acknowledged (the log must then run on all its members
// and keep every acknowledged append), while a log delete is answered,
// once the leader's catalog shows the log deleting (afterwards it must be
// gone from every node's catalog, /status and data dir, or whole on all
// of them), and while a node remove moves a replica (the removal must
// finish and leave every log its replica count). Each asks every node
// itself (ListLogs, /status) and looks into its data dir.
//
// TestMovedLogKeptAcrossRestart replays an operator's tryout that lost a
// log of one replica: a fourth node joins after the default log's last
// snapshot (a trim's), takes the log by the planner's balancing move,
// leads the default log, is SIGTERMed and restarted while the new leader
// backs off its AppendEntries to it, so that it hears heartbeats for
// seconds before it learns the leader's commit index. Its catalog, from
// the snapshot, still places the log elsewhere: it must not drop the log,
// and every acknowledged record must read back (fixed by 657c228).
//
// Waiting for the rebuilt replicas found that DescribeLog's ConfigIndex
// was always 0, so the replica planner took a log leader's uncommitted
// configuration for committed (fixed: node/reconfigure.go, readConfig).
// The randomized runs with named logs found two more: a node SIGTERMed
// with appends in flight never exited (replica.Apply, await), and a node
// whose disk failed panicked taking a new term while it stopped
// (voteGate.stopRaft).
//
// TestLogs found that a node of a cluster with named logs loses the
// default log's records from the floor to the index of a snapshot stream
// it installed; TestDefaultLogSnapshotWithNamedLogs is that schedule
// made small (see its documentation).
//
// # Trimming under faults
//
// Runs may also trim: a trimmer in the workload calls Trim every so often
// (workloadConfig.trimEvery) with a below at most trimKeep under the
// highest index it knows to be committed (acknowledged or read), so that
// the floor, the first retained index, rises on every node while the
// nemeses strike, nodes snapshot and drop their log below it, and a node
// that is behind or lost its data dir is rebuilt from a snapshot stream.
// Every trim is recorded, acknowledged or not. A read from below the floor
// fails with Trimmed (transport.CodeTrimmed); such reads are recorded as
// a definite outcome, not an unknown one. A tail whose next record was
// trimmed away fails with Trimmed too; it is then reopened from the first
// retained record, and the history marks where. Half of the randomized
// seeds trim (the choice has a random stream of its own, so seeds that do
// not trim run as they did before); in TestNemeses, trim-kill-follower
// trims while followers are SIGKILLed and fails unless some node
// installed a snapshot stream, and trim-wipe-kill-follower also wipes
// nodes and fails unless a wiped node was rebuilt from a snapshot stream
// after a trim (it found a node bug, fixed: see node/failstop.go).
//
// # What the tests guarantee
//
// After the faults are healed and the cluster has converged, a run passes
// only if all of the following hold:
//
//   - Every node reports the same floor (1 without trims), no higher than
//     the highest below any trim asked for, and holds no record below it.
//   - Every acknowledged append at or above the floor is present exactly
//     once, at the index it was acknowledged with, on every node.
//   - Every node's log (read with stale reads from each node, from its
//     floor on) is identical.
//   - Every record in the log, and every record any read or the tail
//     returned, is one a client appended; no record appears twice.
//   - Every read, linearizable or stale, returned exactly the records in
//     the range it covers ([from, next)) of the known log: the final log
//     from the floor on, and below it the records that acknowledged
//     appends, reads and the tail placed there, which must agree. The
//     tail delivered the known log in order without gaps or repeats,
//     except that where it started or was reopened after a Trimmed error
//     it may skip records below the highest floor a trim called before
//     then asked for.
//   - The history of appends, trims and linearizable reads (including
//     those that failed with Trimmed) is linearizable
//     (github.com/anishathalye/porcupine) with respect to an append-only
//     log whose indexes increase but are not contiguous and whose floor
//     only rises: a read from below the floor must fail with Trimmed and
//     one from at or above it must not, and must return exactly the
//     records from there on; see logModel for reads that a concurrent
//     trim cuts short.
//   - No node exited unless the test stopped it or failed its disk, no
//     node log holds a Go panic, a node whose disk failed stopped serving,
//     and the cluster recovered (elected a leader everyone follows and
//     served appends) within bounded time after every fault.
//
// A failing run reports its seed and writes the history, porcupine's HTML
// visualisation, the final logs and the node logs to a directory under
// os.TempDir() named raftlog-cluster-test-<seed>-<time>, whose path it
// prints.
//
// # Running
//
//	go test -race ./cluster-test/                    # CI: fixed seeds, about 10 minutes on 2 cores
//	go test -short ./cluster-test/                   # model tests only, no clusters
//	RAFTLOG_SEED=42 go test -run TestRandomized -v ./cluster-test/
//	RAFTLOG_SEED=61 go test -run '^TestLogs$/^3-nodes$' -v ./cluster-test/
//	RAFTLOG_SOAK=10m go test -run TestSoak -timeout 0 -v ./cluster-test/
//	go test -run TestFailoverGap -v ./cluster-test/  # the failover figure
//
// The tests build cmd/node with the build tag faultinject: a binary built
// without it, as releases are, refuses --fault-injection.
// RAFTLOG_NODE_BIN names a prebuilt node binary to use instead of building
// cmd/node; without the tag, the nemeses that need fault injection are
// left out.
//
// # What it does not do
//
// It does not cut power or drop the page cache: a SIGKILLed process loses
// its memory but not what it wrote to the kernel, so the async-flush test
// shows that a process crash loses nothing acknowledged, not that a power
// loss does not. It does not delay or reorder packets, skew clocks, or
// change membership other than by rejoining a wiped node and the
// removals above. It does not create or delete logs while the nemeses
// strike, nor lose the data dirs of two nodes at once (no protocol could
// keep an entry whose every copy is gone), nor run named logs of 1
// replica under the nemeses (a wiped node loses those: nothing rebuilds
// them). Below the final
// floor it cannot tell a record that every node lost from one that was
// trimmed, so it checks records there only against what the history
// itself saw. It does not trim by retention (--retention-bytes,
// --retention-age), which raises the floor by the same path.
package clustertest
