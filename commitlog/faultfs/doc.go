// Package faultfs is an in-memory implementation of the commit log's
// file-system seam, package vfs, that simulates power loss and injects
// errors, so that tests of commitlog and raftstore can crash a log at any
// instant without pulling a plug. It owns no on-disk format and does not
// touch the real file system.
//
// # Model
//
// Every file (inode) holds two images: the page cache, which ReadAt,
// WriteAt and memory mappings see, and the durable image, which is what a
// crash leaves on the disk. File.Sync copies the whole page cache to the
// durable image, content and length. Mapping.Sync copies exactly the bytes
// [off, off+n) of the mapping, with no rounding to pages, and lengthens the
// durable image to off+n if it was shorter. Nothing else changes a durable
// image: writes, Allocate and Truncate change only the page cache, and a
// failed sync changes nothing.
//
// Every directory likewise keeps a volatile namespace (names of files and
// of subdirectories), changed by creations, renames and removals, and a
// durable one, which SyncDir replaces with a copy of the volatile one. A
// directory is an entry of its parent like a file: it survives a crash only
// if its parent's durable namespace names it, and everything in it is lost
// with it. MkdirAll makes the directories it creates durable, as package
// vfs requires, by syncing the parent of each; an OpSyncDir fault on one of
// those syncs leaves the directory in place but not durable. Remove of an
// empty directory takes it out of its parent's volatile namespace; until
// the parent is synced a crash brings it back with what its durable
// namespace names. Rename between two directories is refused.
//
// # Crash
//
// FS.Crash returns a new FS holding what a power loss at that instant would
// leave on the disk, and kills the old FS: every later call on it, on its
// files, its mappings and its locks fails with an error matching ErrCrashed,
// so goroutines of the crashed program fail instead of touching the new
// state. The new FS has each directory reachable from "/" or "." through
// durable namespaces, each with its durable namespace, and for each file
// reachable from them, contents built from its durable image and its page
// cache:
//
//   - Length: if the two lengths differ (an append, Allocate or Truncate
//     that was not synced), Crash flips a coin to decide whether the size
//     change reached the disk, so the length is either the durable length or
//     the page cache's. Either image is read as zero past its own end.
//   - Content: the file is cut into 4096-byte pages. A page on which the two
//     images agree is copied. For a page on which they differ Crash picks one
//     outcome with the FS's seeded math/rand: the durable bytes (the write
//     was lost), the page-cache bytes (it reached the disk), a torn page (a
//     random prefix of its 512-byte sectors new, the rest old), or garbage
//     (old or new, with random bytes at the differing positions of a random
//     sub-range of the page).
//
// So a byte on which the two images agree always survives a crash; in
// particular every byte that was synced and not written since survives, and
// a byte that was not synced holds its durable value, its page-cache value,
// or, only on a page that was written since the last sync, garbage. The
// outcome depends only on the seed and the sequence of calls: the same seed
// and the same calls give the same crash. CrashDropAll and CrashKeepAll are
// deterministic variants for table tests that keep, for every file, only the
// durable image, or only the page cache. In the new FS the durable image of
// every file equals its page cache, no file is locked, no fault is injected,
// the sync counter is zero and no OnSync hook is set; the capacity carries
// over, and the seed of the new FS is drawn from the old one's generator.
//
// # Faults
//
// Inject makes chosen operations fail, after a number of successful calls,
// once or on every later call; SetCapacity bounds the total length of all
// files so that growth fails with ENOSPC. An operation failed by an injected
// error or by the capacity changes nothing. Errors are returned as
// *os.PathError (*os.LinkError for Rename) wrapping the cause, as the os
// package does, so errors.Is matches os.ErrNotExist, syscall.EIO,
// ErrCrashed and the like.
//
// # Concurrency
//
// An FS and its files, mappings and locks are safe for concurrent use: one
// mutex per FS guards all metadata and both images, and ReadAt, WriteAt and
// File.Sync take it. The bytes of a mapping are the page cache itself, not a
// copy, and callers store into them without any lock; the contract, as with
// a real mapping, is that goroutines touch disjoint byte ranges while any of
// them writes. Mapping.Sync reads only the range it is given, so it may run
// while other goroutines store just past that range. File.Sync, ReadAt over
// a mapped range and Crash read the page cache too, so they must not run
// while a goroutine stores into the bytes they read: crash a program between
// its stores (for instance from the goroutine that drives appends, or after
// stopping the appenders), not in the middle of one.
package faultfs
