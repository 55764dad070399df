package commitlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// recover loads the segments and the checkpoint, finds the end of the valid
// log and prepares l for appends. It runs inside Open, before any other
// goroutine can see l.
//
// The scan starts at the checkpoint's durable watermark, so its cost is
// bounded by what was written since the last checkpoint, not by the size
// of the log. It follows records while their CRC, position and epoch check
// out; the first one that does not is the torn tail, and the log ends
// there, unless the sync mark (syncmark.go) says it was synced: then it
// is damage, and Open fails with ErrCorrupt. After a crash the recovered tail is synced and a new epoch begins
// at its end, so that nothing past it can ever be taken for a record.
func (l *Log) recover() error {
	names, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("commitlog: read directory %s: %w", l.dir, err)
	}
	cpFile, c, found, err := openCheckpoint(l.fs, filepath.Join(l.dir, checkpointName))
	if err != nil {
		return err
	}
	l.cp = cpFile
	mark, marks, err := openSyncMark(l.fs, l.dir)
	if err != nil {
		return err
	}
	l.mark = mark
	crashed := false
	var removed []string
	var list segmentList
	for _, name := range names {
		switch {
		case name == abortName:
			crashed = true
		case len(name) == segmentNameLen+len(tmpSuffix) && strings.HasSuffix(name, tmpSuffix):
			// A segment whose preparation a crash interrupted.
			if err := l.fs.Remove(filepath.Join(l.dir, name)); err != nil {
				return fmt.Errorf("commitlog: remove %s: %w", filepath.Join(l.dir, name), err)
			}
			removed = append(removed, filepath.Join(l.dir, name))
		case len(name) == segmentNameLen:
			base, ok := parseSegmentName(name)
			if !ok {
				continue
			}
			s, err := openSegment(l.fs, filepath.Join(l.dir, name), base)
			if err != nil {
				l.segs.Store(&list)
				return err
			}
			list = append(list, s)
		}
	}
	l.segs.Store(&list)

	if len(list) == 0 {
		if found && c.flushed > 0 {
			return fmt.Errorf("%w: checkpoint %s says %d bytes are durable but %s holds no segment", ErrCorrupt, l.cp.path, c.flushed, l.dir)
		}
		l.info = RecoveryInfo{New: true, Removed: removed}
		if len(marks) > 0 {
			// Left by a log whose segments are gone: the fresh log starts
			// at epoch 1 again, where these could pass for its own.
			if err := l.mark.reset(); err != nil {
				return err
			}
		}
		return l.initFresh()
	}
	if !found {
		return fmt.Errorf("%w: checkpoint %s is missing or unreadable but segments exist", ErrCorrupt, filepath.Join(l.dir, checkpointName))
	}
	for i := 1; i < len(list); i++ {
		if list[i].base != list[i-1].end() {
			return fmt.Errorf("%w: segment %s ends at %d but the next is %s", ErrCorrupt, list[i-1].path, list[i-1].end(), list[i].path)
		}
	}
	l.epoch, l.epochStart = c.epoch, c.epochStart
	l.durableRecord, l.durableTS = c.lastRecord, c.timestamp
	l.lastMeta, l.meta = c.meta, c.meta

	w := max(c.flushed, list[0].base)
	if w > list[len(list)-1].end() {
		return fmt.Errorf("%w: checkpoint %s says %d bytes are durable but the segments end at %d", ErrCorrupt, l.cp.path, c.flushed, list[len(list)-1].end())
	}
	// synced is where the sync mark says the log was synced up to, past
	// the checkpoint: a record before it that fails its checks is damage
	// to synced bytes, which no recovery may cut off as a torn tail.
	synced := syncedUpTo(marks, c.epoch)
	if last := list[len(list)-1].end(); synced > last {
		return fmt.Errorf("%w: sync mark %s says the log was synced up to %d but the segments end at %d", ErrCorrupt, filepath.Join(l.dir, syncMarkName), synced, last)
	}
	if c.lastRecord >= list[0].base {
		if err := l.checkRecordAt(list, c.lastRecord, w); err != nil {
			return err
		}
	}

	// Scan the tail. end moves past a record only once it checks out; a
	// filler or a short gap at the end of a segment is crossed only when a
	// record follows it.
	pos, end, lastRecord, lastTS, n := w, w, c.lastRecord, c.timestamp, 0
	var (
		raSeg *segment
		ra    window
		stop  string
		torn  bool
	)
	for {
		s := list.find(pos)
		if s == nil {
			break
		}
		off := pos - s.base
		room := s.size - off
		if room < HeaderSize {
			pos = s.end()
			continue
		}
		h, _, err := decodeRecord(s.data[off:], pos, room)
		if err == nil && ((pos >= c.epochStart && h.epoch != c.epoch) || h.epoch > c.epoch) {
			err = fmt.Errorf("record of epoch %d where the log is in epoch %d", h.epoch, c.epoch)
		}
		if err != nil {
			if pos < synced {
				return fmt.Errorf("%w; the log was synced up to %d (sync mark %s), so this is damage to synced records, not a write torn by a crash",
					corruptError(s.path, off, err), synced, filepath.Join(l.dir, syncMarkName))
			}
			stop, torn = err.Error(), errors.Is(err, errChecksum) || errors.Is(err, errLength)
			break
		}
		if h.kind == kindFiller {
			pos = s.end()
			continue
		}
		lastRecord, lastTS = pos, h.timestamp
		pos += recordSize(int(h.length))
		end = pos
		n++
		// A tail to scan: read ahead of the scan (readahead.go). Not
		// before the first record, so that a clean open reads nothing
		// past the end.
		if s != raSeg {
			raSeg, ra = s, window{}
		}
		if from, size := ra.next(pos-s.base, s.size); size > 0 {
			s.willNeed(from, size)
		}
	}
	l.info = RecoveryInfo{Crashed: crashed || end != w, Checkpoint: c.seq, ScannedFrom: w, Synced: max(synced, w), End: end, Records: n, Stop: stop, Torn: torn, Removed: removed}

	// The active segment holds end (or ends at it when full). Keep the one
	// after it as the prepared next segment; anything further is debris
	// of a torn tail.
	ai := len(list) - 1
	for i, s := range list {
		if s.base <= end && end < s.end() {
			ai = i
			break
		}
		if s.end() == end {
			ai = i
		}
	}
	keep := list[:ai+1]
	if ai+1 < len(list) {
		l.spares = []*segment{list[ai+1]}
		if ai+2 < len(list) {
			for _, s := range list[ai+2:] {
				l.info.Removed = append(l.info.Removed, s.path)
			}
			l.dropSegments(list[ai+2:])
			if err := l.fs.SyncDir(l.dir); err != nil {
				return fmt.Errorf("commitlog: sync directory %s: %w", l.dir, err)
			}
		}
	}
	keep = keep[:len(keep):len(keep)]
	l.segs.Store(&keep)
	l.active = keep[len(keep)-1]
	l.activeSince, l.quarterAt = time.Now(), time.Time{}
	if end-l.active.base >= l.active.size/4 {
		l.quarterAt = l.activeSince
	}
	l.lastRecord, l.lastTS = lastRecord, lastTS
	at := tailMark{end: end, lastRecord: lastRecord, lastTS: lastTS}
	l.tail.Store(&tail{tailMark: at, before: at})
	l.wrote.Store(end)

	if l.info.Crashed {
		// What the scan accepted may sit only in the page cache (a process
		// crash): make it durable before building on it.
		for _, s := range keep {
			if s.end() > w {
				if err := s.file.Sync(); err != nil {
					return fmt.Errorf("commitlog: sync recovered segment %s: %w", s.path, err)
				}
			}
		}
		l.epoch++
		l.epochStart = end
	}
	l.flushed.Store(end)
	l.durableRecord, l.durableTS = lastRecord, lastTS
	if l.info.Crashed {
		if err := l.writeCheckpointLocked(l.lastMeta); err != nil {
			return err
		}
	}
	return l.markOpen()
}

