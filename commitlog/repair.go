package commitlog

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Offline inspection and repair of a log that is not open.
//
// Recovery (recover.go) reads only the tail past the checkpoint's durable
// watermark: a record there that fails its checks is a torn write and the
// log ends before it, unless the sync mark (syncmark.go) says the log was
// synced past it. A record below the durable watermark (the checkpoint's
// or the sync mark's) that fails its checks is damage to durable data,
// which Open or a read of it reports as ErrCorrupt and which no recovery
// may drop by itself. A Scanner reads every record to
// find such damage, without changing a byte; Cut removes every record from
// a position on, so that the layer above can start again from the records
// before the damage (and fetch the rest elsewhere, as a raft follower
// does). Both hold the directory's lock while they run, so neither runs on
// a log that is open.

// Damage describes a record below the durable watermark that fails its
// checks.
type Damage struct {
	// Path is the segment file holding the record.
	Path string
	// Offset is the record's offset in Path.
	Offset int64
	// Position is the record's position in the log.
	Position int64
	// Err wraps ErrCorrupt and names the file, the offset and the reason.
	Err error
}

// ScanInfo describes what Scan found.
type ScanInfo struct {
	// Segments are the log's segment files, oldest first.
	Segments []SegmentInfo
	// First is the position of the first retained byte.
	First int64
	// Durable is the durable watermark: the checkpoint's, or the sync
	// mark's when it is further (the log was synced up to it before it
	// stopped). Recovery cuts a record past it that fails its checks as
	// a torn write; one before it is damage.
	Durable int64
	// End is where the log ends: past the last record of the tail that
	// recovery would keep.
	End int64
	// Meta is the meta of the checkpoint (see Options.CheckpointMeta).
	Meta []byte
	// Records counts the records that check out, at any position.
	Records int
	// Damage is the first damaged record, nil when there is none.
	Damage *Damage
	// Damaged counts the damaged places found: the first, and others
	// after it where the scan could resume (at the next record or the
	// next segment).
	Damaged int
}

// Locate returns the segment file and offset of position pos, or "" when
// no segment holds it.
func (s *ScanInfo) Locate(pos int64) (path string, offset int64) {
	for _, seg := range s.Segments {
		if pos >= seg.Base && pos < seg.Base+seg.Size {
			return seg.Path, pos - seg.Base
		}
	}
	return "", 0
}

// Scanner reads a log directory that is not open, without changing it. It
// holds the directory's lock from NewScanner to Close, so the log cannot be
// opened meanwhile. It is not safe for concurrent use.
type Scanner struct {
	// f is the opened directory, nil after Close; owned by the caller,
	// like the Scanner.
	f *offlineLog
}

// NewScanner locks the log in dir and reads its checkpoint and segment
// files. A log whose files do not fit together (a missing checkpoint, a
// missing segment, a segment of the wrong size) is an error wrapping
// ErrCorrupt; a log that is open, here or in another process, is an error
// from the lock.
func NewScanner(dir string, opts *Options) (*Scanner, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	f, err := openOffline(o, dir)
	if err != nil {
		return nil, err
	}
	return &Scanner{f: f}, nil
}

// Meta returns the meta of the log's checkpoint (see
// Options.CheckpointMeta), or nil.
func (sc *Scanner) Meta() []byte { return sc.f.cp.meta }

// LastDurable returns the position of the record the checkpoint names as
// the newest durable one, which Open checks; -1 when none.
func (sc *Scanner) LastDurable() int64 {
	if sc.f.cp.seq == 0 {
		return -1
	}
	return sc.f.cp.lastRecord
}

// Scan reads every record of the log, oldest first, and calls fn with each
// one in order: with a nil error for a record that checks out (its Payload
// valid only during the call), and with an error wrapping ErrCorrupt, and
// a Record holding only the Position, for a damaged one. An error from fn
// stops the scan and is returned.
//
// Past the durable watermark, Scan ends where recovery would end the log.
// Below it, a record that fails its checks is damage: the first is
// reported in ScanInfo.Damage, and the scan goes on after it where it can:
// at the next record when the damaged record's header still checks out,
// else at the next segment.
func (sc *Scanner) Scan(fn func(rec Record, damage error) error) (*ScanInfo, error) {
	if sc.f == nil {
		return nil, ErrClosed
	}
	f := sc.f
	info := &ScanInfo{Meta: f.cp.meta, Segments: f.infos()}
	if len(f.segs) == 0 {
		return info, nil
	}
	info.First = f.segs[0].base
	info.Durable = f.durable()
	info.End = info.First
	for pos := info.First; ; {
		s := f.segs.find(pos)
		if s == nil {
			break
		}
		off := pos - s.base
		room := s.size - off
		if room < HeaderSize {
			pos = s.end()
			continue
		}
		h, payload, err := f.check(s.data[off:], pos, room, info.Durable)
		if err != nil {
			if pos >= info.Durable {
				break // the torn tail: recovery ends the log here
			}
			info.Damaged++
			cerr := corruptError(s.path, off, err)
			if info.Damage == nil {
				info.Damage = &Damage{Path: s.path, Offset: off, Position: pos, Err: cerr}
			}
			if fn != nil {
				if err := fn(Record{Position: pos}, cerr); err != nil {
					return info, err
				}
			}
			// Go on after it if its header still reads, else at the
			// next segment, whose first record starts at its base.
			if hh, herr := decodeHeader(s.data[off:], pos, room); herr == nil && hh.kind == kindRecord {
				pos += recordSize(int(hh.length))
			} else {
				pos = s.end()
			}
			continue
		}
		if h.kind == kindFiller {
			pos = s.end()
			continue
		}
		next := pos + recordSize(len(payload))
		if pos >= info.Durable {
			info.End = next
		}
		info.Records++
		if fn != nil {
			if err := fn(Record{Position: pos, StoredAt: h.timestamp, Payload: payload}, nil); err != nil {
				return info, err
			}
		}
		pos = next
	}
	info.End = max(info.End, info.Durable)
	return info, nil
}

