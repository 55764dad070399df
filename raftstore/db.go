package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/raftlog/raftlog/commitlog"
	"github.com/raftlog/raftlog/commitlog/vfs"
)

// Directory layout of a DB.
const (
	logDirName   = "log"   // the commit log
	indexDirName = "index" // index/<group>/<first index>
)

// ErrClosed is returned by calls made after Close.
var ErrClosed = errors.New("raftstore: closed")

// ErrCorrupt reports an index, record or file that fails its checks. Every
// such error raftstore returns matches it with errors.Is, including those
// of the commit log (which match commitlog.ErrCorrupt too: a record that
// fails its checksum, in GetLog, Size, OpenDB or Inspect), a stable file
// that does not decode, and a stable state lost to damaged files
// (ErrStableLost).
var ErrCorrupt = errors.New("raftstore: corrupt")

// corruptError is an error made to match ErrCorrupt as well, its text
// unchanged: one of the commit log reporting corruption
// (commitlog.ErrCorrupt), or an ErrStableLost of damaged files.
type corruptError struct{ err error }

func (e *corruptError) Error() string   { return e.err.Error() }
func (e *corruptError) Unwrap() []error { return []error{ErrCorrupt, e.err} }

// corruptAs returns err, made to match ErrCorrupt when it reports
// corruption of the commit log; nil stays nil.
func corruptAs(err error) error {
	if err != nil && errors.Is(err, commitlog.ErrCorrupt) && !errors.Is(err, ErrCorrupt) {
		return &corruptError{err}
	}
	return err
}

// ErrInvalidBatch is wrapped by the error of a StoreLogs batch the store
// refuses, having written nothing: one holding a nil entry, index 0, an
// index past MaxIndex or indexes that do not increase by one, one that
// overlaps the stored
// entries, or (with Options.Monotonic) one that leaves a gap after them.
// The error names the entry and the cause.
var ErrInvalidBatch = errors.New("raftstore: invalid StoreLogs batch")

// ErrFailed wraps a failed write or sync of the stable state (stable.0,
// stable.1), or a failed sync of a group's index directory after a new
// index file the group needed was created in it. Like a failure of the
// commit log (commitlog.ErrFailed), it stops the DB: see DB.Err.
var ErrFailed = errors.New("raftstore: failed")

// maxGroups bounds the groups of one DB: the checkpoint holds every group's
// indexes in at most commitlog.MaxCheckpointMeta bytes, 50 bytes per group
// at worst.
const maxGroups = (commitlog.MaxCheckpointMeta - 32) / 50

// MaxGroups is the most raft groups one DB holds (1,308): DB.Store refuses
// to create more.
const MaxGroups = maxGroups

// DB is a commit log shared by many raft groups, each with its own index
// and stable keys. Appends from every group go through the commit log's one
// group commit, so one fdatasync completes the StoreLogs calls of every
// group that arrived while the previous one ran.
type DB struct {
	dir    string
	opts   Options
	fs     vfs.FS
	log    *commitlog.Log
	stable *stableFile
	m      *metricsSink

	// mu guards groups, and serialises Store with Close.
	mu     sync.Mutex
	groups map[uint64]*Store
	// closed is set, under mu, when Close begins; from then on every call
	// returns ErrClosed.
	closed atomic.Bool

	// stableMu is held for reading by every stable write and for writing
	// by Close, once, so that no stable write is in progress when Close
	// closes the stable files.
	stableMu sync.RWMutex

	// ready is set once recovery is done; the checkpoint hook waits for it.
	ready atomic.Bool
	// delMu serialises the removal of commit-log segments.
	delMu sync.Mutex
	// failure latches the error that stopped the DB: one that leaves the
	// indexes in doubt, or a failed write of the stable state (see Err).
	failure atomic.Pointer[error]
}

