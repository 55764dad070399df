package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/commitlog"
)

// Compile-time checks of the interfaces hashicorp/raft looks for.
var (
	_ raft.LogStore               = (*Store)(nil)
	_ raft.StableStore            = (*Store)(nil)
	_ raft.MonotonicLogStore      = (*Store)(nil)
	_ raft.CommitTrackingLogStore = (*Store)(nil)
)

// Store is the log and stable store of one raft group. It is safe for
// concurrent use: raft appends from one goroutine while its replication
// goroutines read.
type Store struct {
	db    *DB
	group uint64
	dir   string
	// own is set for a Store returned by Open, which closes its DB.
	own bool

	// wmu serialises the writers of the group: StoreLogs, DeleteRange and
	// the checkpoint's snapshot of the indexes.
	wmu      sync.Mutex
	buf      []byte     // wmu: encoded entries of one batch, large data aside
	parts    [][]byte   // wmu: the entries' payloads in parts
	payloads [][][]byte // wmu: each entry's parts
	staged   uint64     // wmu: commit index staged for the next StoreLogs

	// rw keeps readers out while index files are unmapped.
	rw    sync.RWMutex
	files atomic.Pointer[indexFiles]

	first  atomic.Uint64 // 0 when the group holds no entries
	last   atomic.Uint64 // 0 when the group holds no entries
	commit atomic.Uint64 // the persisted commit index
	// nextGet is the index after the last GetLog's in an index file not
	// yet read ahead: a GetLog of it reads in order, and reads its index
	// file ahead (indexFile.readAheadAll).
	nextGet atomic.Uint64
	// pin is the commit-log end when the first batch of an empty group
	// began, or -1: until the batch sets first, it keeps releaseSegments
	// from removing the segments that batch is written to.
	pin atomic.Int64
	// dropped is set by DB.DropGroup under wmu, before it closes the
	// index files under rw: a writer (under wmu) or a reader (under rw)
	// that sees it false works on the group as it was.
	dropped atomic.Bool
	// size is the last estimate of Size, or nil.
	size atomic.Pointer[sizeEstimate]
}

// Open opens (or creates) the store in dir: group 0 of a DB of its own
// (OpenDB, then DB.Store(0)). Closing the Store closes the DB.
func Open(dir string, opts *Options) (*Store, error) {
	db, err := OpenDB(dir, opts)
	if err != nil {
		return nil, err
	}
	s, err := db.Store(0)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.own = true
	return s, nil
}

// Group returns the id of the store's raft group.
func (s *Store) Group() uint64 { return s.group }

// Close closes the DB of a Store returned by Open (see DB.Close for what
// calls return afterwards). Call it after raft has shut down
// (raft.Shutdown().Error() returned): raft calls the store until then.
// For a Store from a DB it does nothing but return ErrClosed once the DB
// is closed (and an error wrapping ErrGroupDropped once its group is
// dropped): close the DB.
func (s *Store) Close() error {
	if s.own {
		return s.db.Close()
	}
	return s.closedErr()
}

// closedErr returns ErrClosed once the DB is closed, an error wrapping
// ErrGroupDropped once the group is dropped, and nil before.
func (s *Store) closedErr() error {
	if s.db.closed.Load() {
		return ErrClosed
	}
	if s.dropped.Load() {
		return fmt.Errorf("%w: group %d", ErrGroupDropped, s.group)
	}
	return nil
}

// Err returns the failure that stopped the store's DB, or nil (see
// DB.Err): for a Store from a DB, a failure of any group stops them all.
func (s *Store) Err() error { return s.db.Err() }

// Sync makes every entry stored so far durable, whatever the flush mode
// (see DB.Sync); for a Store from a DB, those of every group.
func (s *Store) Sync() error { return s.db.Sync() }

// FirstIndex returns the first index stored, 0 when there is none.
func (s *Store) FirstIndex() (uint64, error) {
	if err := s.closedErr(); err != nil {
		return 0, err
	}
	return s.first.Load(), nil
}