// checkRecordAt verifies the record the checkpoint names as the last durable
// one: a bad record below the durable watermark is corruption.
func (l *Log) checkRecordAt(list segmentList, pos, w int64) error {
	s := list.find(pos)
	if s == nil {
		return fmt.Errorf("%w: checkpoint names a record at %d outside the segments", ErrCorrupt, pos)
	}
	off := pos - s.base
	h, _, err := decodeRecord(s.data[off:], pos, s.size-off)
	if err == nil && pos+recordSize(int(h.length)) > w && h.kind == kindRecord {
		err = errLength
	}
	if err != nil {
		return corruptError(s.path, off, err)
	}
	return nil
}

// initFresh starts an empty log: epoch 1 from position 0, its first segment
// created and the checkpoint written before any record.
func (l *Log) initFresh() error {
	l.epoch, l.epochStart = 1, 0
	l.durableRecord, l.lastRecord = -1, -1
	if err := l.writeCheckpointLocked(nil); err != nil {
		return err
	}
	var zero *zeroPlan
	if l.opts.Preallocate == PreallocateZeroes {
		zero = &zeroPlan{} // at once: nothing waits on the disk yet
	}
	s, err := l.newSegment(0, zero)
	if err != nil {
		return err
	}
	list := segmentList{s}
	l.segs.Store(&list)
	l.active = s
	l.activeSince, l.quarterAt = time.Now(), time.Time{}
	empty := tailMark{end: 0, lastRecord: -1}
	l.tail.Store(&tail{tailMark: empty, before: empty})
	return l.markOpen()
}

// markOpen creates the abort marker, which only a clean Close removes.
func (l *Log) markOpen() error {
	path := filepath.Join(l.dir, abortName)
	f, err := l.fs.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("commitlog: create %s: %w", path, err)
	}
	f.Close()
	if err := l.fs.SyncDir(l.dir); err != nil {
		return fmt.Errorf("commitlog: sync directory %s: %w", l.dir, err)
	}
	return nil
}