// OpenDB opens (or creates) a DB in dir, recovering it after a crash. It
// refuses, with ErrBoltDBFound, to open a DB that holds no raft state next
// to a raft-boltdb store (see Options.IgnoreBoltDB), and with
// ErrStableLost one that was used but whose stable state (every group's
// term and vote) is lost (see Options.UnsafeResetStableState).
func OpenDB(dir string, opts *Options) (*DB, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	var bolt string
	if !o.IgnoreBoltDB {
		if bolt = findBoltDB(o.FS, dir); bolt != "" && hasNoLog(o.FS, dir) {
			return nil, boltDBError(bolt, dir) // before creating anything
		}
	}
	if err := o.FS.MkdirAll(filepath.Join(dir, indexDirName), 0o755); err != nil {
		return nil, fmt.Errorf("raftstore: create %s: %w", dir, err)
	}
	db := &DB{dir: dir, opts: o, fs: o.FS, groups: map[uint64]*Store{}}
	db.m = newMetricsSink(o.MetricsPrefix)
	db.m.tee, db.m.off = o.Metrics, o.NoGoMetrics
	if o.goMetrics != nil {
		db.m.gm = o.goMetrics
	}
	lo := o.logOptions()
	lo.CheckpointMeta = db.checkpointMeta
	lo.Metrics = db.m
	if db.log, err = commitlog.Open(filepath.Join(dir, logDirName), lo); err != nil {
		return nil, corruptAs(fmt.Errorf("raftstore: %w", err))
	}
	// The stable state after the commit log, whose lock keeps out another
	// process, and which tells whether a lost stable state held anything.
	if db.stable, err = openStable(o.FS, dir, db.checkStableLost); err != nil {
		db.log.Close()
		return nil, err
	}
	if err := db.recover(); err != nil {
		db.closeFiles()
		db.log.Close()
		db.stable.close()
		return nil, err
	}
	db.ready.Store(true)
	if bolt != "" && !db.holdsState() {
		db.Close()
		return nil, boltDBError(bolt, dir)
	}
	return db, nil
}

// Store returns the store of one raft group, creating the group on first
// use. The group is remembered across restarts once Store returns. A
// group that a Migrate began to fill and did not finish is refused with
// ErrMigrationIncomplete.
func (db *DB) Store(group uint64) (*Store, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.closed.Load() {
		return nil, ErrClosed
	}
	if s, ok := db.groups[group]; ok {
		if err := db.checkMigrated(group); err != nil {
			return nil, err
		}
		return s, nil
	}
	if len(db.groups) >= maxGroups {
		return nil, fmt.Errorf("raftstore: a DB holds at most %d groups", maxGroups)
	}
	if err := db.setStable(group, nil, nil); err != nil {
		return nil, err
	}
	s, err := db.openGroup(group)
	if err != nil {
		return nil, err
	}
	db.groups[group] = s
	return s, nil
}

// Groups returns the ids of every group in the DB; nil after Close.
func (db *DB) Groups() []uint64 {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.closed.Load() {
		return nil
	}
	gs := make([]uint64, 0, len(db.groups))
	for g := range db.groups {
		gs = append(gs, g)
	}
	sort.Slice(gs, func(i, j int) bool { return gs[i] < gs[j] })
	return gs
}

// openGroup opens the index files of a group. Its indexes are set by
// recovery or start empty.
func (db *DB) openGroup(group uint64) (*Store, error) {
	dir := filepath.Join(db.dir, indexDirName, fmt.Sprintf("%020d", group))
	if err := db.fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("raftstore: create %s: %w", dir, err)
	}
	s := &Store{db: db, group: group, dir: dir}
	s.pin.Store(-1)
	names, err := db.fs.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("raftstore: read %s: %w", dir, err)
	}
	var files indexFiles
	for _, name := range names {
		base, ok := parseIndexFileName(name)
		if !ok {
			continue
		}
		f, err := openIndexFile(db.fs, dir, base, false, 0)
		if err != nil {
			closeIndexFiles(files)
			return nil, err
		}
		files = append(files, f)
	}
	s.files.Store(&files)
	return s, nil
}

// Close writes a final checkpoint and closes the commit log and every
// index, once the writes in progress (StoreLogs, DeleteRange, Set) have
// returned. Call it after the raft of every group has shut down
// (raft.Shutdown().Error() returned). Afterwards every method of the DB and of its stores that
// returns an error returns ErrClosed, except Err, which still reports a
// failure; Groups returns nil, Stats zero Stats and Store.PinnedBytes 0.
func (db *DB) Close() error {
	db.mu.Lock()
	if db.closed.Load() {
		db.mu.Unlock()
		return ErrClosed
	}
	db.closed.Store(true)
	stores := make([]*Store, 0, len(db.groups))
	for _, s := range db.groups {
		stores = append(stores, s)
	}
	db.mu.Unlock()
	// Writers check closed under their group's write lock: once each lock
	// has been taken, none is in progress and none will start.
	for _, s := range stores {
		s.wmu.Lock()
		//lint:ignore SA2001 a barrier: the writer in progress has returned
		s.wmu.Unlock()
	}
	db.stableMu.Lock()
	//lint:ignore SA2001 the same barrier for stable writes
	db.stableMu.Unlock()
	err := db.log.Close()
	db.closeFiles()
	if serr := db.stable.close(); err == nil {
		err = serr
	}
	if err == nil {
		err = db.err()
	}
	return err
}

