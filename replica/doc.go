// Package replica runs one replicated log on a node: a Replica is raft
// over the log's groups of the node's raftstore DB, with its state machine
// (FSM), its view of the log (LogView), its snapshots (SnapStore), the
// proposer that hands appends to raft in batches (Proposer), and the
// leader's stints; it serves the log's appends, reads, tails and trims in
// the client protocol's terms. Package node hosts it: the listeners, the
// raft transport, membership, the data dir.
//
// # The log is the state
//
// A record's position is its raft index. Each appended record is one raft
// entry, stored once, in the commit log. The FSM keeps only small state:
// the first retained index (the floor), a byte ledger, void indexes,
// client sessions for duplicate suppression and the members' client
// addresses (fsm.go, sessions.go, state.go). Raft never compacts its log;
// trims raise the floor on every replica, after which a snapshot lets each
// replica delete the entries below it. Snapshots hold the state only; a
// snapshot raft sends to a follower behind the floor carries the retained
// records, read from the commit log as it is sent (snapshot.go). A backup
// restored into a named log is such a snapshot: raft's Restore stores it
// past the log's end and every replica installs it; until a replica has,
// its state carries the mark of the restore (restore.go).
//
// # Groups
//
// A log occupies three groups of the node's raftstore DB (Groups, GroupsOf):
// raft's live log and stable state, and two archive groups that take turns
// holding the retained records a snapshot install brought in below raft's
// log. Log id 0, the default log, has groups 1 to 3, as every data dir
// before named logs did.
//
// # Durability
//
// A received snapshot's records are staged in the archive group that is
// not current and switched to only once they and the snapshot file are
// durable, so a crash at any point of an install leaves the old snapshot
// with all its records or the new one with all of its (snapinstall.go).
// Snapshot files are written whole, fsynced and renamed into place; the
// directory is fsynced after each rename or removal. A snapshot file that
// cannot be written or synced for any reason but a full disk, or a failed
// sync whose outcome is unknown, calls SnapStore.Fail: the node must stop.
//
// # Concurrency
//
// A Replica's methods are safe for concurrent use; Shutdown waits for the
// goroutines it started. Raft applies to the FSM on one goroutine; its
// readers (ReadView,
// Lookup, Member, AppliedCh) may run on any goroutine. The LogView's
// reads (GetLog, First) are safe for concurrent use with writes; deletes
// are serialised by the SnapStore. The Proposer is safe for concurrent
// use.
package replica