// LastIndex returns the last index stored, 0 when there is none.
func (s *Store) LastIndex() (uint64, error) {
	if err := s.closedErr(); err != nil {
		return 0, err
	}
	return s.last.Load(), nil
}

// IsMonotonic reports whether the store refuses gaps between batches,
// which raft v1.8.0 takes as leave to delete every entry after installing
// a snapshot: false unless Options.Monotonic is set (see there for why).
func (s *Store) IsMonotonic() bool { return s.db.opts.Monotonic }

// GetLog reads the entry at index into out, which it overwrites with a
// copy. A missing entry returns raft.ErrLogNotFound itself; a nil out is
// an error.
func (s *Store) GetLog(index uint64, out *raft.Log) error {
	if out == nil {
		return fmt.Errorf("raftstore: group %d: GetLog(%d) into a nil *raft.Log", s.group, index)
	}
	start := time.Now()
	s.rw.RLock()
	defer s.rw.RUnlock()
	// Checked under rw: Close closes the index files only under rw's
	// write lock, after setting closed.
	if err := s.closedErr(); err != nil {
		return err
	}
	first, last := s.first.Load(), s.last.Load()
	if last == 0 || index < first || index > last {
		return raft.ErrLogNotFound
	}
	f := s.files.Load().find(index)
	if f == nil {
		return fmt.Errorf("%w: group %d has no index file for %d (first %d, last %d)", ErrCorrupt, s.group, index, first, last)
	}
	if !f.readAhead.Load() && s.nextGet.Swap(index+1) == index {
		f.readAheadAll()
	}
	pos := f.load(index)
	if pos < 0 {
		return fmt.Errorf("%w: index %s has no slot for %d", ErrCorrupt, f.path, index)
	}
	rec, err := s.db.log.Read(pos)
	if err != nil {
		if errors.Is(err, commitlog.ErrNotFound) && s.first.Load() > index {
			return raft.ErrLogNotFound // compacted while we read
		}
		return corruptAs(closedAs(fmt.Errorf("raftstore: group %d index %d: %w", s.group, index, err)))
	}
	r, err := decodeRecord(rec.Payload)
	if err == nil && (r.kind != kindEntry || r.group != s.group || r.log.Index != index) {
		err = fmt.Errorf("holds group %d index %d", r.group, r.log.Index)
	}
	if err != nil {
		return fmt.Errorf("%w: index %s slot %d points at commit-log position %d, which %v", ErrCorrupt, f.path, index, pos, err)
	}
	*out = r.log
	s.db.m.getLog(start)
	return nil
}

