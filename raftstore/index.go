package raftstore

// Index files map a group's raft indexes to commit-log positions, the way
// RocketMQ's ConsumeQueue maps queue offsets to CommitLog offsets. Each
// group has a directory index/<group>/ of files named by the 20-digit raft
// index of their first slot; a file holds up to indexSlotsPerFile slots
// of 8 bytes in the machine's byte order (raftlog supports little-endian
// machines: amd64, arm64), each the commit-log position of the entry plus one
// (0 means empty). Slot i of the file named B describes raft index B+i.
//
// A file starts as small as the slots first stored in it need (at least
// minIndexFileSize, one page) and doubles as slots further on are stored,
// up to indexFileSize (512 KiB), so that a group of a few entries costs a
// page of disk and of mapping, not 512 KiB. It doubles once three quarters
// of it are used (indexFileSizeAhead), so that a full disk stops a group's
// writes only when a file has no slot left. Growing unmaps the file,
// extends it (zeroes: empty slots) and maps it again, with readers kept
// out. A file of any length opens: it is extended to the next size of the
// series (an older version's files are all 512 KiB, and that version
// extends a shorter file to 512 KiB when it opens it).
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
	indexSlotsPerFile = 1 << 16 // files of at most 512 KiB
	indexFileSize     = indexSlotSize * indexSlotsPerFile
	minIndexFileSize  = 4096 // one page: 512 slots
)

// indexFileSizeFor returns the length of an index file that holds slots
// 0..slots-1: the smallest of minIndexFileSize, twice that, ... up to
// indexFileSize that does.
func indexFileSizeFor(slots uint64) int {
	size := minIndexFileSize
	for uint64(size) < slots*indexSlotSize && size < indexFileSize {
		size *= 2
	}
	return size
}

// indexFileSizeAhead is the length an index file that holds slots
// 0..slots-1 is grown to: indexFileSizeFor(slots), or twice that (up to
// indexFileSize) once those slots fill more than three quarters of it. So
// a file grows while a quarter of its slots is still free: a growth that
// fails because the disk is full costs nothing until the file is full
// (a trim, which frees space, can still be stored), and only then fails
// a write.
func indexFileSizeAhead(slots uint64) int {
	size := indexFileSizeFor(slots)
	if size < indexFileSize && slots*indexSlotSize > uint64(size)/4*3 {
		size *= 2
	}
	return size
}

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

// slots returns how many slots the file holds now.
func (f *indexFile) slots() uint64 { return uint64(len(f.data)) / indexSlotSize }

// slot returns a pointer to the slot of raft index i, which the file holds.
// Slots are 8-byte aligned in a page-aligned mapping, so they can be loaded
// and stored atomically while readers run.
func (f *indexFile) slot(i uint64) *uint64 {
	off := (i - f.base) * indexSlotSize
	return (*uint64)(unsafe.Pointer(&f.data[off]))
}

// load returns the position stored for raft index i, or -1 (also when
// the file does not reach slot i).
func (f *indexFile) load(i uint64) int64 {
	if i-f.base >= f.slots() {
		return -1
	}
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
	if f.readAhead.CompareAndSwap(false, true) && f.m != nil {
		f.m.Advise(0, len(f.data), mmap.WillNeed)
	}
}

// sync makes the dirty slots durable.
func (f *indexFile) sync() error {
	if f.dirtyHi == 0 {
		return nil
	}
	if f.m == nil {
		return fmt.Errorf("%w: index %s is not mapped", ErrCorrupt, f.path)
	}
	lo, hi := f.dirtyLo*indexSlotSize, f.dirtyHi*indexSlotSize
	if err := f.m.Sync(lo, hi-lo); err != nil {
		return fmt.Errorf("raftstore: sync index %s: %w", f.path, err)
	}
	f.dirtyLo, f.dirtyHi = 0, 0
	return nil
}

func (f *indexFile) close() {
	if f.m != nil {
		f.m.Unmap()
	}
	f.f.Close()
}

// indexFileName returns the name of the file whose first slot is base.
func indexFileName(base uint64) string { return fmt.Sprintf("%020d", base) }

// fileBase returns the base of the file holding raft index i.
func fileBase(i uint64) uint64 { return i - i%indexSlotsPerFile }

// openIndexFile opens or creates the index file at base in dir, at least
// size bytes long (0: as long as it is, rounded up to a size of the
// series). New files are preallocated and zeroed; the caller syncs the
// directory.
func openIndexFile(fs vfs.FS, dir string, base uint64, create bool, size int) (*indexFile, error) {
	path := filepath.Join(dir, indexFileName(base))
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE
	}
	f, err := fs.OpenFile(path, flag, 0o644)
	if err != nil {
		return nil, fmt.Errorf("raftstore: open index %s: %w", path, err)
	}
	have, err := f.Size()
	if err == nil {
		size = max(size, indexFileSizeFor(uint64(have+indexSlotSize-1)/indexSlotSize))
		if have < int64(size) {
			err = f.Allocate(int64(size))
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("raftstore: allocate index %s: %w", path, err)
	}
	idx := &indexFile{base: base, path: path, f: f}
	if err := idx.mapFile(size); err != nil {
		f.Close()
		return nil, err
	}
	return idx, nil
}

// mapFile maps the first size bytes of the file.
func (f *indexFile) mapFile(size int) error {
	m, err := f.f.Map(size)
	if err != nil {
		return fmt.Errorf("raftstore: map index %s: %w", f.path, err)
	}
	// Lookups are random: a page fault reads the page of the slot and not
	// a read-ahead window around it (up to the whole file), which made the
	// first GetLog after a cold start take milliseconds. A hint: a
	// failure only costs reads.
	m.Advise(0, size, mmap.Random)
	f.m, f.data = m, m.Bytes()
	return nil
}

// grown returns the file grown to hold slots 0..slots-1: a new indexFile
// of the same open file, mapped anew, with the same dirty slots (the
// mapping is shared, so the slots stored through the old one are in the
// file). f's mapping is gone: the caller must hold the group's rw lock for
// writing and publish the new file before releasing it. On failure f is
// mapped again at its old size, unless that fails too (broken is then
// set, and f holds no slot).
func (f *indexFile) grown(slots uint64) (g *indexFile, broken bool, err error) {
	old, size := len(f.data), indexFileSizeFor(slots)
	f.m.Unmap()
	f.m, f.data = nil, nil
	g = &indexFile{base: f.base, path: f.path, f: f.f, dirtyLo: f.dirtyLo, dirtyHi: f.dirtyHi}
	err = f.f.Allocate(int64(size))
	if err != nil {
		err = fmt.Errorf("raftstore: grow index %s to %d bytes: %w", f.path, size, err)
	} else if err = g.mapFile(size); err == nil {
		return g, false, nil
	}
	if merr := f.mapFile(old); merr != nil {
		return nil, true, fmt.Errorf("%w: %w; mapping it again: %w", ErrCorrupt, err, merr)
	}
	return nil, false, err
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
