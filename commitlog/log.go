package commitlog

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlog/raftlog/commitlog/vfs"
)

// File names inside a log directory besides the segments.
const (
	checkpointName = "checkpoint"
	abortName      = "abort" // exists while the log is open; left behind by a crash
	lockName       = "LOCK"
)

// Record is a record read back from the log. Payload is a copy owned by the
// caller.
type Record struct {
	// Position is the logical offset of the record in the log.
	Position int64
	// StoredAt is the store timestamp, Unix nanoseconds.
	StoredAt int64
	// Payload is the record's bytes.
	Payload []byte
}

// RecoveryInfo describes what Open found and did, for a log of what
// recovery did (raftstore logs it).
type RecoveryInfo struct {
	// New is true when Open created the log: the directory held no
	// segment.
	New bool
	// Crashed is true when the log was not closed cleanly last time.
	Crashed bool
	// Checkpoint is the sequence number of the checkpoint Open started
	// from (see checkpoint.go); 0 for a new log.
	Checkpoint uint64
	// ScannedFrom is the checkpointed durable position the scan began at.
	ScannedFrom int64
	// Synced is where the log was known synced up to when it stopped: the
	// sync mark's position (see syncmark.go), or ScannedFrom when the mark
	// says less. Every record before it checked out.
	Synced int64
	// End is the end of the valid log found by the scan.
	End int64
	// Records is the number of records found past ScannedFrom.
	Records int
	// Stop says why the scan ended at End: what is wrong with the bytes
	// there ("no record magic" for space never written, "checksum
	// mismatch" for a record torn by a crash, ...), or "" when it reached
	// the end of the last segment. After a crash, whatever lay from End on
	// is cut off: appends overwrite it.
	Stop string
	// Torn is true when the scan stopped at a record whose header is whole
	// but whose bytes are not (a checksum mismatch, or a length past the
	// end of its segment): a record a crash tore, cut off with the rest.
	Torn bool
	// Removed lists the files Open removed: segments a crash left half
	// prepared (*.tmp) and segments past the end of the log.
	Removed []string
}

// tail describes the end of the written log; writers publish a new one
// after every append so that the flusher can read it without taking mu.
type tail struct {
	tailMark
	// before is the tail this one replaced: what wrote still names while
	// a Write has published this tail and not yet its wrote (syncAll).
	before tailMark
}

// tailMark is one end of the written log.
type tailMark struct {
	end        int64 // logical end of written bytes
	lastRecord int64 // position of the last record before end, -1 if none
	lastTS     int64 // its store timestamp
	records    uint64
}

// pendingSegment is a segment being prepared in the background.
type pendingSegment struct {
	base  int64
	done  chan struct{}
	hurry chan struct{} // closed by whoever waits for done: stop pacing
	seg   *segment      // set before done is closed
	err   error
}

// wait hurries the preparation and waits for it to end.
func (p *pendingSegment) wait() {
	close(p.hurry)
	<-p.done
}

