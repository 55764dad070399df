// Package node runs a raftlog server: one member of a Raft cluster that
// replicates an append-only log of records. cmd/node is a thin wrapper
// around it; tests start nodes in-process with Start.
//
// # The log is the state
//
// A record's position is its raft index. Each appended record is one raft
// entry, stored once, in the commit log (package raftstore). The state
// machine (package replica) keeps only small state: the first retained
// index, a byte ledger, client sessions for duplicate suppression and the
// members' client addresses. Raft never compacts its log; retention (by
// bytes or age, Config.RetentionBytes and RetentionAge) and the Trim
// operation are replicated decisions that raise the first retained index
// on every node, after which a snapshot lets each node delete the entries
// below it. A snapshot raft sends to a follower behind the first retained
// index (a node that joined late or lost its data dir) carries the
// retained records, and the receiving node switches to them only once they
// and the snapshot file are durable (package replica).
//
// # Named logs
//
// Besides the default log, a node holds replicas of named logs, each its
// own raft group over the same raftstore DB and raft listener
// (transport.RaftMux). Their catalog (package catalog) is the default
// log's control state machine, so every node holds it and the default
// log's leader changes it (catalog.go); a reconciler runs the replicas the
// catalog places on the node and drops deleted logs' data (logs.go). The
// guarantees below hold for each log on its own.
//
// # Guarantees
//
// Durability: with FlushSync (the default) an Append is acknowledged only
// after its records are committed, that is durable on a majority of nodes.
// With FlushAsync it is acknowledged once a majority hold it in the page
// cache: a crash of node processes loses nothing acknowledged, a power
// loss of a majority can.
//
// Exactly once: an Append tagged with a client id and sequence number is
// stored once however often it is retried, across leader changes, as long
// as the client keeps fewer than 1,024 appends in flight (the session
// window); a retry is answered with the original indexes. The state machine
// keeps 8,192 sessions and remembers 65,536 evicted ones; an Append it
// cannot check (its session evicted while the client may still retry what
// it stored) is refused with SessionExpired, never stored twice, except in
// the case package replica's sessions.go leaves open.
//
// Space: while the leader or a quorum of voters is below its free-space
// reserve (Config.MinFreeBytes) the leader refuses appends with NoSpace
// naming the nodes, serves reads and trims, and takes appends again once
// space is freed (space.go).
//
// Reads: a Read or Tail is linearizable unless it asks for a stale read:
// the leader confirms its leadership with a quorum (read index), in the
// term whose first entry it has committed, and waits until it has applied
// everything committed before the read began. A stale read is served by
// any node from what it has applied.
//
// Backups (backup.go, restore.go, restorelog.go): a log's leader (the
// default log's or a named log's) streams the state as of one snapshot's
// index, at least the commit index when the request came, and every
// retained record up to it, in package backup's format, while appends go
// on; entries a trim drops meanwhile stay on disk until the backup ends.
// Restore writes, from a backup of the default log, the data dir of a
// member of a new cluster, the records at their indexes, the client
// sessions kept and the new cluster's id (restoreid.go). A backup of any log is restored into a new named log of a
// running cluster by that log's leader (RestoreLog), as a raft snapshot
// every replica installs; a log whose restore did not finish refuses
// record operations until it is deleted.
//
// Who may do what (authz.go): without Config.TLS, every client may run
// every operation. With it, the raft port takes only certificates that
// name a node (the URI SAN NodeURI(id)), and joining another node,
// removing, transferring leadership and trimming need a client whose
// certificate's common name is in TLSConfig.Admins; other clients and the
// nodes themselves (which may join themselves) get PermissionDenied.
//
// Cluster identity (hello.go, clusterid.go): every raft connection opens
// with a hello naming both ends' node, address and cluster id; a node
// refuses the connection of a node of another cluster, which raft alone
// would follow, cutting its log to that cluster's. The id is set by the
// default log's leader in the catalog, once every voter answers the
// hello, and kept in the data dir; a full restore gives its new cluster an
// id of its own, never the old cluster's, in every member's data dir
// before the first start (restoreid.go), so the restored nodes and the old
// cluster's refuse each other from the start. A new member learns it from
// its join target's status before it admits any raft connection
// (joinid.go), and a leader refuses to add a node whose status names
// another cluster.
//
// Data dir: a node holds an exclusive lock on its data dir while it runs
// (datadir.go). A damaged durable record where it reads at start (raft's
// log since the newest snapshot, the store's recovery) stops Start with
// ErrDamaged naming the file and offset; PrepareRepair and Apply cut a
// stopped node's log back before the damage, keeping its term and vote,
// so that it catches up from the leader (repair.go), which is safe only
// while a quorum of the other nodes holds what it loses.
//
// Concurrency: a Node serves any number of client connections, each
// pipelining requests (package transport); Close may be called from any
// goroutine and waits for every request to finish. The leader proposes
// appends to raft in batches, one batch in flight at a time (replica.Proposer):
// an append may wait up to Config.BatchLinger for the batch before it to
// commit, so that one fdatasync per node stores many appends.
package node
