package raftstore

// Index files map a group's raft indexes to commit-log positions, the way
// RocketMQ's ConsumeQueue maps queue offsets to CommitLog offsets. Each
// group has a directory index/<group>/ of files named by the 20-digit raft
// index of their first slot; a file holds up to indexSlotsPerFile slots
// of 8 bytes in the machine's byte order (raftlog supports little-endian
// machines: amd64, arm64), each the commit-log position of the entry plus one
// (0 means empty). Slot i of the file named B describes raft index B+i.
//
// A group keeps room on disk for indexRoom (2,048) entries past its last
// one: every StoreLogs makes sure, before it writes, that the slots of its
// entries and of the indexRoom indexes after its last one exist, growing
// the file that holds them and creating the next file ahead of need. A
// step ahead that fails (the disk is full) fails no write: the next
// StoreLogs tries it again. So a disk that fills stops a group's writes
// only once it has stored indexRoom more entries, enough for what raft
// stores before a leader refuses appends for space (node/space.go) and
// for the trim that frees it, wherever in its index files the group is.
// A file created ahead holds no slot until entries reach it: readers look
// only at slots of [first, last], and recovery sets those from the
// checkpoint and the commit log, never from the files.
//
// A file is a whole number of pages long, up to indexFileSize (512 KiB):
// as long as its slots up to the room need, and at least twice as long as
// it was when it grows, so that it grows a few times per file and a group
// of a few entries costs 20 KiB of disk and of mapping, not 512 KiB.
// Growing unmaps the file, extends it (zeroes: empty slots) and maps it
// again, with readers kept out. A file of any length opens: it is
// extended to a whole number of pages (an older version's files are 4 KiB
// times a power of two or 512 KiB, and an older version extends a file to
// its own sizes when it opens it); a file that cannot be extended for lack
// of space opens with the whole pages it has (a file created ahead whose
// length a crash lost holds none) and grows when it is needed.
//
// The slots are stored through a shared memory mapping as entries are
// appended, without a sync on the append path. The checkpoint (see db.go)
// syncs the dirty slots before it records the group's indexes, and
// recovery re-derives every slot written since from the commit log, so a
// slot past the checkpoint that a crash tore is always rewritten before it
// is read.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"unsafe"

	"github.com/raftlog/raftlog/commitlog"
	"github.com/raftlog/raftlog/commitlog/vfs"
	"github.com/raftlog/raftlog/mmap"
)

const (
	indexSlotSize     = 8
	indexSlotsPerFile = 1 << 16 // files of at most 512 KiB
	indexFileSize     = indexSlotSize * indexSlotsPerFile
	indexPageSize     = 4096 // index files are whole pages: 512 slots each
	// indexRoom is how many slots past its last entry a group keeps on
	// disk (16 KiB), across index files: the entries it can still store
	// once the disk is full. See the top of the file.
	indexRoom = 2048
)

// indexFileSizeFor returns the length an index file that is cur bytes
// long grows to so that it holds slots 0..slots-1: their bytes rounded up
// to whole pages, and at least twice cur, up to indexFileSize.
func indexFileSizeFor(slots uint64, cur int) int {
	size := indexFileSize
	if slots < indexSlotsPerFile {
		size = max(int((slots*indexSlotSize+indexPageSize-1)/indexPageSize*indexPageSize), indexPageSize)
	}
	return min(max(size, 2*cur), indexFileSize)
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

// openIndexFile opens the index file at base in dir, or creates it
// (create), at least size bytes long, and whole pages. A file it creates
// is preallocated and zeroed, and removed again if that fails, so that a
// full disk leaves no empty file behind; the caller syncs the directory.
// An existing file opened with size 0 that cannot be extended for lack of
// space opens with the whole pages it has (none: unmapped, with no slot).
func openIndexFile(fs vfs.FS, dir string, base uint64, create bool, size int) (*indexFile, error) {
	path := filepath.Join(dir, indexFileName(base))
	f, created, err := openOrCreate(fs, path, create)
	if err != nil {
		return nil, fmt.Errorf("raftstore: open index %s: %w", path, err)
	}
	fail := func(err error) (*indexFile, error) {
		f.Close()
		if created {
			fs.Remove(path)
		}
		return nil, err
	}
	asked := size
	have, err := f.Size()
	if err == nil {
		size = max(size, indexFileSizeFor(uint64(have+indexSlotSize-1)/indexSlotSize, 0))
		if have < int64(size) {
			err = f.Allocate(int64(size))
			if err != nil && asked == 0 && !created && commitlog.IsNoSpace(err) {
				size, err = int(have/indexPageSize*indexPageSize), nil
			}
		}
	}
	if err != nil {
		return fail(fmt.Errorf("raftstore: allocate index %s: %w", path, err))
	}
	idx := &indexFile{base: base, path: path, f: f}
	if err := idx.mapFile(size); err != nil {
		return fail(err)
	}
	return idx, nil
}

// openOrCreate opens the file at path, creating it if create is set and
// it does not exist; created reports that it did.
func openOrCreate(fs vfs.FS, path string, create bool) (f vfs.File, created bool, err error) {
	if create {
		f, err = fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil || !errors.Is(err, os.ErrExist) {
			return f, err == nil, err
		}
	}
	f, err = fs.OpenFile(path, os.O_RDWR, 0)
	return f, false, err
}

// mapFile maps the first size bytes of the file; none when size is 0.
func (f *indexFile) mapFile(size int) error {
	if size == 0 {
		f.m, f.data = nil, nil
		return nil
	}
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

// grown returns the file grown to hold slots 0..slots-1 (see
// indexFileSizeFor): a new indexFile of the same open file, mapped anew,
// with the same dirty slots (the mapping is shared, so the slots stored
// through the old one are in the file). f's mapping is gone: the caller
// must hold the group's rw lock for writing and publish the new file
// before releasing it. On failure f is mapped again at its old size,
// unless that fails too (broken is then set, and f holds no slot).
func (f *indexFile) grown(slots uint64) (g *indexFile, broken bool, err error) {
	old := len(f.data)
	size := indexFileSizeFor(slots, old)
	if f.m != nil {
		f.m.Unmap()
	}
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

// covers reports whether the files hold every slot of [lo, hi].
func (fs indexFiles) covers(lo, hi uint64) bool {
	for b := fileBase(lo); ; b += indexSlotsPerFile {
		f := fs.find(b)
		if f == nil || f.slots() <= min(hi, b+indexSlotsPerFile-1)-b {
			return false
		}
		if hi-b < indexSlotsPerFile {
			return true
		}
	}
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
