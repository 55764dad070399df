// Package vfs is the file-system seam of the commit log: the few calls
// commitlog makes on files, directories and memory mappings, as small
// interfaces, with Default backed by the operating system. Tests substitute
// an implementation that simulates crashes and injects errors (see package
// faultfs).
//
// Durability: File.Sync and Mapping.Sync return nil only after the bytes
// they cover are on stable storage; a file's name is durable only after
// SyncDir of its directory returns nil, and so is a rename or a removal.
// A directory MkdirAll creates is durable when MkdirAll returns nil: it
// syncs the parent of each one. Nothing else is durable.
//
// Concurrency: an FS is safe for concurrent use. A File or Mapping may be
// used from many goroutines as long as they touch disjoint byte ranges while
// any of them writes.
package vfs

import (
	"io"
	"os"

	"github.com/raftlog/raftlog/mmap"
)

// FS is the file-system interface commitlog uses.
type FS interface {
	// OpenFile opens the named file with os.OpenFile's flags and mode.
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// Remove removes the named file. The removal is durable only after
	// SyncDir of its directory.
	Remove(name string) error
	// Rename renames a file, replacing newname if it exists. The rename is
	// durable only after SyncDir of the directory.
	Rename(oldname, newname string) error
	// MkdirAll creates a directory and its missing parents and makes
	// them durable: it syncs the parent of every directory it creates,
	// so that a power loss cannot undo the creation. A directory that
	// exists already is left as it is: whoever created it makes it
	// durable.
	MkdirAll(dir string, perm os.FileMode) error
	// ReadDir returns the names of the entries of dir, sorted.
	ReadDir(dir string) ([]string, error)
	// SyncDir makes the creations, renames and removals in dir durable.
	SyncDir(dir string) error
	// Lock takes an exclusive advisory lock on the named file, creating
	// it, so that a second process cannot open the same log. Closing the
	// returned Closer releases the lock.
	Lock(name string) (io.Closer, error)
}

// File is an open file.
type File interface {
	io.ReaderAt
	io.WriterAt
	// WriteVAt writes the concatenation of bufs at off, as one WriteAt of
	// it would, without joining them first (pwritev on Linux). It returns
	// an error unless every byte was written.
	WriteVAt(bufs [][]byte, off int64) error
	// Name returns the name the file was opened with.
	Name() string
	// Size returns the file's current length.
	Size() (int64, error)
	// Allocate reserves disk blocks for the first size bytes of the file
	// and extends it to at least size bytes, so that later writes in that
	// range cannot fail for lack of space.
	Allocate(size int64) error
	// Truncate changes the file's length. A mapped file must never shrink.
	Truncate(size int64) error
	// Sync makes the file's written data, and the metadata needed to read
	// it back, durable (fdatasync).
	Sync() error
	// WriteBack writes the dirty pages of [off, off+n) to the disk and
	// waits for them (sync_file_range), without the flush of the disk's
	// cache or the metadata that Sync adds: it bounds how much a later
	// Sync has to write, and is no durability barrier.
	WriteBack(off, n int64) error
	// Map maps the first size bytes of the file, shared and writable.
	Map(size int) (Mapping, error)
	// Close closes the file. Mappings stay valid until unmapped.
	Close() error
}

// Mapping is a shared, writable memory mapping of the start of a file.
type Mapping interface {
	// Bytes returns the mapped memory. Stores into it change the file.
	Bytes() []byte
	// Sync makes the bytes in [off, off+n) durable (msync).
	Sync(off, n int) error
	// Advise passes a usage hint for [off, off+n) to the kernel.
	Advise(off, n int, advice mmap.Advice) error
	// Lock pins [off, off+n) in memory (mlock).
	Lock(off, n int) error
	// Unlock undoes Lock.
	Unlock(off, n int) error
	// Unmap removes the mapping. No byte of Bytes may be touched after.
	Unmap() error
}