func (db *DB) closeFiles() {
	for _, s := range db.groups {
		s.rw.Lock()
		closeIndexFiles(*s.files.Load())
		empty := indexFiles{}
		s.files.Store(&empty)
		s.rw.Unlock()
	}
}

func closeIndexFiles(fs indexFiles) {
	for _, f := range fs {
		f.close()
	}
}

// err returns the latched failure, or nil.
func (db *DB) err() error {
	if p := db.failure.Load(); p != nil {
		return *p
	}
	return nil
}

func (db *DB) fail(err error) error {
	db.failure.CompareAndSwap(nil, &err)
	return db.err()
}

// setStable writes a stable key (see stableFile.set) unless the DB is
// closed or has failed, and latches a failed write as the DB's failure.
func (db *DB) setStable(group uint64, key, val []byte) error {
	return db.writeStable(func() error { return db.stable.set(group, key, val) })
}

// removeStable deletes a stable key as setStable writes one.
func (db *DB) removeStable(group uint64, key []byte) error {
	return db.writeStable(func() error { return db.stable.remove(group, key) })
}

// writeStable runs a write of the stable state unless the DB is closed or
// has failed, and latches a failure of the write as the DB's failure.
func (db *DB) writeStable(write func() error) error {
	db.stableMu.RLock()
	defer db.stableMu.RUnlock()
	if db.closed.Load() {
		return ErrClosed
	}
	if err := db.Err(); err != nil {
		return err
	}
	if err := write(); err != nil {
		if errors.Is(err, ErrClosed) || errors.Is(err, ErrGroupDropped) {
			return err
		}
		return db.fail(err)
	}
	return nil
}

// groupState is one group's indexes as a checkpoint records them, and the
// commit-log position from which the group's records are not yet in them.
type groupState struct {
	group, first, last, commit uint64
	from                       int64
}

// checkpointMeta is the commit log's checkpoint hook. It records, for every
// group, the first and last index, the persisted commit index and the
// commit-log position from which recovery must replay the group's records,
// all read together under the group's write lock; and the position from
// which to replay groups created after it. Before it returns, every record
// those indexes describe is durable and so is every index slot below them.
func (db *DB) checkpointMeta() ([]byte, error) {
	if !db.ready.Load() {
		return nil, errors.New("raftstore: recovery still running")
	}
	if err := db.err(); err != nil {
		return nil, err
	}
	replayFrom := db.log.End()
	db.mu.Lock()
	stores := make([]*Store, 0, len(db.groups))
	for _, s := range db.groups {
		stores = append(stores, s)
	}
	closed := db.closed.Load()
	db.mu.Unlock()
	sort.Slice(stores, func(i, j int) bool { return stores[i].group < stores[j].group })
	states := make([]groupState, 0, len(stores))
	for _, s := range stores {
		st, ok, err := s.syncIndex()
		if err != nil {
			return nil, db.fail(err)
		}
		if ok {
			states = append(states, st)
		}
	}
	for _, s := range stores {
		if !s.dropped.Load() {
			db.m.pinned(s.group, s.pinnedBytes())
		}
	}
	if !closed {
		// Make every record the states describe durable before the
		// checkpoint claims them.
		if err := db.log.WaitDurable(db.log.End()); err != nil {
			return nil, err
		}
	}
	return encodeMeta(replayFrom, states), nil
}

// metaVersion is the version of the checkpoint meta layout. Wire format.
const metaVersion = 2

// encodeMeta encodes the checkpoint meta: a version byte, the replay
// position for groups it does not list, then each group's id, first, last
// and commit index and its own replay position, all uvarints.
func encodeMeta(replayFrom int64, states []groupState) []byte {
	b := []byte{metaVersion}
	b = binary.AppendUvarint(b, uint64(replayFrom))
	b = binary.AppendUvarint(b, uint64(len(states)))
	for _, s := range states {
		b = binary.AppendUvarint(b, s.group)
		b = binary.AppendUvarint(b, s.first)
		b = binary.AppendUvarint(b, s.last)
		b = binary.AppendUvarint(b, s.commit)
		b = binary.AppendUvarint(b, uint64(s.from))
	}
	return b
}