// StoreLog stores one entry.
func (s *Store) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs stores a batch of contiguous entries. The first batch of an
// empty store may start at any index; later ones follow the last index.
// A batch that starts past the next index (raft stores one after
// installing a snapshot that covers everything the store holds) first
// deletes every entry the store holds, durably, unless Options.Monotonic
// is set, which refuses it. A batch that starts at or below the last index
// is refused, not stored over the entries it overlaps (raft deletes a
// conflicting suffix with DeleteRange before it stores the leader's
// entries); so is a batch holding a nil entry, index 0, an index past
// MaxIndex, or indexes that do not increase by one: each with an error wrapping ErrInvalidBatch that
// names the entry, having written nothing. With SyncFlush it returns once
// the batch is durable. A batch a crash cuts short is never visible.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	start := time.Now()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.closedErr(); err != nil {
		return err
	}
	if err := s.db.err(); err != nil {
		return err
	}
	if err := checkBatch(logs); err != nil {
		return fmt.Errorf("%w: group %d: %v", ErrInvalidBatch, s.group, err)
	}
	last := s.last.Load()
	switch {
	case last == 0 || logs[0].Index == last+1:
	case logs[0].Index <= last:
		first := s.first.Load()
		return fmt.Errorf("%w: group %d: entry %d overlaps the stored entries %d..%d: the next batch starts at %d; "+
			"to replace entries, delete them with DeleteRange(%d, %d) first, as raft does on a conflict",
			ErrInvalidBatch, s.group, logs[0].Index, first, last, last+1, logs[0].Index, last)
	case !s.db.opts.Monotonic:
		// A gap: what the store holds lies below a snapshot raft
		// installed. Drop it, so that no stale entry stays below the gap
		// for a read to find. The segments it frees go at the next
		// DeleteRange.
		if err := s.deleteRange(s.first.Load(), last); err != nil {
			return err
		}
		last = 0
	default:
		return fmt.Errorf("%w: group %d: entry %d leaves a gap after the last index %d, which Options.Monotonic refuses: the next batch starts at %d",
			ErrInvalidBatch, s.group, logs[0].Index, last, last+1)
	}
	if err := s.ensureIndexFiles(logs[0].Index, logs[len(logs)-1].Index); err != nil {
		return err
	}

	// Encode every entry into one buffer, then slice it into each entry's
	// payload. Data of GatherMin bytes or more stays where raft has it: the
	// entry's payload is then its head in the buffer, its data and its tail,
	// which the commit log writes without joining them (WriteParts).
	s.buf = s.buf[:0]
	heads := make([]int, len(logs)) // the end of an entry's head; -1 when the data is in the buffer
	ends := make([]int, len(logs))
	bytes := 0
	for i, l := range logs {
		flags, commit := byte(0), uint64(0)
		if i == len(logs)-1 {
			flags = flagBatchEnd
			if s.staged != 0 {
				flags |= flagHasCommit
				commit = s.staged
			}
		}
		if len(l.Data) >= commitlog.GatherMin {
			s.buf = appendEntryHead(s.buf, s.group, l, flags, commit)
			heads[i] = len(s.buf)
			s.buf = appendEntryTail(s.buf, l)
			bytes += len(l.Data)
		} else {
			s.buf = appendEntry(s.buf, s.group, l, flags, commit)
			heads[i] = -1
		}
		ends[i] = len(s.buf)
	}
	bytes += len(s.buf)
	if cap(s.parts) < 3*len(logs) {
		s.parts = make([][]byte, 0, 3*len(logs))
	}
	s.parts, s.payloads = s.parts[:0], s.payloads[:0]
	prev := 0
	for i, e := range ends {
		from := len(s.parts)
		if h := heads[i]; h < 0 {
			s.parts = append(s.parts, s.buf[prev:e:e])
		} else {
			s.parts = append(s.parts, s.buf[prev:h:h], logs[i].Data, s.buf[h:e:e])
		}
		s.payloads = append(s.payloads, s.parts[from:len(s.parts):len(s.parts)])
		prev = e
	}
	if last == 0 {
		s.pin.Store(s.db.log.End())
		defer s.pin.Store(-1)
	}
	positions, end, err := s.db.log.WriteParts(s.payloads)
	clear(s.parts) // keeps no entry's data alive
	if err != nil {
		return fmt.Errorf("raftstore: group %d: %w", s.group, err)
	}
	files := s.files.Load()
	for i, l := range logs {
		files.find(l.Index).store(l.Index, positions[i])
	}
	if s.db.opts.Flush == SyncFlush {
		if err := s.db.log.WaitDurable(end); err != nil {
			return fmt.Errorf("raftstore: group %d: %w", s.group, err)
		}
	}
	if last == 0 {
		s.first.Store(logs[0].Index)
	}
	s.last.Store(logs[len(logs)-1].Index)
	if s.staged != 0 {
		s.commit.Store(s.staged)
		s.staged = 0
	}
	s.db.m.storeLogs(start, len(logs), bytes)
	return nil
}

// MaxIndex is the highest raft index a Store stores (2^63-1): StoreLogs
// refuses an entry past it (ErrInvalidBatch), so that the index files'
// arithmetic never wraps around. raft's indexes start at 1 and grow by one
// per entry: a million entries a second reach it in 290,000 years.
const MaxIndex = math.MaxInt64