// Log is a segmented, memory-mapped commit log. See the package
// documentation for its guarantees. All methods are safe for concurrent use.
type Log struct {
	dir  string
	opts Options
	fs   vfs.FS
	lock io.Closer
	cp   *checkpointFile
	mark *syncMark // the sync mark (syncmark.go): written under syncMu
	meta []byte    // checkpoint meta read at Open; immutable
	info RecoveryInfo

	// mu serialises writers: appends, segment changes, truncation and Close.
	// Lock order: mu, then cpMu, then syncMu, then readMu.
	mu          sync.Mutex
	active      *segment        // mu: the segment appends go to, last in segs
	activeSince time.Time       // mu: when active became the active segment
	quarterAt   time.Time       // mu: when active got a quarter full, zero before (maybePrepare)
	pending     *pendingSegment // mu: the next segment, being prepared
	spares      []*segment      // mu: prepared segments not yet in segs, in order
	buf         []byte          // mu: scratch for the pwrite path
	iov         [][]byte        // mu: scratch for the pwrite path's buffers
	closed      bool            // mu
	lastRecord  int64           // mu: position of the last record written, -1 if none
	lastTS      int64           // mu: its store timestamp
	records     uint64          // mu: records written since Open
	// writeAhead reads the active segment's pages in ahead of stores
	// through the mapping (WriteMmap), which would otherwise fault them in
	// one at a time (readahead.go); mu.
	writeAhead window

	// cpMu serialises checkpoint writes.
	cpMu     sync.Mutex
	lastMeta []byte // cpMu: meta of the last checkpoint written
	// cpTurns numbers checkpoint writes in the order their meta was
	// taken; cpWritten is the number of the last one written (cpMu), so
	// that meta taken earlier never replaces a later one.
	cpTurns   atomic.Uint64
	cpWritten uint64

	// syncMu is held while syncing and while the durable state changes.
	syncMu        sync.Mutex
	epoch         uint32 // syncMu and mu to write; either to read
	epochStart    int64  // syncMu and mu to write; either to read
	durableRecord int64  // syncMu: last record below flushed, -1 if none
	durableTS     int64  // syncMu: its store timestamp
	syncedRecords uint64 // syncMu: tail.records at the last sync

	// recycleMu guards the segments kept for reuse (recycle.go); releases
	// run on reader goroutines, so it is apart from mu.
	recycleMu     sync.Mutex
	recycled      []*segment // recycleMu
	recycleClosed bool       // recycleMu

	// readMu keeps readers out while a truncation moves wrote back, so
	// that no reader copies bytes that appends are about to overwrite.
	readMu sync.RWMutex

	// isClosed is set by Close before it releases the segments: from then
	// on every call returns ErrClosed (see closedErr).
	isClosed atomic.Bool

	// segs, tail and wrote are stored under mu. tail and wrote move back
	// only in a truncation, which stores them under syncMu as well, so
	// that every syncer sees them move together with flushed.
	segs    atomic.Pointer[segmentList]
	tail    atomic.Pointer[tail]
	wrote   atomic.Int64 // end of written bytes visible to readers
	flushed atomic.Int64 // syncMu to store; every byte below is durable; never past wrote
	failure atomic.Pointer[error]
	// truncations counts suffix truncations, so that a checkpoint whose
	// meta was taken before one is not written after it.
	truncations atomic.Uint64

	// group commit
	wmu     sync.Mutex
	waiters []*waiter // wmu
	shut    bool      // wmu: Close has completed the last waiters
	// spareWaiters is the slice the flusher swapped out last time, kept
	// to avoid an allocation per round; owned by the flusher.
	spareWaiters []*waiter
	nwaiters     atomic.Int64  // len(waiters), readable without wmu
	lastBatch    int64         // flusher: waiters the next round can expect
	lastSync     time.Duration // flusher: duration of the last round's sync
	linger       *linger       // flusher: its wait for appenders to join a round
	kick         chan struct{}

	closing chan struct{}
	wg      sync.WaitGroup
}

// Open opens the log in dir, creating it if needed, and recovers it after a
// crash. See the package documentation for what recovery checks.
func Open(dir string, opts *Options) (*Log, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	fs := o.FS
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("commitlog: create directory %s: %w", dir, err)
	}
	lock, err := fs.Lock(filepath.Join(dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("commitlog: %w", err)
	}
	l := &Log{
		dir:     dir,
		opts:    o,
		fs:      fs,
		lock:    lock,
		kick:    make(chan struct{}, 1),
		linger:  newLinger(),
		closing: make(chan struct{}),
	}
	if err := l.recover(); err != nil {
		l.releaseAll()
		if l.cp != nil {
			l.cp.close()
		}
		if l.mark != nil {
			l.mark.close()
		}
		lock.Close()
		return nil, err
	}
	l.wg.Add(2)
	go l.flushLoop()
	go l.housekeeping()
	l.mu.Lock()
	l.maybePrepare()
	l.mu.Unlock()
	return l, nil
}

// Dir returns the directory of the log.
func (l *Log) Dir() string { return l.dir }

// Recovery describes what Open found and did.
func (l *Log) Recovery() RecoveryInfo {
	info := l.info
	info.Removed = slices.Clone(info.Removed)
	return info
}