// decodeMeta decodes checkpoint meta; empty meta means a new DB.
func decodeMeta(b []byte) (int64, []groupState, error) {
	if len(b) == 0 {
		return 0, nil, nil
	}
	if b[0] != metaVersion {
		return 0, nil, fmt.Errorf("%w: checkpoint meta version %d", ErrCorrupt, b[0])
	}
	d := decoder{b: b[1:]}
	replayFrom := d.uvarint()
	n := d.uvarint()
	if n > maxGroups {
		return 0, nil, fmt.Errorf("%w: checkpoint meta lists %d groups", ErrCorrupt, n)
	}
	states := make([]groupState, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		st := groupState{group: d.uvarint(), first: d.uvarint(), last: d.uvarint(), commit: d.uvarint()}
		st.from = int64(d.uvarint())
		states = append(states, st)
	}
	if d.err != nil || len(d.b) != 0 {
		return 0, nil, fmt.Errorf("%w: checkpoint meta malformed", ErrCorrupt)
	}
	return int64(replayFrom), states, nil
}

// releaseSegments removes the commit-log segments that no group needs: all
// of those before the first entry of every group. Before removing any, it
// writes a checkpoint, so that recovery never needs to replay a record from
// a removed segment.
func (db *DB) releaseSegments() error {
	db.delMu.Lock()
	defer db.delMu.Unlock()
	// End is read before the groups: a batch written after this point
	// lies at or past it, whatever its group's state when we look.
	keep := db.log.End()
	for _, s := range db.storesSnapshot() {
		if pos, ok := s.firstPosition(); ok && pos < keep {
			keep = pos
		}
	}
	segs := db.log.Segments()
	if len(segs) < 2 || segs[0].Base+segs[0].Size > keep {
		return nil
	}
	floors := db.stable.floorsCopy() // of drops the checkpoint follows
	err := db.log.Checkpoint()
	if err == nil {
		var n int
		n, err = db.log.DeleteBefore(keep)
		if n > 0 {
			db.m.IncCounter("segments_released", uint64(n))
		}
	}
	if err == nil && len(floors) > 0 {
		err = db.forgetFloors(floors)
	}
	if errors.Is(err, commitlog.ErrClosed) {
		// Closed meanwhile: the segments go after the next open.
		return nil
	}
	return err
}

func (db *DB) storesSnapshot() []*Store {
	db.mu.Lock()
	defer db.mu.Unlock()
	out := make([]*Store, 0, len(db.groups))
	for _, s := range db.groups {
		out = append(out, s)
	}
	return out
}

// Sync makes every entry stored so far durable, whatever the flush mode:
// with AsyncFlush it is how a caller asks for one durable point, for
// example before it reports a snapshot installed. It returns the DB's
// failure if it has one (see Err).
func (db *DB) Sync() error {
	if db.closed.Load() {
		return ErrClosed
	}
	if err := db.Err(); err != nil {
		return err
	}
	if err := db.log.Sync(); err != nil {
		return closedAs(fmt.Errorf("raftstore: %w", err))
	}
	return nil
}

// closedAs returns ErrClosed for an error of the commit log's Close (a
// call that raced with DB.Close), and err otherwise.
func closedAs(err error) error {
	if errors.Is(err, commitlog.ErrClosed) {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}

// Stats are figures of a DB's commit log.
type Stats struct {
	// Segments is the number of commit-log segment files.
	Segments int
	// Bytes is the span of the retained commit log, from the start of its
	// first segment to the last byte written.
	Bytes int64
	// Written is the commit-log offset written up to.
	Written int64
	// Durable is the commit-log offset known durable.
	Durable int64
}

// Stats returns figures of the commit log. It is cheap; after Close it
// returns zero Stats.
func (db *DB) Stats() Stats {
	if db.closed.Load() {
		return Stats{}
	}
	end := db.log.End()
	return Stats{
		Segments: len(db.log.Segments()),
		Bytes:    end - db.log.First(),
		Written:  end,
		Durable:  db.log.Durable(),
	}
}

// Err returns the failure that stopped the DB, or nil: a failed write,
// fdatasync or msync of the commit log (wrapping commitlog.ErrFailed), a
// failed write or sync of the stable state or of an index directory
// (wrapping ErrFailed), or a
// failure that leaves an index in doubt (wrapping ErrCorrupt). Once Err
// returns an error, every write of every group (StoreLogs, DeleteRange,
// Set, SetUint64, a new group) fails with it, and reads return only what
// was durable; the DB must be closed and reopened, which recovers what was
// durable. Running out of space for the commit log (commitlog.ErrNoSpace)
// or for a group's index slots (an error wrapping syscall.ENOSPC, once the
// group has used the room it keeps: see the package doc) is not a
// failure: nothing is written and later calls succeed once space is
// freed. Err reports failures, not Close: after a clean Close it
// returns nil.
func (db *DB) Err() error {
	if err := db.err(); err != nil {
		return err
	}
	return db.log.Err()
}