// checkBatch returns why a StoreLogs batch is invalid in itself, whatever
// the store holds, or nil.
func checkBatch(logs []*raft.Log) error {
	for i, l := range logs {
		switch {
		case l == nil:
			return fmt.Errorf("entry %d of the batch of %d (counting from 0) is nil", i, len(logs))
		case l.Index > MaxIndex:
			return fmt.Errorf("entry %d of the batch has index %d, past MaxIndex (%d)", i, l.Index, uint64(MaxIndex))
		case i == 0 && l.Index == 0:
			return errors.New("entry 0 of the batch has raft index 0, which is not valid (raft's indexes start at 1)")
		case i > 0 && l.Index != logs[i-1].Index+1:
			return fmt.Errorf("entry %d of the batch has index %d after %d: a batch's indexes must increase by one", i, l.Index, logs[i-1].Index)
		}
	}
	return nil
}

// ensureIndexFiles makes the slots of entries [lo, hi] exist before they
// are stored, creating and growing index files, and fails if it cannot.
// It makes the indexRoom slots after hi exist too, growing the file that
// holds them and creating the next one ahead of need: a step ahead that
// fails fails nothing, and the next call tries it again (index.go). When
// the room is there already it costs a few loads and compares. wmu must be
// held.
func (s *Store) ensureIndexFiles(lo, hi uint64) error {
	files := *s.files.Load()
	ahead := roomEnd(hi)
	if files.covers(lo, ahead) {
		return nil
	}
	// Keep the run contiguous: drop files that cannot join it (only after
	// everything was deleted), then add what is missing on either side.
	if len(files) > 0 && (fileBase(hi) < files[0].base || fileBase(lo) > files[len(files)-1].base+indexSlotsPerFile) {
		if s.last.Load() != 0 {
			return fmt.Errorf("raftstore: group %d: entries %d..%d are far from the indexes", s.group, lo, hi)
		}
		s.dropIndexFiles(func(*indexFile) bool { return true })
		files = nil
	}
	from, to := fileBase(lo), fileBase(ahead)
	if len(files) > 0 {
		from = min(from, files[0].base)
		to = max(to, files[len(files)-1].base)
	}
	// slots returns how many slots of the file at b [lo, end] needs.
	slots := func(b, end uint64) uint64 {
		if b > end || b+indexSlotsPerFile-1 < lo {
			return 0
		}
		return min(end, b+indexSlotsPerFile-1) - b + 1
	}
	noRoom := func(err error) error {
		return fmt.Errorf("raftstore: group %d: no index slots for entries %d..%d: %w", s.group, lo, hi, err)
	}
	var next, created indexFiles
	// Files to grow, by index in next: to the slots wanted, and whether
	// the entries need them now (a growth ahead of need may fail).
	type growth struct {
		slots  uint64
		needed bool
	}
	grow := map[int]growth{}
	for b := from; b <= to; b += indexSlotsPerFile {
		need, want := slots(b, hi), slots(b, ahead)
		if f := files.find(b); f != nil {
			if want > f.slots() {
				grow[len(next)] = growth{want, need > f.slots()}
			}
			next = append(next, f)
			continue
		}
		f, err := openIndexFile(s.db.fs, s.dir, b, true, indexFileSizeFor(want, 0))
		if err != nil {
			if b > fileBase(hi) {
				// Ahead of need, and past the last file (the run is
				// contiguous and reaches hi's file): try again later.
				break
			}
			closeIndexFiles(created)
			return noRoom(err)
		}
		created = append(created, f)
		next = append(next, f)
	}
	if len(created) > 0 {
		if err := s.db.fs.SyncDir(s.dir); err != nil {
			closeIndexFiles(created)
			if created[0].base <= fileBase(hi) {
				err = fmt.Errorf("raftstore: sync directory %s: %w", s.dir, err)
				if commitlog.IsNoSpace(err) {
					return err
				}
				// The directory's state is unknown after a failed sync,
				// and the disk is failing: stop the DB, as a failed
				// sync of the commit log does, rather than leave a
				// caller that never stores again (a follower waiting for
				// a snapshot it cannot stage) running on it.
				return s.db.fail(fmt.Errorf("%w: %w", ErrFailed, err))
			}
			// Only files ahead of need, the last of the run: leave them
			// out until a later call syncs their names.
			next = next[:len(next)-len(created)]
		}
	}
	s.rw.Lock()
	defer s.rw.Unlock()
	var err error
	for k, gr := range grow {
		g, broken, gerr := next[k].grown(gr.slots)
		if gerr != nil {
			if broken {
				s.db.fail(gerr)
			}
			if gr.needed || broken {
				err = noRoom(gerr)
			}
			continue
		}
		next[k] = g
	}
	s.files.Store(&next)
	return err
}