// Meta returns the meta stored with the checkpoint Open read (see
// Options.CheckpointMeta), or nil.
func (l *Log) Meta() []byte { return l.meta }

// SegmentInfo describes one segment file of the log.
type SegmentInfo struct {
	// Path is the file's path.
	Path string
	// Base is the position of the segment's first byte.
	Base int64
	// Size is the segment's size in bytes.
	Size int64
}

// Segments describes the segment files in use, oldest first. The last one
// is the one appends go to. After Close it returns nil.
func (l *Log) Segments() []SegmentInfo {
	if l.isClosed.Load() {
		return nil
	}
	list := *l.segs.Load()
	out := make([]SegmentInfo, len(list))
	for i, s := range list {
		out[i] = SegmentInfo{Path: s.path, Base: s.base, Size: s.size}
	}
	return out
}

// First returns the position of the first retained byte of the log; after
// Close, the one it had when it closed.
func (l *Log) First() int64 { return (*l.segs.Load())[0].base }

// End returns the position just past the last record written; after Close,
// the end it closed with.
func (l *Log) End() int64 { return l.wrote.Load() }

// Durable returns the position below which every record is durable. It is
// never past End; after Close, it is the position Close made durable.
func (l *Log) Durable() int64 { return l.flushed.Load() }

// Err returns the error that failed the log, or nil. It reports failures,
// not Close: after a clean Close it returns nil.
func (l *Log) Err() error {
	if p := l.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// fail latches err as the log's failure; the first one wins.
func (l *Log) fail(err error) error {
	wrapped := fmt.Errorf("%w: %w", ErrFailed, err)
	l.failure.CompareAndSwap(nil, &wrapped)
	return l.Err()
}

// Append appends one record. With SyncFlush it returns after the record is
// durable; with AsyncFlushUnsafe as soon as it is written. On
// ErrSyncTimeout the position is returned with the error.
func (l *Log) Append(payload []byte) (int64, error) {
	pos, err := l.AppendBatch([][]byte{payload})
	if len(pos) == 0 {
		return 0, err
	}
	return pos[0], err
}

// AppendBatch appends records contiguously and returns their positions.
// With SyncFlush it returns after all of them are durable, with
// AsyncFlushUnsafe as soon as they are written. A record too large for a
// segment fails the whole batch before anything is written.
func (l *Log) AppendBatch(payloads [][]byte) ([]int64, error) {
	pos, end, err := l.Write(payloads)
	if err != nil {
		return nil, err
	}
	if l.opts.Flush == SyncFlush {
		if err := l.WaitDurable(end); err != nil {
			return pos, err
		}
	}
	return pos, nil
}

// Write appends records without waiting for them to become durable, and
// returns their positions and the end of the last one. Pass end to
// WaitDurable to learn when they are durable.
func (l *Log) Write(payloads [][]byte) (positions []int64, end int64, err error) {
	parts := make([][][]byte, len(payloads))
	for i := range payloads {
		parts[i] = payloads[i : i+1 : i+1]
	}
	return l.WriteParts(parts)
}

// WriteParts is Write for payloads given in parts: the payload of record i
// is the concatenation of parts[i]. With the pwrite write path, parts of at
// least GatherMin bytes go to the file from where they are (pwritev)
// instead of being copied first, which saves a copy of each large record
// for a caller that would otherwise join its header and its data.
// WriteParts reads the parts until it returns, and they must not change
// until then: each record's CRC is computed before its bytes are written.
func (l *Log) WriteParts(parts [][][]byte) (positions []int64, end int64, err error) {
	largest := recordSize(0)
	for _, p := range parts {
		largest = max(largest, recordSize(partsLen(p)))
	}
	if largest > l.opts.SegmentSize {
		return nil, 0, fmt.Errorf("%w: %d bytes with header, segments hold %d", ErrRecordTooLarge, largest, l.opts.SegmentSize)
	}
	ts := l.opts.Now().UnixNano()

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, 0, ErrClosed
	}
	if err := l.Err(); err != nil {
		return nil, 0, err
	}
	start := l.wrote.Load()
	if len(parts) == 0 {
		return nil, start, nil
	}

	// Plan: find every position and take every new segment the batch needs
	// before writing a byte, so that running out of space writes nothing.
	positions = make([]int64, len(parts))
	segs := []*segment{l.active}
	fillers := []int64(nil)
	pos, cur := start, l.active
	for i, p := range parts {
		n := recordSize(partsLen(p))
		if pos+n > cur.end() {
			if cur.end()-pos >= HeaderSize {
				fillers = append(fillers, pos)
			}
			next, err := l.takeNext(cur.end())
			if err != nil {
				// Keep what was taken for the next attempt.
				l.spares = append(segs[1:len(segs):len(segs)], l.spares...)
				return nil, 0, err
			}
			segs = append(segs, next)
			pos, cur = next.base, next
		}
		positions[i] = pos
		pos += n
	}
	end = pos

	// Write, one contiguous run per segment.
	ri, fi := 0, 0
	for _, s := range segs {
		runStart := max(start, s.base)
		runEnd, first := runStart, ri
		for ri < len(positions) && positions[ri] < s.end() {
			runEnd = positions[ri] + recordSize(partsLen(parts[ri]))
			ri++
		}
		filler := int64(-1)
		if fi < len(fillers) && fillers[fi] < s.end() {
			filler = fillers[fi]
			runEnd = filler + HeaderSize
			fi++
		}
		if runEnd == runStart {
			continue
		}
		var b []byte
		if l.opts.WritePath == WriteMmap {
			b = s.data[runStart-s.base : runEnd-s.base]
		} else {
			if int64(cap(l.buf)) < runEnd-runStart {
				l.buf = make([]byte, runEnd-runStart)
			}
			b = l.buf[:runEnd-runStart]
		}
		// With pwrite, the run is written as b with the large parts in
		// place of the bytes of b they stand for (gather.go).
		g := gather{b: b, gathering: l.opts.WritePath == WritePwrite, iov: l.iov[:0]}
		for i := first; i < ri; i++ {
			g.record(positions[i]-runStart, positions[i], ts, l.epoch, parts[i])
		}
		if filler >= 0 {
			encodeFiller(b[filler-runStart:], filler, l.epoch, uint32(s.end()-filler-HeaderSize))
		}
		if l.opts.WritePath == WritePwrite {
			if err := g.write(s.file, runStart-s.base); err != nil {
				return nil, 0, l.fail(fmt.Errorf("write %s at offset %d: %w", s.path, runStart-s.base, err))
			}
			l.iov = g.release()
		}
	}

	if len(segs) > 1 {
		list := append(append(segmentList(nil), *l.segs.Load()...), segs[1:]...)
		l.segs.Store(&list)
		l.rollTo(segs[len(segs)-1])
	}
	if l.opts.WritePath == WriteMmap {
		if off, n := l.writeAhead.next(end-l.active.base, l.active.size); n > 0 {
			l.active.willNeed(off, n)
		}
	}
	l.lastRecord = positions[len(positions)-1]
	l.lastTS = ts
	l.records += uint64(len(parts))
	l.tail.Store(&tail{
		tailMark: tailMark{end: end, lastRecord: l.lastRecord, lastTS: ts, records: l.records},
		before:   l.tail.Load().tailMark,
	})
	l.wrote.Store(end)
	l.maybePrepare()
	l.opts.Metrics.IncCounter(MetricAppends, uint64(len(parts)))
	l.opts.Metrics.IncCounter(MetricAppendBytes, uint64(end-start))
	return positions, end, nil
}

