// Package catalog is the state machine of the cluster's metadata raft
// group: which nodes the cluster has, which logs it serves, where each
// log's replicas are and with what settings. Every node holds a copy
// (the catalog group's voters are 3 or 5 of the nodes, every other node
// is a nonvoter), routes client requests and runs the raft groups of its
// logs from it.
//
// # What it holds
//
// A State: the nodes (id, raft and client addresses, active or leaving),
// the logs (name, id, replicas and retention, active or deleting, the
// members, the initial members a new group is bootstrapped with, a replica
// move under way, the hosts that have dropped a deleting log's data, and a
// version raised by each change), the next log id, the cluster id, and
// the raft index of the last command applied. The log named "default" has
// id 0 and exists from the start; the Start command gives it its members.
//
// The cluster id (ClusterID, given once by SetClusterID, never changed)
// lets a node refuse raft traffic from a node of another cluster: a
// stale address in one cluster's configuration that now reaches a node of
// another must not make it step down and take the first cluster's log.
//
// # Commands
//
// The catalog changes only by applying commands (command.go), each
// validated against the state it applies to (apply.go): a command that
// does not fit (a taken name, an unknown log, members that are not the
// log's replica count of active nodes, a log changed since the proposer
// read it) changes nothing, and its Result says why with an error wrapping
// one of the sentinels of errors.go. Applying is deterministic: no clock,
// no randomness, no iteration of a map where order matters, so every node
// that applies the same entries holds the same catalog and takes the
// same snapshot, byte for byte.
//
// Decisions that need a choice (where a new log's replicas go, which
// replicas move, which member leads each log) are taken by the catalog
// leader with the pure functions of place.go and written as commands.
// A replica move adds the new replica before it removes the old one (see
// Log): a log never has fewer than its replica count of copies.
// A member that lost its replica (a wiped node) is recorded as lost and
// rebuilt in place, as a new member of the log's raft group (see Log).
//
// # Concurrency
//
// Raft applies commands, takes snapshots and restores them on one
// goroutine. Each applied command publishes a new immutable State through
// an atomic pointer; readers on any goroutine call FSM.State or FSM.Watch
// and read a State without locks, for as long as they like, while later
// commands apply. A snapshot is the State it was taken from, written out
// by Persist on raft's snapshot goroutine while Apply goes on.
//
// # Durability
//
// The package keeps nothing on disk itself. A command is durable once raft
// has committed it (on a majority of the catalog group's voters), and a
// node's catalog is rebuilt at start from raft's latest snapshot and the
// entries after it (snapshot.go has the format: versioned, length-checked
// and CRC-32C checksummed; Restore refuses a damaged one and keeps the
// catalog it had). Every node starts from the same initial State (New),
// so replaying the group's log from its first entry gives the same
// catalog everywhere.
//
// # What it does not do
//
// It starts no raft group and touches no data: the node's reconciler
// reads the catalog and runs, bootstraps, reconfigures and drops the
// groups of its logs, and reports back with commands (LogStarted,
// FinishMove, ReplicaDropped). It holds the cluster id but checks no peer
// against it: the node does. It does not know which nodes are up, nor how
// many bytes they hold: the caller passes that to the decisions.
package catalog