// roomEnd returns the last index of the room a group keeps past an entry
// at hi (indexRoom).
func roomEnd(hi uint64) uint64 {
	if hi > math.MaxUint64-indexRoom {
		return hi
	}
	return hi + indexRoom
}

// dropIndexFiles removes the index files drop selects. wmu must be held.
//
// The removals are not made durable: a file a crash brings back lies
// outside the range recovery finds (the deletion that dropped it is in the
// commit log), so recovery drops it again; and a new file of the same name
// is created with a sync of the directory, which makes the removal durable
// with it.
func (s *Store) dropIndexFiles(drop func(*indexFile) bool) {
	files := *s.files.Load()
	var keep, gone indexFiles
	for _, f := range files {
		if drop(f) {
			gone = append(gone, f)
		} else {
			keep = append(keep, f)
		}
	}
	if len(gone) == 0 {
		return
	}
	s.rw.Lock()
	s.files.Store(&keep)
	s.rw.Unlock()
	for _, f := range gone {
		f.close()
		s.db.fs.Remove(f.path)
	}
}

// DeleteRange deletes the entries in [min, max], inclusive: a prefix after
// a snapshot, a suffix on a term conflict, or everything after a snapshot
// install. It is durable when it returns, in every flush mode. A range
// that holds no stored entry (min > max among them) deletes nothing; one
// strictly inside the stored entries, which would leave a hole, is an
// error.
func (s *Store) DeleteRange(min, max uint64) error {
	s.wmu.Lock()
	err := s.deleteRange(min, max)
	s.wmu.Unlock()
	if err != nil {
		return err
	}
	return s.db.releaseSegments()
}

func (s *Store) deleteRange(lo, hi uint64) error {
	if err := s.closedErr(); err != nil {
		return err
	}
	if err := s.db.err(); err != nil {
		return err
	}
	first, last := s.first.Load(), s.last.Load()
	if last == 0 || hi < first || lo > last || lo > hi {
		return nil
	}
	if lo > first && hi < last {
		return fmt.Errorf("raftstore: group %d: cannot delete %d..%d from the middle of %d..%d", s.group, lo, hi, first, last)
	}
	rec := appendDeleteRange(nil, s.group, lo, hi)
	_, end, err := s.db.log.Write([][]byte{rec})
	if err == nil {
		err = s.db.log.WaitDurable(end)
	}
	if err != nil {
		return fmt.Errorf("raftstore: group %d: delete %d..%d: %w", s.group, lo, hi, err)
	}
	s.applyDeleteRange(lo, hi)
	return nil
}

// applyDeleteRange updates the indexes for DeleteRange(lo, hi) and drops
// index files no entry needs. wmu must be held.
func (s *Store) applyDeleteRange(lo, hi uint64) {
	first, last, commit := s.first.Load(), s.last.Load(), s.commit.Load()
	nf, nl, nc := deletedRange(first, last, commit, lo, hi)
	if nf == first && nl == last {
		return
	}
	switch {
	case nl == 0:
		s.last.Store(0)
		s.first.Store(0)
		s.dropIndexFiles(func(*indexFile) bool { return true })
	case nf != first:
		s.first.Store(nf)
		keepFrom := fileBase(nf)
		s.dropIndexFiles(func(f *indexFile) bool { return f.base < keepFrom })
	default:
		s.last.Store(nl)
		s.commit.Store(nc)
	}
}

