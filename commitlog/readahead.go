package commitlog

import (
	"sync/atomic"

	"github.com/raftlog/raftlog/mmap"
)

// Read-ahead through the mappings.
//
// Every segment is mapped with MADV_RANDOM, so that a page fault reads the
// page it needs and no more. Without it Linux answers a fault on a file
// mapping by reading a whole read-ahead window around it (read_ahead_kb:
// 128 KiB by default, 8 MiB on some virtual disks): the first Read of a
// record that is not in the page cache took milliseconds, and so did
// opening a log whose last record was not (recovery reads it).
//
// Readers that go forward ask for what comes next instead, with
// MADV_WILLNEED, which starts the reads and does not wait for them: an
// Iterator and the recovery scan always, and Reads of a segment that follow
// one another (raft sends a follower that is catching up entry after
// entry). The window starts at raMinWindow and doubles up to raMaxWindow
// while the reader keeps going, and the next window is asked for when the
// reader is half way through the current one, so that a sequential reader
// finds its pages read by the time it gets there.

const (
	// raMinWindow is the first read-ahead window of a sequential reader.
	raMinWindow = 128 << 10
	// raMaxWindow is the largest read-ahead window.
	raMaxWindow = 4 << 20
	// raGap is how far past the end of the previous Read of a stream the
	// next may start and still count as sequential: the records of other
	// raft groups of a DB lie between those of one group.
	raGap = 64 << 10
	// raStreams is how many sequential Read streams a segment follows at
	// once, such as several followers being caught up.
	raStreams = 4
)

// window is the read-ahead of one sequential reader of one segment, in
// offsets within the segment. A reader that owns it (an Iterator, the
// recovery scan) uses it directly; segment Reads share readStreams.
type window struct {
	end  int64 // read-ahead has been asked for up to here
	size int64 // the last window asked for; 0 before the first
}

// next returns the range to ask for once a reader has read up to pos, or
// n == 0 when the window ahead is still large enough. It advances w.
// Less than raMinWindow up to limit (the end of what is written) is not
// asked for: a reader that close behind the writer reads pages the writes
// left in the page cache, and asking for a few pages at a time would cost
// a system call every few records.
func (w *window) next(pos, limit int64) (off, n int64) {
	if pos+w.size/2 < w.end {
		return 0, 0
	}
	size := int64(raMinWindow)
	if w.size > 0 {
		size = min(2*w.size, raMaxWindow)
	}
	from := max(w.end, pos)
	to := min(from+size, limit)
	if to-from < min(size, raMinWindow) {
		return 0, 0
	}
	w.size, w.end = size, to
	return from, to - from
}

// readStream follows one sequential reader of a segment through Read.
// Its fields are loaded and stored without a lock: they are hints, and
// readers that race over a stream only ask for a window twice or not at
// all.
type readStream struct {
	next atomic.Int64 // offset just past the stream's last Read; 0: unused
	end  atomic.Int64 // window.end
	size atomic.Int64 // window.size
}

// readStreams is the read-ahead state of a segment's Reads.
type readStreams struct {
	streams [raStreams]readStream
	victim  atomic.Uint32 // the slot a new stream takes next, modulo raStreams
}

// readAhead notes a Read of [off, end) of s and, when it follows an
// earlier one, asks the kernel to read ahead of it, up to limit (the end
// of what is written).
func (s *segment) readAhead(off, end, limit int64) {
	for i := range s.ra.streams {
		st := &s.ra.streams[i]
		next := st.next.Load()
		if next == 0 || off < next || off-next > raGap {
			continue
		}
		if !st.next.CompareAndSwap(next, end) {
			return // another reader moved the stream on
		}
		w := window{end: st.end.Load(), size: st.size.Load()}
		from, n := w.next(end, limit)
		if n > 0 {
			st.end.Store(w.end)
			st.size.Store(w.size)
			s.willNeed(from, n)
		}
		return
	}
	st := &s.ra.streams[s.ra.victim.Add(1)%raStreams]
	st.next.Store(end)
	st.end.Store(end)
	st.size.Store(0)
}

// writtenLimit returns the end of the read-ahead of s for a log written
// up to w: the page holding w, or the end of s.
func (s *segment) writtenLimit(w int64) int64 {
	page := int64(mmap.PageSize)
	return min(s.size, (w-s.base+page-1)/page*page)
}

// willNeed starts reading [off, off+n) of s into the page cache. It is a
// hint: a failure only costs the reader a page fault.
func (s *segment) willNeed(off, n int64) {
	s.m.Advise(int(off), int(n), mmap.WillNeed)
}

// adviseRandom marks s's mapping for random access (see above).
func (s *segment) adviseRandom() {
	s.m.Advise(0, int(s.size), mmap.Random)
}
