package raftstore

// Index files map a group's raft indexes to commit-log positions, the way
// RocketMQ's ConsumeQueue maps queue offsets to CommitLog offsets. Each
// group has a directory index/<group>/ of files named by the 20-digit raft
// index of their first slot; a file holds indexSlotsPerFile slots of 8
// bytes in the machine's byte order (raftlog supports little-endian
// machines: amd64, arm64), each the commit-log position of the entry plus one
// (0 means empty). Slot i of the file named B describes raft index B+i.
//
// The slots are stored through a shared memory mapping as entries are
// appended, without a sync on the append path. The checkpoint (see db.go)
// syncs the dirty slots before it records the group's indexes, and
// recovery re-derives every slot written since from the commit log, so a
// slot past the checkpoint that a crash tore is always rewritten before it
// is read.

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"unsafe"

	"github.com/raftlog/raftlog/commitlog/vfs"
	"github.com/raftlog/raftlog/mmap"
)

const (
	indexSlotSize     = 8
	indexSlotsPerFile = 1 << 16 // 512 KiB files
	indexFileSize     = indexSlotSize * indexSlotsPerFile
)

// indexFile is one mapped index file.
type indexFile struct {
	base uint64 // raft index of slot 0; a multiple of indexSlotsPerFile
	path string
	f    vfs.File
	m    vfs.Mapping
	data []byte

	// dirtyLo and dirtyHi bound the slots stored since the last sync;
	// guarded by the group's write lock.
	dirtyLo, dirtyHi int

	// readAhead is set once the whole file was asked into the page cache
	// for a sequential reader (see readAheadAll).
	readAhead atomic.Bool
}

// slot returns a pointer to the slot of raft index i, which the file holds.
// Slots are 8-byte aligned in a page-aligned mapping, so they can be loaded
// and stored atomically while readers run.
func (f *indexFile) slot(i uint64) *uint64 {
	off := (i - f.base) * indexSlotSize
	return (*uint64)(unsafe.Pointer(&f.data[off]))
}

// load returns the position stored for raft index i, or -1.
func (f *indexFile) load(i uint64) int64 {
	return int64(atomic.LoadUint64(f.slot(i))) - 1
}

// store records pos for raft index i.
func (f *indexFile) store(i uint64, pos int64) {
	atomic.StoreUint64(f.slot(i), uint64(pos+1))
	s := int(i - f.base)
	if f.dirtyHi == 0 || s < f.dirtyLo {
		f.dirtyLo = s
	}
	if s+1 > f.dirtyHi {
		f.dirtyHi = s + 1
	}
}

// readAheadAll asks the kernel, once, to read the whole file into the page
// cache without waiting for it: the file is mapped for random access, so
// a sequential reader (raft catching a follower up, a client reading the
// log in order) would otherwise fault its slots in one page at a time.
func (f *indexFile) readAheadAll() {
	if f.readAhead.CompareAndSwap(false, true) {
		f.m.Advise(0, indexFileSize, mmap.WillNeed)
	}
}

// sync makes the dirty slots durable.
func (f *indexFile) sync() error {
	if f.dirtyHi == 0 {
		return nil
	}
	lo, hi := f.dirtyLo*indexSlotSize, f.dirtyHi*indexSlotSize
	if err := f.m.Sync(lo, hi-lo); err != nil {
		return fmt.Errorf("raftstore: sync index %s: %w", f.path, err)
	}
	f.dirtyLo, f.dirtyHi = 0, 0
	return nil
}

func (f *indexFile) close() {
	f.m.Unmap()
	f.f.Close()
}

// indexFileName returns the name of the file whose first slot is base.
func indexFileName(base uint64) string { return fmt.Sprintf("%020d", base) }

// fileBase returns the base of the file holding raft index i.
func fileBase(i uint64) uint64 { return i - i%indexSlotsPerFile }

// openIndexFile opens or creates the index file at base in dir. New files
// are preallocated and zeroed; the caller syncs the directory.
func openIndexFile(fs vfs.FS, dir string, base uint64, create bool) (*indexFile, error) {
	path := filepath.Join(dir, indexFileName(base))
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE
	}
	f, err := fs.OpenFile(path, flag, 0o644)
	if err != nil {
		return nil, fmt.Errorf("raftstore: open index %s: %w", path, err)
	}
	size, err := f.Size()
	if err == nil && size < indexFileSize {
		err = f.Allocate(indexFileSize)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("raftstore: allocate index %s: %w", path, err)
	}
	m, err := f.Map(indexFileSize)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("raftstore: map index %s: %w", path, err)
	}
	// Lookups are random: a page fault reads the page of the slot and not
	// a read-ahead window around it (up to the whole file), which made the
	// first GetLog after a cold start take milliseconds. A hint: a
	// failure only costs reads.
	m.Advise(0, indexFileSize, mmap.Random)
	return &indexFile{base: base, path: path, f: f, m: m, data: m.Bytes()}, nil
}

// indexFiles is an immutable, contiguous run of index files, published
// through an atomic pointer.
type indexFiles []*indexFile

// find returns the file holding raft index i, or nil.
func (fs indexFiles) find(i uint64) *indexFile {
	if len(fs) == 0 || i < fs[0].base {
		return nil
	}
	k := (i - fs[0].base) / indexSlotsPerFile
	if k >= uint64(len(fs)) {
		return nil
	}
	return fs[k]
}

// parseIndexFileName returns the base named by an index file name.
func parseIndexFileName(name string) (uint64, bool) {
	if len(name) != 20 {
		return 0, false
	}
	var v uint64
	for _, c := range name {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return v, v%indexSlotsPerFile == 0
}