// rollTo makes s the active segment and starts preparing the one after it.
// mu must be held.
func (l *Log) rollTo(s *segment) {
	old := l.active
	l.active = s
	l.activeSince, l.quarterAt = time.Now(), time.Time{}
	l.writeAhead = window{}
	if old.locked {
		old.m.Unlock(0, int(old.size))
		old.locked = false
	}
	if l.opts.LockActiveSegment && !s.locked {
		s.locked = s.m.Lock(0, int(s.size)) == nil
	}
	l.maybePrepare()
}

// prepareAt is how full the active segment gets before the next one is
// prepared: early enough that preparing 64 MiB (zero-filling it at disk
// speed) finishes before appends at disk speed fill the other half, late
// enough that a log does not hold a whole empty segment most of the time.
const prepareAt = 2 // prepare once 1/prepareAt of the active segment is used

// maybePrepare notes when the active segment gets a quarter full, and
// starts preparing the next segment once it is half full. mu must be held.
func (l *Log) maybePrepare() {
	used := l.wrote.Load() - l.active.base
	if l.quarterAt.IsZero() && used >= l.active.size/4 {
		l.quarterAt = time.Now()
	}
	if l.pending != nil || len(l.spares) > 0 {
		return
	}
	if used >= l.active.size/prepareAt {
		l.startPrepare(l.active.end())
	}
}