// firstPosition returns the commit-log position of the group's first entry,
// or of the first batch an empty group is writing.
func (s *Store) firstPosition() (int64, bool) {
	if p := s.pin.Load(); p >= 0 {
		return p, true
	}
	s.rw.RLock()
	defer s.rw.RUnlock()
	first, last := s.first.Load(), s.last.Load()
	if last == 0 {
		return 0, false
	}
	f := s.files.Load().find(first)
	if f == nil {
		return 0, false
	}
	pos := f.load(first)
	return pos, pos >= 0
}

// PinnedBytes returns how many bytes of the shared commit log this group
// keeps on disk: from its first entry to the end of the log. Segments are
// removed only once no group needs them, so a group that is slow to compact
// (or idle with old entries) keeps every later segment of every group; the
// group with the largest figure is the one holding the log. It is 0 for an
// empty group, and after Close. raftstore reports it as the gauge
// pinned_bytes{group}.
func (s *Store) PinnedBytes() int64 {
	if s.closedErr() != nil {
		return 0
	}
	return s.pinnedBytes()
}

func (s *Store) pinnedBytes() int64 {
	pos, ok := s.firstPosition()
	if !ok {
		return 0
	}
	return max(0, s.db.log.End()-pos)
}

// syncIndex makes the dirty index slots durable and returns the group's
// indexes for the checkpoint; false for a dropped group, which the
// checkpoint leaves out.
func (s *Store) syncIndex() (groupState, bool, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.dropped.Load() {
		return groupState{}, false, nil
	}
	for _, f := range *s.files.Load() {
		if err := f.sync(); err != nil {
			return groupState{}, false, err
		}
	}
	// Every record of this group below the end of the log is reflected in
	// the state, and none after: the write lock keeps the group's writers
	// out while both are read.
	return groupState{group: s.group, first: s.first.Load(), last: s.last.Load(), commit: s.commit.Load(), from: s.db.log.End()}, true, nil
}

// StageCommitIndex stages a commit index; the next StoreLogs persists it
// atomically with its entries.
func (s *Store) StageCommitIndex(index uint64) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.closedErr(); err != nil {
		return err
	}
	s.staged = index
	return nil
}

// GetCommitIndex returns the persisted commit index, never above the last
// index.
func (s *Store) GetCommitIndex() (uint64, error) {
	if err := s.closedErr(); err != nil {
		return 0, err
	}
	return min(s.commit.Load(), s.last.Load()), nil
}

// Set stores a stable value; it is durable when Set returns. A failed
// write stops the DB (see DB.Err), and Get never returns its value.
func (s *Store) Set(key, val []byte) error {
	if key == nil {
		key = []byte{}
	}
	if err := s.closedErr(); err != nil {
		return err
	}
	return s.db.setStable(s.group, key, val)
}

// Get returns a stable value, or an empty value when the key is missing.
// It returns only values whose Set completed: never one being written, or
// one whose write failed.
func (s *Store) Get(key []byte) ([]byte, error) {
	if err := s.closedErr(); err != nil {
		return nil, err
	}
	v, _ := s.db.stable.get(s.group, key)
	return v, nil
}

// SetUint64 stores a stable integer; it is durable when SetUint64 returns.
func (s *Store) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 returns a stable integer, or 0 when the key is missing; like
// Get, only one whose SetUint64 completed.
func (s *Store) GetUint64(key []byte) (uint64, error) {
	if err := s.closedErr(); err != nil {
		return 0, err
	}
	v, ok := s.db.stable.get(s.group, key)
	if !ok {
		return 0, nil
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("raftstore: stable key %q holds %d bytes, not a uint64", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}