// Close releases the files and the lock.
func (sc *Scanner) Close() error {
	if sc.f == nil {
		return ErrClosed
	}
	sc.f.close()
	sc.f = nil
	return nil
}

// Cut removes every record at and after position at from the log in dir,
// which must not be open, and writes meta as the checkpoint's meta (see
// Options.CheckpointMeta): the layer above must describe the records that
// remain, since the old meta may name records that Cut removed. at must be
// a position Scan reached: the start of a record, damaged or not, below
// the durable watermark, or the first position of the log (which removes
// every record). The records before at must check out.
//
// The cut is durable when Cut returns. A checkpoint is its commit point: it
// makes at the durable watermark and starts a new epoch there, so the
// records from at on, whatever their state, are never read again; the
// segment files wholly past at are then removed. A crash before the
// checkpoint is written leaves the log as it was; a crash after it leaves
// the log cut, with perhaps some of those files left for the next Open to
// remove.
func Cut(dir string, opts *Options, at int64, meta []byte) error {
	o, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if len(meta) > maxCheckpointMeta {
		return fmt.Errorf("commitlog: cut %s: meta of %d bytes, at most %d", dir, len(meta), maxCheckpointMeta)
	}
	f, err := openOffline(o, dir)
	if err != nil {
		return err
	}
	defer f.close()
	if len(f.segs) == 0 {
		return fmt.Errorf("%w: cut %s at %d: the log holds no segment", ErrNotFound, dir, at)
	}
	first, durable := f.segs[0].base, f.durable()
	if at < first || at > durable || (at == durable && at != first) {
		return fmt.Errorf("%w: cut %s at %d: not in [%d, %d), the durable log", ErrNotFound, dir, at, first, durable)
	}
	// Walk from the first segment to at, through records that check out,
	// to find the last record before at and to prove at is a record's
	// start.
	last, lastTS := int64(-1), int64(0)
	for pos := first; pos != at; {
		s := f.segs.find(pos)
		if s == nil || pos > at {
			return fmt.Errorf("%w: cut %s at %d: not the start of a record", ErrInvalidPosition, dir, at)
		}
		off := pos - s.base
		room := s.size - off
		if room < HeaderSize {
			pos = s.end()
			continue
		}
		h, payload, err := f.check(s.data[off:], pos, room, durable)
		if err != nil {
			return fmt.Errorf("commitlog: cut %s at %d: %w", dir, at, corruptError(s.path, off, err))
		}
		if h.kind == kindFiller {
			pos = s.end()
			continue
		}
		last, lastTS = pos, h.timestamp
		pos += recordSize(len(payload))
	}

	c := checkpoint{flushed: at, lastRecord: last, timestamp: lastTS, epoch: f.cp.epoch + 1, epochStart: at, meta: meta}
	cp, _, _, err := openCheckpoint(o.FS, filepath.Join(dir, checkpointName))
	if err != nil {
		return err
	}
	err = cp.write(c)
	if cerr := cp.close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}

	// The segment holding at stays (recovery finds the end in it); the
	// ones after it hold nothing any more.
	removed := false
	for _, s := range f.segs {
		if s.base > at {
			if err := o.FS.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("commitlog: cut %s: remove %s: %w", dir, s.path, err)
			}
			removed = true
		}
	}
	if removed {
		if err := o.FS.SyncDir(dir); err != nil {
			return fmt.Errorf("commitlog: cut %s: sync directory: %w", dir, err)
		}
	}
	return nil
}

