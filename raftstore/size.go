package raftstore

import (
	"errors"
	"fmt"

	"github.com/raftlog/raftlog/commitlog"
)

// GroupSize is what one group holds (Store.Size).
type GroupSize struct {
	// First and Last are the group's first and last index, 0 when it
	// holds no entry. Exact.
	First, Last uint64
	// Entries is how many entries the group holds: Last-First+1, or 0.
	// Exact.
	Entries uint64
	// Bytes is about how many bytes of the commit log the group's entries
	// take, record headers included: Entries times the mean size of up to
	// sizeSamples of its entries spread evenly over First..Last. Within a
	// few bytes per entry (the varints of indexes and terms) when the
	// entries' data are all of one size; otherwise an estimate, whose
	// error depends on how sizes vary along the log. It does not count
	// the records of other groups between them (see Store.PinnedBytes for
	// what the group keeps on disk), nor the group's index files (8 bytes
	// per entry).
	Bytes int64
}

// sizeSamples is how many entries Store.Size reads to estimate Bytes.
const sizeSamples = 16

// sizeEstimate is the mean record size Size measured, and over which
// range; immutable once published.
type sizeEstimate struct {
	first, last uint64
	mean        float64
}

// Size returns what the group holds: its exact indexes and entry count and
// an estimate of its bytes (see GroupSize). It is cheap: it reads up to
// sizeSamples records when a quarter or more of the group's range changed
// since the last estimate, and nothing otherwise; a node can ask it of
// every group for a describe or a placement decision.
func (s *Store) Size() (GroupSize, error) {
	s.rw.RLock()
	defer s.rw.RUnlock()
	if err := s.closedErr(); err != nil {
		return GroupSize{}, err
	}
	first, last := s.first.Load(), s.last.Load()
	if last == 0 {
		return GroupSize{}, nil
	}
	n := last - first + 1
	est := s.size.Load()
	if est == nil || stale(est, first, last) {
		mean, err := s.sampleSize(first, last)
		if err != nil {
			return GroupSize{}, err
		}
		est = &sizeEstimate{first: first, last: last, mean: mean}
		if mean > 0 {
			s.size.Store(est)
		}
	}
	return GroupSize{First: first, Last: last, Entries: n, Bytes: int64(est.mean*float64(n) + 0.5)}, nil
}

// stale reports whether less than three quarters of first..last is
// covered by the range est was measured over.
func stale(est *sizeEstimate, first, last uint64) bool {
	lo, hi := max(first, est.first), min(last, est.last)
	if lo > hi {
		return true
	}
	return (hi-lo+1)*4 < (last-first+1)*3
}

// sampleSize returns the mean commit-log size of up to sizeSamples records
// of the group spread evenly over first..last. rw must be held for reading.
func (s *Store) sampleSize(first, last uint64) (float64, error) {
	n := last - first + 1
	k := min(n, sizeSamples)
	files := s.files.Load()
	var total int64
	read := 0
	for j := uint64(0); j < k; j++ {
		i := first
		if k > 1 {
			i = first + j*(n-1)/(k-1)
		}
		f := files.find(i)
		if f == nil {
			return 0, fmt.Errorf("%w: group %d has no index file for %d", ErrCorrupt, s.group, i)
		}
		pos := f.load(i)
		if pos < 0 {
			return 0, fmt.Errorf("%w: index %s has no slot for %d", ErrCorrupt, f.path, i)
		}
		rec, err := s.db.log.Read(pos)
		if errors.Is(err, commitlog.ErrNotFound) && s.first.Load() > i {
			continue // compacted while we read
		}
		if err != nil {
			return 0, corruptAs(closedAs(fmt.Errorf("raftstore: group %d size: index %d: %w", s.group, i, err)))
		}
		total += commitlog.HeaderSize + int64(len(rec.Payload))
		read++
	}
	if read == 0 {
		return 0, nil
	}
	return float64(total) / float64(read), nil
}
