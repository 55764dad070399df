package commitlog

import "path/filepath"

// Segment recycling. A segment removed from the front of the log is not
// deleted but renamed to <its name>.tmp and, once no reader holds it, kept
// with its mapping to become a later segment. Its blocks are allocated and
// written, so syncs of appends into it need no journal commit for extent
// conversion (see PreallocateZeroes) and it needs no zero-filling: the
// steady state of a log that is compacted as it grows, as raft's is, costs
// one write per byte and gets the cheap syncs of a zero-filled segment.
//
// Its old records stay in it until overwritten, but none can be taken for a
// record of the new segment: every header names the position it was
// written at, and the new segment starts at another base. A crash leaves
// the .tmp file behind, and recovery removes it like any other.

// maxRecycled is how many removed segments are kept for reuse.
const maxRecycled = 2

// recycleSegments takes segments removed from the front of the log out of
// use: each is renamed to a temporary name and handed to the recycle pool
// when its last reader releases it. The caller syncs the directory.
func (l *Log) recycleSegments(segs segmentList) {
	for _, s := range segs {
		if s.locked {
			s.m.Unlock(0, int(s.size))
			s.locked = false
		}
		tmp := s.path + tmpSuffix
		if s.size != l.opts.SegmentSize || l.fs.Rename(s.path, tmp) != nil {
			l.fs.Remove(s.path)
			s.release()
			continue
		}
		s.tmpPath = tmp
		s.free = l.putRecycled
		s.release()
	}
	l.opts.Metrics.IncCounter(MetricSegmentsRemoved, uint64(len(segs)))
}

// putRecycled keeps a released segment's file and mapping for reuse, or
// removes it when the pool is full or the log closed.
func (l *Log) putRecycled(s *segment) {
	l.recycleMu.Lock()
	keep := !l.recycleClosed && len(l.recycled) < maxRecycled
	if keep {
		l.recycled = append(l.recycled, s)
	}
	l.recycleMu.Unlock()
	if !keep {
		s.m.Unmap()
		s.file.Close()
		l.fs.Remove(s.tmpPath)
	}
}

// takeRecycled renames a recycled file to the segment at base and returns
// the new segment, or nil when there is none to reuse. The caller syncs the
// directory.
func (l *Log) takeRecycled(base int64) *segment {
	l.recycleMu.Lock()
	var r *segment
	if n := len(l.recycled); n > 0 {
		r = l.recycled[n-1]
		l.recycled = l.recycled[:n-1]
	}
	l.recycleMu.Unlock()
	if r == nil {
		return nil
	}
	path := filepath.Join(l.dir, segmentName(base))
	if err := l.fs.Rename(r.tmpPath, path); err != nil {
		r.m.Unmap()
		r.file.Close()
		l.fs.Remove(r.tmpPath)
		return nil
	}
	// The mapping keeps the advice it was given when it was created.
	s := &segment{base: base, size: r.size, path: path, file: r.file, m: r.m, data: r.data}
	s.refs.Store(1)
	return s
}

// closeRecycled drops the pool at Close; later releases remove their files.
func (l *Log) closeRecycled() {
	l.recycleMu.Lock()
	pool := l.recycled
	l.recycled, l.recycleClosed = nil, true
	l.recycleMu.Unlock()
	for _, s := range pool {
		s.m.Unmap()
		s.file.Close()
		l.fs.Remove(s.tmpPath)
	}
}
