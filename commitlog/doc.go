// Package commitlog is a segmented, memory-mapped, append-only log after the
// design of RocketMQ's CommitLog: records are appended to fixed-size,
// preallocated segment files named by the 20-digit offset of their first
// byte, read back through shared memory mappings, and made durable by one
// flusher goroutine that syncs for every appender at once (group commit).
// It knows nothing of Raft; package raftstore builds on it.
//
// # Layout
//
// A log directory holds the segment files (00000000000000000000,
// 00000000000067108864, ...), a checkpoint file, a sync mark file, an
// abort marker that exists while the log is open, and a LOCK file. The
// record format is described in format.go, the checkpoint format in
// checkpoint.go and the sync mark in syncmark.go.
// Positions are logical offsets: a record's position is the offset of its
// header in the concatenation of all segments. Once the active segment is
// half full, the next one is created, preallocated and mapped in the
// background, so an append never waits for file creation, and a log holds
// at most one segment ahead of its data. Segments that DeleteBefore removes
// are recycled as later segments once no reader holds them (recycle.go).
//
// Reads copy from the mappings, which are advised for random access: the
// first read of a record that is not in the page cache reads its pages,
// not a read-ahead window of up to read_ahead_kb around them, so opening a
// cold log and reading one record from it cost a few small reads. Readers
// that go forward (an Iterator, the recovery scan, and Reads that follow
// one another) ask the kernel for what comes next (readahead.go).
//
// # Durability
//
// With SyncFlush (the default) Append and AppendBatch return only after a
// sync covering the records has completed: an acknowledged record survives
// a crash of the process, of the operating system and a power loss (given
// a disk that honours fdatasync). Appenders write their bytes under a
// short lock (WriteParts passes parts of GatherMin bytes or more to the
// kernel from where they are, one pwritev per run; smaller ones are
// copied into the run first) and wait; the flusher takes every waiting request, syncs once
// and completes them all, so one fdatasync serves every appender that
// arrived while the previous one ran. A request that waits longer than
// SyncFlushTimeout fails with ErrSyncTimeout without knowing the outcome.
//
// With AsyncFlushUnsafe appends return as soon as their bytes are in the
// page cache; a background flusher syncs every FlushInterval once
// FlushLeastPages pages are dirty, and everything once per
// FlushThoroughInterval and at Close. Acknowledged records survive a crash
// of the process but not a power loss or an operating-system crash. Sync
// makes everything written so far durable in either mode.
//
// A failed write, fdatasync or msync fails the log: the error is latched,
// every waiter and every later call gets it, and nothing is retried. Reopen
// the directory to recover. Running out of space while creating a segment
// is different: the append fails with ErrNoSpace before writing anything
// and the log stays usable.
//
// Truncate and DeleteBefore are durable when they return, and every file
// creation, rename and removal is followed by a sync of the directory.
// Open creates a missing log directory, and its missing parents, with
// vfs.FS.MkdirAll, which syncs the parent of each: a power loss soon after
// the first Open cannot undo the directory and the records in it.
//
// # Recovery
//
// The checkpoint file (two alternating checksummed slots) records the
// durable watermark, the newest durable record and its store time
// (physicMsgTimestamp), the current epoch and where it began, and an opaque
// blob from the layer above. Open tells a clean shutdown from a crash by
// the abort marker, then scans forward from the watermark, checking the
// CRC, position and epoch of each record, and ends the log at the first
// that fails: the torn tail. After every sync the log writes how far it
// has synced into the sync mark file (one small write, never synced: a
// killed process leaves it exact, a power loss an older value or none), so
// a record that fails its checks before that point is known to have been
// synced: damage, for which Open fails with ErrCorrupt rather than cut
// acknowledged records off as a torn tail. Only the tail is read, so opening a log of
// many gigabytes costs about as much as opening an empty one. After a crash
// the recovered tail is synced and a new epoch begins, so bytes past the
// end can never be mistaken for records later. The record the checkpoint
// names as the newest durable one is verified, and every read checks the
// record's CRC: a bad record below the watermark is reported as ErrCorrupt
// naming the segment file and offset, never dropped or returned. Verify
// checks every record. With the log closed, a Scanner reads every record
// without changing a byte and reports such damage, and Cut removes every
// record from a position on, durably, for a layer above that can fetch
// them again (repair.go).
//
// # Concurrency
//
// A Log is safe for concurrent use. Appends are serialised by one mutex;
// syncs run on the flusher goroutine without it; reads take no lock but
// an uncontended read lock that only suffix truncation takes exclusively.
// Segments are reference-counted: a reader holds the segment it copies
// from, and a removed segment is unmapped only when its last holder
// releases it, so reads running alongside appends, prefix deletions and
// truncations never touch an unmapped page. Values returned are copies.
// After Close every method with an error result returns ErrClosed, reads
// and iterators included, even those racing with Close (Err excepted, which
// reports only a failure); see Log.Close for the others.
//
// # What it does not do
//
// It keeps no index from anything but positions to records, does not
// compress, and does not replicate; those belong to the layers above.
package commitlog