// takeNext returns the segment starting at base: a spare, the one prepared
// in the background, or a new one. mu must be held.
func (l *Log) takeNext(base int64) (*segment, error) {
	if len(l.spares) > 0 {
		s := l.spares[0]
		if s.base == base {
			l.spares = l.spares[1:]
			return s, nil
		}
		l.discardSpares()
	}
	if p := l.pending; p != nil {
		l.pending = nil
		p.wait()
		if p.err == nil && p.seg.base == base {
			return p.seg, nil
		}
		if p.seg != nil {
			l.dropSegments([]*segment{p.seg})
		}
	}
	// An append waits for this one: reserve it only.
	return l.newSegment(base, nil)
}

// zeroFillNext reports whether the next segment should be zero-filled (see
// PreallocateZeroes), and how long the active segment took to fill its
// second quarter. mu must be held.
func (l *Log) zeroFillNext() (bool, time.Duration) {
	since := l.quarterAt
	if since.IsZero() {
		since = l.activeSince
	}
	took := time.Since(since)
	return l.opts.Preallocate == PreallocateZeroes && took >= zeroFillSlowerThan, took
}

// newSegment makes the segment starting at base from a recycled file, or
// creates it, zero-filled as zero says (nil: only reserved), and makes its
// name durable.
func (l *Log) newSegment(base int64, zero *zeroPlan) (*segment, error) {
	s := l.takeRecycled(base)
	if s == nil {
		var err error
		if s, err = createSegment(l.fs, l.dir, base, l.opts.SegmentSize, zero, l.opts.WarmSegments); err != nil {
			return nil, err
		}
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		s.release()
		l.fs.Remove(s.path)
		if IsNoSpace(err) {
			return nil, fmt.Errorf("%w: %w", ErrNoSpace, err)
		}
		return nil, fmt.Errorf("commitlog: sync directory %s: %w", l.dir, err)
	}
	if l.opts.LockActiveSegment {
		s.locked = s.m.Lock(0, int(s.size)) == nil
	}
	l.opts.Metrics.IncCounter(MetricSegmentsCreated, 1)
	return s, nil
}

// startPrepare creates the segment at base in the background. mu must be
// held.
func (l *Log) startPrepare(base int64) {
	p := &pendingSegment{base: base, done: make(chan struct{}), hurry: make(chan struct{})}
	l.pending = p
	var zero *zeroPlan
	if fill, took := l.zeroFillNext(); fill {
		// Spread the zeroes over the time the active segment took to fill
		// its second quarter: its second half should take twice as long.
		zero = &zeroPlan{spread: took, hurry: p.hurry, stop: l.closing}
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		p.seg, p.err = l.newSegment(base, zero)
		close(p.done)
	}()
}

// zeroFillSlowerThan is how long the active segment must have taken to
// fill its second quarter (from a quarter to half full) for
// PreallocateZeroes to zero-fill the next one: the recent pace of appends,
// not counting a pause before the first (a fresh node's segment, a log
// idle before a burst, which were taken for slow appends and zero-filled
// the next segment during the burst: in one profile of a leader 2 s into
// a burst after a 5 s idle start, 8% of its CPU samples). Faster than
// that (over 8 MiB/s with 64 MiB segments) each sync carries many records,
// so the journal commit that a sync over reserved blocks adds is shared,
// while the zeroes, written every few seconds, cost the appends' syncs
// time on the disk and the node CPU: three nodes with 64 sync appends in
// flight (about 20 MiB/s) acknowledged as many records without it, at a
// p99 of 7 to 17 ms against 21 to 26 and less CPU (bench cluster, three
// runs each, 2026-12-03).
const zeroFillSlowerThan = 2 * time.Second

