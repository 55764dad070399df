package commitlog

import (
	"fmt"
)

// Truncate removes every record at or after position to, which must be the
// position of a record or the end of the log (which changes nothing). It is
// durable when it returns: a crash afterwards never brings the removed
// records back.
//
// The new end is made durable first, then a checkpoint starting a new
// epoch at to is written; records past to carry an older epoch from then
// on and are never read again. Segments wholly past to are removed.
func (l *Log) Truncate(to int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if err := l.Err(); err != nil {
		return err
	}
	list := *l.segs.Load()
	end := l.wrote.Load()
	if to == end {
		return nil
	}
	if to < list[0].base || to > end {
		return fmt.Errorf("%w: cannot truncate to %d outside [%d, %d]", ErrNotFound, to, list[0].base, end)
	}
	target := list.find(to)
	off := to - target.base
	if _, _, err := decodeRecord(target.data[off:], to, target.size-off); err != nil {
		return fmt.Errorf("%w: truncate to %d (%s offset %d): %v", ErrInvalidPosition, to, target.path, off, err)
	}
	prevRecord, prevTS, err := l.recordBefore(list, to)
	if err != nil {
		return err
	}
	l.discardSpares()

	l.cpMu.Lock()
	l.syncMu.Lock()
	// Everything before to must be durable before the new epoch starts
	// there: recovery scans from the checkpoint on.
	if l.flushed.Load() < to {
		err = l.syncLocked(l.writtenLocked())
	}
	if err == nil {
		l.epoch++
		l.epochStart = to
		l.flushed.Store(to)
		l.durableRecord, l.durableTS = prevRecord, prevTS
		// The end moves back with the durable state, under syncMu: a
		// syncer that ran between the two would sync up to the old end
		// and count it durable, and appends below it would then return
		// without a sync.
		l.readMu.Lock()
		l.wrote.Store(to)
		l.lastRecord, l.lastTS = prevRecord, prevTS
		at := tailMark{end: to, lastRecord: prevRecord, lastTS: prevTS, records: l.records}
		l.tail.Store(&tail{tailMark: at, before: at})
		l.readMu.Unlock()
	}
	l.syncMu.Unlock()
	if err == nil {
		l.truncations.Add(1)
		if err = l.writeCheckpointLocked(l.lastMeta); err != nil {
			// The durable state is unknown: stop here.
			err = l.fail(err)
		}
	}
	l.cpMu.Unlock()
	if err != nil {
		return err
	}

	// Drop whole segments past the new end; the segment holding to stays
	// (it may now be empty).
	var keep, drop segmentList
	for _, s := range list {
		if s.base > to || (s.base == to && s != list[0] && s != target) {
			drop = append(drop, s)
		} else {
			keep = append(keep, s)
		}
	}
	l.segs.Store(&keep)
	if len(drop) > 0 {
		l.removeSegments(drop)
		if err := l.fs.SyncDir(l.dir); err != nil {
			return l.fail(fmt.Errorf("sync directory %s: %w", l.dir, err))
		}
	}
	if l.active != target {
		l.rollTo(target)
	}
	return nil
}

// recordBefore finds the last record that ends at or before pos by walking
// the segment that holds it from its start. It returns -1 when there is
// none.
func (l *Log) recordBefore(list segmentList, pos int64) (int64, int64, error) {
	for i := len(list) - 1; i >= 0; i-- {
		s := list[i]
		if s.base >= pos {
			continue
		}
		last, lastTS := int64(-1), int64(0)
		for p := s.base; p < pos && p < s.end(); {
			off := p - s.base
			if s.size-off < HeaderSize {
				break
			}
			h, _, err := decodeRecord(s.data[off:], p, s.size-off)
			if err != nil {
				return 0, 0, corruptError(s.path, off, err)
			}
			if h.kind == kindFiller {
				break
			}
			last, lastTS = p, h.timestamp
			p += recordSize(int(h.length))
		}
		if last >= 0 {
			return last, lastTS, nil
		}
	}
	return -1, 0, nil
}

// removeSegments takes segments out of use: their files are removed, oldest
// first, and their mappings go when the last reader releases them. The
// caller syncs the directory.
func (l *Log) removeSegments(segs segmentList) {
	for _, s := range segs {
		if s.locked {
			s.m.Unlock(0, int(s.size))
			s.locked = false
		}
		l.fs.Remove(s.path)
		s.release()
	}
	l.opts.Metrics.IncCounter(MetricSegmentsRemoved, uint64(len(segs)))
}

// DeleteBefore removes every whole segment that ends at or before pos,
// never the active one, and returns how many it removed. Records in them
// can no longer be read; readers that hold one finish safely. It is durable
// when it returns.
func (l *Log) DeleteBefore(pos int64) (int, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return 0, ErrClosed
	}
	list := *l.segs.Load()
	n := 0
	for n < len(list)-1 && list[n].end() <= pos && list[n] != l.active {
		n++
	}
	if n == 0 {
		l.mu.Unlock()
		return 0, nil
	}
	keep := append(segmentList(nil), list[n:]...)
	l.segs.Store(&keep)
	drop := list[:n]
	l.recycleSegments(drop)
	err := l.fs.SyncDir(l.dir)
	l.mu.Unlock()
	if err != nil {
		return n, fmt.Errorf("commitlog: sync directory %s after removing segments: %w", l.dir, err)
	}
	return n, nil
}

// applyRetention removes the oldest segments past RetentionBytes or older
// than RetentionAge. A segment's records are all older than the first
// record of the segment after it, whose timestamp decides.
func (l *Log) applyRetention() {
	list := *l.segs.Load()
	var total int64
	for _, s := range list {
		total += s.size
	}
	cutoff := int64(-1)
	if l.opts.RetentionAge > 0 {
		cutoff = l.opts.Now().Add(-l.opts.RetentionAge).UnixNano()
	}
	var before int64
	for i := 0; i+1 < len(list); i++ {
		bySize := l.opts.RetentionBytes > 0 && total > l.opts.RetentionBytes
		byAge := false
		if cutoff >= 0 {
			if ts, ok := l.firstTimestamp(list[i+1]); ok && ts < cutoff {
				byAge = true
			}
		}
		if !bySize && !byAge {
			break
		}
		total -= list[i].size
		before = list[i].end()
	}
	if before > 0 {
		l.DeleteBefore(before)
	}
}

// firstTimestamp returns the store time of the first record of s.
func (l *Log) firstTimestamp(s *segment) (int64, bool) {
	if !s.hold() {
		return 0, false
	}
	defer s.release()
	if s.base >= l.wrote.Load() {
		return 0, false
	}
	h, _, err := decodeRecord(s.data, s.base, s.size)
	if err != nil || h.kind != kindRecord {
		return 0, false
	}
	return h.timestamp, true
}
