// Package raftstore stores hashicorp/raft's log and stable state in a
// raftlog commit log. A *Store implements raft.LogStore, raft.StableStore
// and raft.CommitTrackingLogStore, and raft.MonotonicLogStore reporting
// false unless Options.Monotonic is set (see "Snapshot installs"); Open
// gives a store of its own, and a DB (OpenDB) shares one commit log, and
// so one group commit, between many raft groups. Groups are created on
// first use (DB.Store) and removed with their data (DB.DropGroup) while
// the others run; Store.Size tells what one holds.
//
// A Store from Open is group 0 of a DB of its own: Open(dir) is
// OpenDB(dir) then DB.Store(0), and closing that Store closes the DB. The
// same directory opened later with OpenDB holds the log as group 0, next
// to any groups added.
//
// # Using it with raft
//
// Give the one Store to raft.NewRaft as both its LogStore and its
// StableStore. Close it after raft has shut down, once
// raft.Shutdown().Error() has returned: until then raft's goroutines call
// the store, and a call after Close fails with ErrClosed (raft panics
// when it cannot store a term). With a DB, shut down every group's raft
// before DB.Close.
//
// Opening a DB that holds no raft state next to a raft-boltdb store (a
// raft.db in its directory or the parent) fails with ErrBoltDBFound rather
// than starting raft on an empty log: copy the old store in with
// MigrateContext first (Options.IgnoreBoltDB to start empty anyway). A
// group a migration did not finish is refused (ErrMigrationIncomplete).
// Options.Logger, when set, says at info level what opening found and
// did: a crash recovered, a torn record cut off, the records replayed
// past the checkpoint, the index rebuilt. Metrics lists the metrics a DB
// reports.
//
// # Platforms
//
// Linux and macOS, on 64-bit little-endian CPUs (amd64, arm64). It is
// tested on Linux; on macOS it builds, and syncs with F_FULLFSYNC, which
// also empties the drive's cache. Other systems are not supported: the
// memory mappings, fdatasync and fallocate go through golang.org/x/sys/unix
// (package mmap, commitlog/vfs). Index files hold positions in the
// machine's byte order, so a data directory moves between the
// little-endian machines above but not to a big-endian one.
//
// # Layout
//
// A directory holds the commit log (log/), one index directory per group
// (index/<group>/, fixed-width slots mapping raft indexes to commit-log
// positions in memory-mapped files of up to 512 KiB, 8 bytes per entry;
// index.go) and the stable state
// (stable.0, stable.1: every group's keys, and the commit-log position at
// which each group id was last dropped; stable.go). Each raft.Log is one
// commit-log record (codec.go), checked by the log's CRC-32C on every
// read.
//
// A group's index files hold the slots of its entries and room for 2,048
// more past its last one (16 KiB), made ahead of need in whole pages, a
// file at least doubling when it grows. So an empty group costs its index
// directory; a group of up to 511 entries (from index 1) one file of
// 20 KiB; a larger one at most twice (8 bytes per entry plus 16 KiB) in the
// file it writes to, 512 KiB per full file before it, and up to 16 KiB of
// the next file once its last entry is within 2,048 of a file's end.
//
// # Durability
//
// With SyncFlush (the default) StoreLogs returns only after its entries
// are durable; the commit log's group commit makes one fdatasync serve
// every group whose StoreLogs arrived while the previous one ran. With
// AsyncFlush StoreLogs returns once the entries are in the page cache:
// entries survive a crash of the process, but a power loss or an
// operating-system crash can lose acknowledged entries, which Raft's
// safety argument does not allow for. In both modes Set, SetUint64 and
// DeleteRange are durable when they return: votes are never asynchronous.
//
// A failed write or sync, of the commit log or of the stable state, stops
// the DB (fail-stop): DB.Err and Store.Err report it, every later write of
// every group fails with it, and Get returns only what was durable before.
// Close and reopen the DB to recover what was durable. After Close, every
// method with an error result returns ErrClosed (see DB.Close).
//
// DB.DropGroup is durable when it returns, and a crash while it runs
// leaves the group either whole or dropped. It removes the group's keys
// and records where the commit log ended, in one write of the stable
// state, once every record of the group is durable; recovery then passes
// over the group's records below that position, and over a checkpoint's
// indexes of it taken before, so a dropped group never comes back from
// the replay of the commit log, and a group created again with the same
// id holds only its own entries. Its records go with their segments once
// no other group needs them, and the position is forgotten once the log
// no longer reaches below it (drop.go).
//
// A full disk is not a failure. Every group keeps its room in the index
// and the commit log prepares its next segment once the active one is
// half full, so when the disk fills each group can still store 2,048
// entries (a trim among them, which frees space), as long as the half
// segment left holds them (32 MiB by default); past that, StoreLogs fails
// with an error wrapping
// syscall.ENOSPC (commitlog.ErrNoSpace for the commit log), writes
// nothing, and succeeds again once there is space. Making room ahead is
// tried again by every StoreLogs while it fails, and never fails one.
//
// A StoreLogs batch is all or nothing across a crash: recovery removes a
// batch whose last entry did not reach the disk. A staged commit index
// (StageCommitIndex) is stored in the last entry of the next batch, so it
// is exactly as durable as that batch.
//
// Every CheckpointInterval the index slots written since the last
// checkpoint are synced and every group's first, last and commit index is
// stored in the commit log's checkpoint, with the commit-log position to
// replay from. Open replays only the records after that position: opening
// after a clean shutdown or a crash reads the checkpoint and the tail. The
// segments and index files are mapped for random access, so a cold start
// (files not in the page cache, as after a reboot) reads a few pages to
// open the DB and about two for a GetLog, not a read-ahead window around
// each; GetLogs in order read ahead.
//
// # Concurrency
//
// A Store is safe for concurrent use. Writers of a group (StoreLogs,
// DeleteRange) are serialised; GetLog, FirstIndex and LastIndex do not wait
// for them: GetLog takes an uncontended read lock, loads the position from
// the mapped index slot and reads one record, so it is O(1) in the size of
// the log. GetLog returns a copy that later writes never change.
// DB.Store and DB.DropGroup are serialised with each other and with
// DB.Close; DropGroup waits for the group's write in progress and its
// readers in GetLog, and does not stop the other groups, apart from a
// DB.Store that creates a group meanwhile. Growing an index file (once
// per doubling) keeps the group's readers out while it remaps the file.
//
// # Contracts
//
// A missing entry returns raft.ErrLogNotFound itself, unwrapped. FirstIndex
// and LastIndex are 0 for an empty store. The first batch of an empty store
// may start at any index; a later batch continues from the last index, or
// starts past it, and then the store first deletes every entry it holds
// (unless Options.Monotonic). A batch that overlaps the stored entries is
// refused rather than stored over them (raft deletes a conflicting suffix
// with DeleteRange first), and so is one with a nil entry, index 0, an
// index past MaxIndex or indexes that do not increase by one: the error
// wraps ErrInvalidBatch, names the entry and the cause, and nothing is
// written. DeleteRange removes a prefix, a suffix or everything. A missing
// stable key reads as an empty value or 0.
//
// # Snapshot installs (hashicorp/raft#697)
//
// A Store reports IsMonotonic() false, so that raft v1.8.0 handles a
// snapshot it installs as it does with raft-boltdb: it compacts the log up
// to the snapshot (within its TrailingLogs) and keeps the entries after
// it, and when the store holds nothing past the snapshot it goes on
// storing after a gap, which the store accepts by dropping what lies
// below. With a store that reports true, raft empties the whole store but
// keeps its own last index, and a follower whose log ran past the snapshot
// stores entries after a hole and panics "log not found".
// Options.Monotonic restores the strict store (it refuses every gap and
// reports true) for a service that installs snapshots itself through a
// wrapper, as package node does.
//
// # Repair
//
// With the DB closed, Inspect reads every commit-log record, without
// changing anything, to find the first damaged one (a durable record that
// fails its checksum) and what a cut before it leaves of each group;
// CutLog makes that cut, durably: every group keeps what it held before
// the damaged record was written (repair.go). The stable state is never
// touched.
//
// Nor is it repaired. Its two files are written alternately, so a crash
// leaves one of them valid; when neither is (both damaged or deleted) in a
// DB that was used, OpenDB refuses it with ErrStableLost, naming the files
// and what is wrong with each, rather than start every group's raft with
// term 0 and no vote, which could vote twice in a term; Inspect reports it
// (Inspection.StableLost). A DB that shows no group, new or with its first
// stable write torn by a crash, opens without them (stablelost.go). Put
// the files back, or remove the node from its clusters and start it afresh
// in an empty directory; Options.UnsafeResetStableState opens such a DB
// with an empty stable state, for one used only as raft's LogStore. A
// stable file that cannot be read (an I/O error) fails OpenDB too, rather
// than being passed over for the other file, whose state may be older.
//
// # What it does not do
//
// Segments of the commit log are removed only when no group needs them, so
// a group that never compacts pins the log for every group (until it is
// dropped: DropGroup releases what only it held). It does not
// change how raft treats a follower whose log runs past a snapshot with
// entries the leader's log does not have (a deposed leader's uncommitted
// ones), or further than the follower's TrailingLogs: as with raft-boltdb,
// the leader sends it the snapshot again until one reaches past its log. A DB holds at
// most MaxGroups (1,308) groups: every group's indexes live in one
// checkpoint.
package raftstore