// discardSpares drops every prepared segment, pending or spare. mu must be
// held.
func (l *Log) discardSpares() {
	drop := l.spares
	l.spares = nil
	if p := l.pending; p != nil {
		l.pending = nil
		p.wait()
		if p.seg != nil {
			drop = append(drop, p.seg)
		}
	}
	l.dropSegments(drop)
}

// dropSegments removes segments that are in no list, releasing the log's
// reference. Their removal need not be durable: a leftover file past the
// end holds nothing valid.
func (l *Log) dropSegments(segs []*segment) {
	for _, s := range segs {
		l.fs.Remove(s.path)
		s.release()
	}
}

// holdSegment returns the segment holding pos with a reference taken, or
// nil when pos is below the first segment or past the last, or the log is
// closed (see closedErr).
func (l *Log) holdSegment(pos int64) *segment {
	for {
		s := l.segs.Load().find(pos)
		if s == nil {
			return nil
		}
		if s.hold() {
			return s
		}
		// Released while we looked: the list has changed (look again),
		// or Close released every segment and left the list.
		if l.isClosed.Load() {
			return nil
		}
	}
}

// closedErr returns ErrClosed once Close has begun releasing the segments,
// and nil before. Reads check it first, and again when holdSegment finds
// nothing: Close sets it before it releases any segment.
func (l *Log) closedErr() error {
	if l.isClosed.Load() {
		return ErrClosed
	}
	return nil
}

// Read returns a copy of the record at pos.
func (l *Log) Read(pos int64) (Record, error) {
	if err := l.closedErr(); err != nil {
		return Record{}, err
	}
	l.readMu.RLock()
	defer l.readMu.RUnlock()
	w := l.wrote.Load()
	if pos >= w || pos < 0 {
		return Record{}, fmt.Errorf("%w: %d is not below the end %d", ErrNotFound, pos, w)
	}
	s := l.holdSegment(pos)
	if s == nil {
		if err := l.closedErr(); err != nil {
			return Record{}, err
		}
		return Record{}, fmt.Errorf("%w: %d is below the first retained position %d", ErrNotFound, pos, l.First())
	}
	defer s.release()
	rec, next, err := readAt(s, pos, w)
	if err == nil && rec.Payload == nil {
		return Record{}, fmt.Errorf("%w: %d holds a filler", ErrInvalidPosition, pos)
	}
	if err == nil {
		s.readAhead(pos-s.base, next-s.base, s.writtenLimit(w))
	}
	return rec, err
}

// readAt decodes the record or filler at pos in s, which the caller holds,
// and returns a copy and the position after it. A filler, or a gap too
// short for a header, gives a Record with a nil Payload and next set to the
// next segment. w is the end of the log.
func readAt(s *segment, pos, w int64) (Record, int64, error) {
	off := pos - s.base
	room := s.size - off
	if room < HeaderSize {
		return Record{}, s.end(), nil
	}
	h, payload, err := decodeRecord(s.data[off:], pos, room)
	if err == nil && h.kind == kindRecord && pos+recordSize(int(h.length)) > w {
		err = errLength
	}
	if err != nil {
		return Record{}, 0, corruptError(s.path, off, err)
	}
	if h.kind == kindFiller {
		return Record{}, s.end(), nil
	}
	p := make([]byte, len(payload))
	copy(p, payload)
	return Record{Position: pos, StoredAt: h.timestamp, Payload: p}, pos + recordSize(len(p)), nil
}

// Iterator walks the log forward from a position. It is not safe for
// concurrent use; Close it to release the segment it holds.
type Iterator struct {
	l   *Log
	pos int64
	seg *segment // held while not nil
	ra  window   // read-ahead in seg (readahead.go)
}