// offlineLog is a log directory opened by a Scanner or Cut: locked, its
// checkpoint read and its segments mapped, nothing written. Its fields are
// set by openOffline and read by its one user.
type offlineLog struct {
	lock  io.Closer      // the directory's lock
	cp    checkpoint     // the checkpoint; zero when there is none
	marks []syncMarkSlot // the sync mark's valid slots (syncmark.go)
	segs  segmentList    // the segments, oldest first; nil after close
}

// openOffline locks dir and reads its checkpoint and segments, checking
// that they fit together as recovery does.
func openOffline(o Options, dir string) (f *offlineLog, err error) {
	names, err := o.FS.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("commitlog: read directory %s: %w", dir, err)
	}
	lock, err := o.FS.Lock(filepath.Join(dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("commitlog: %w", err)
	}
	ol := &offlineLog{lock: lock}
	f = ol
	defer func() {
		if err != nil {
			ol.close() // f is nil on the error paths
		}
	}()
	for _, name := range names {
		base, ok := parseSegmentName(name) // not a .tmp file: its name is longer
		if !ok {
			continue
		}
		s, err := openSegment(o.FS, filepath.Join(dir, name), base)
		if err != nil {
			return nil, err
		}
		f.segs = append(f.segs, s)
	}
	for i := 1; i < len(f.segs); i++ {
		if f.segs[i].base != f.segs[i-1].end() {
			return nil, fmt.Errorf("%w: segment %s ends at %d but the next is %s", ErrCorrupt, f.segs[i-1].path, f.segs[i-1].end(), f.segs[i].path)
		}
	}
	path := filepath.Join(dir, checkpointName)
	found, err := readCheckpointOffline(o, path, &f.cp)
	if err != nil {
		return nil, err
	}
	if len(f.segs) > 0 && !found {
		return nil, fmt.Errorf("%w: checkpoint %s is missing or unreadable but segments exist", ErrCorrupt, path)
	}
	if len(f.segs) > 0 && f.cp.flushed > f.segs[len(f.segs)-1].end() {
		return nil, fmt.Errorf("%w: checkpoint %s says %d bytes are durable but the segments end at %d", ErrCorrupt, path, f.cp.flushed, f.segs[len(f.segs)-1].end())
	}
	if f.marks, err = readSyncMarks(o.FS, dir); err != nil {
		return nil, err
	}
	if synced := syncedUpTo(f.marks, f.cp.epoch); len(f.segs) > 0 && synced > f.segs[len(f.segs)-1].end() {
		return nil, fmt.Errorf("%w: sync mark %s says the log was synced up to %d but the segments end at %d", ErrCorrupt, filepath.Join(dir, syncMarkName), synced, f.segs[len(f.segs)-1].end())
	}
	return f, nil
}

// readCheckpointOffline reads the checkpoint at path into c without
// creating or extending the file; found is false when there is no valid
// slot.
func readCheckpointOffline(o Options, path string, c *checkpoint) (found bool, err error) {
	file, err := o.FS.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("commitlog: open checkpoint %s: %w", path, err)
	}
	defer file.Close()
	buf := make([]byte, 2*checkpointSlotSize)
	if _, err := file.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("commitlog: read checkpoint %s: %w", path, err)
	}
	for slot := 0; slot < 2; slot++ {
		got, err := decodeCheckpoint(buf[slot*checkpointSlotSize : (slot+1)*checkpointSlotSize])
		if err != nil || got.seq%2 != uint64(slot) {
			continue
		}
		if !found || got.seq > c.seq {
			*c, found = got, true
		}
	}
	return found, nil
}

// durable returns the durable watermark, within the segments: the
// checkpoint's, or the sync mark's when it is further (see syncmark.go).
func (f *offlineLog) durable() int64 {
	return max(f.cp.flushed, f.segs[0].base, syncedUpTo(f.marks, f.cp.epoch))
}

// check decodes the record or filler at pos, as recovery and reads do: its
// header, CRC and epoch (at and past the epoch start, only the current
// epoch; before it, none newer), and a record that starts below the
// durable watermark must end at or below it.
func (f *offlineLog) check(b []byte, pos, room, durable int64) (header, []byte, error) {
	h, payload, err := decodeRecord(b, pos, room)
	if err != nil {
		return h, nil, err
	}
	if (pos >= f.cp.epochStart && h.epoch != f.cp.epoch) || h.epoch > f.cp.epoch {
		return h, nil, errEpoch
	}
	if h.kind == kindRecord && pos < durable && pos+recordSize(len(payload)) > durable {
		return h, nil, errLength
	}
	return h, payload, nil
}

// infos describes the segments.
func (f *offlineLog) infos() []SegmentInfo {
	out := make([]SegmentInfo, len(f.segs))
	for i, s := range f.segs {
		out[i] = SegmentInfo{Path: s.path, Base: s.base, Size: s.size}
	}
	return out
}

// close releases the segments and the lock.
func (f *offlineLog) close() {
	for _, s := range f.segs {
		s.release()
	}
	f.segs = nil
	f.lock.Close()
}