// NewIterator returns an iterator positioned at from, which must be the
// position of a record, the end of the log, or First().
func (l *Log) NewIterator(from int64) *Iterator {
	return &Iterator{l: l, pos: from}
}

// Position returns the position of the record the next call of Next will
// return (or of the end of the log).
func (it *Iterator) Position() int64 { return it.pos }

// Next returns the next record, or io.EOF at the end of the written log.
// After io.EOF, Next can be called again to follow new appends. A position
// below the first retained segment gives ErrNotFound; after the log's
// Close, Next returns ErrClosed.
func (it *Iterator) Next() (Record, error) {
	l := it.l
	if err := l.closedErr(); err != nil {
		return Record{}, err
	}
	l.readMu.RLock()
	defer l.readMu.RUnlock()
	for {
		w := l.wrote.Load()
		if it.pos >= w {
			return Record{}, io.EOF
		}
		if it.seg == nil || it.pos < it.seg.base || it.pos >= it.seg.end() {
			if it.seg != nil {
				it.seg.release()
			}
			it.seg = l.holdSegment(it.pos)
			it.ra = window{}
			if it.seg == nil {
				if err := l.closedErr(); err != nil {
					return Record{}, err
				}
				return Record{}, fmt.Errorf("%w: %d is outside the retained log", ErrNotFound, it.pos)
			}
		}
		if off, n := it.ra.next(it.pos-it.seg.base, it.seg.writtenLimit(w)); n > 0 {
			it.seg.willNeed(off, n)
		}
		rec, next, err := readAt(it.seg, it.pos, w)
		if err != nil {
			return Record{}, err
		}
		it.pos = next
		if rec.Payload != nil {
			return rec, nil
		}
	}
}

// Close releases the iterator's segment.
func (it *Iterator) Close() {
	if it.seg != nil {
		it.seg.release()
		it.seg = nil
	}
}

// Verify reads every record from First to End and checks its CRC. It
// returns an ErrCorrupt naming the file and offset of the first bad one.
func (l *Log) Verify() error {
	it := l.NewIterator(l.First())
	defer it.Close()
	for {
		_, err := it.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Close flushes everything, writes a final checkpoint, marks the shutdown
// clean and releases the directory. Waiters still pending complete first.
// Afterwards every method that returns an error returns ErrClosed (Err
// excepted: it still reports a failure); Segments returns nil, and First,
// End and Durable the positions the log closed with.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	l.mu.Unlock()

	close(l.closing)
	l.wg.Wait()

	l.mu.Lock()
	defer l.mu.Unlock()
	l.discardSpares()
	err := l.syncAll()
	l.wmu.Lock()
	ws := l.waiters
	l.waiters, l.shut = nil, true
	l.wmu.Unlock()
	l.finishWaiters(ws, err)
	if err == nil {
		err = l.writeCheckpoint()
	}
	if err == nil && l.Err() == nil {
		// Clean: the next Open need not treat the tail as torn.
		if err = l.fs.Remove(filepath.Join(l.dir, abortName)); err == nil {
			err = l.fs.SyncDir(l.dir)
		}
	}
	if err == nil {
		err = l.Err()
	}
	// From here on, calls return ErrClosed; readers that find a segment
	// released see it set.
	l.isClosed.Store(true)
	if cerr := l.cp.close(); err == nil && cerr != nil {
		err = cerr
	}
	if cerr := l.mark.close(); err == nil && cerr != nil {
		err = cerr
	}
	l.releaseAll()
	l.closeRecycled()
	l.lock.Close()
	return err
}

// releaseAll drops the log's reference on every segment.
func (l *Log) releaseAll() {
	if p := l.segs.Load(); p != nil {
		for _, s := range *p {
			if s.locked {
				s.m.Unlock(0, int(s.size))
			}
			s.release()
		}
	}
	for _, s := range l.spares {
		s.release()
	}
	l.spares = nil
}

// since returns the seconds elapsed since t.
func since(t time.Time) float64 { return time.Since(t).Seconds() }
