package node

import (
	"errors"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/raftstore"
)

// logView is a node's whole log: raft's own store (live) and the archive, a
// second group of the same DB that holds the retained entries a snapshot
// install brought in below raft's log. Raft never compacts live (its
// TrailingLogs is unbounded), so after a node's first snapshot install the
// archive holds [floor, snapshot index] and live the entries after it;
// otherwise the archive is empty and live holds everything retained.
// Entries in the archive are committed, so where both hold an index the
// archive's copy is right.
type logView struct {
	live, archive *raftstore.Store
	// liveDeleter deletes from live through raft's log cache, so that the
	// cache never serves deleted entries; nil means live itself.
	liveDeleter interface{ DeleteRange(min, max uint64) error }
}

// getLog reads the entry at index from the archive or the live log. A
// missing entry is raft.ErrLogNotFound.
func (v *logView) getLog(index uint64, out *raft.Log) error {
	if first, last := bounds(v.archive); last != 0 && index >= first && index <= last {
		err := v.archive.GetLog(index, out)
		if !errors.Is(err, raft.ErrLogNotFound) {
			return err
		}
	}
	return v.live.GetLog(index, out)
}

// deleteBelow deletes every entry below floor, and never one above upTo
// (the index of a durable snapshot, which restart replays from).
func (v *logView) deleteBelow(floor, upTo uint64) error {
	if floor <= 1 {
		return nil
	}
	to := min(floor-1, upTo)
	var live interface{ DeleteRange(min, max uint64) error } = v.live
	if v.liveDeleter != nil {
		live = v.liveDeleter
	}
	if first, last := bounds(v.archive); last != 0 && first <= to {
		if err := v.archive.DeleteRange(first, min(to, last)); err != nil {
			return err
		}
	}
	if first, last := bounds(v.live); last != 0 && first <= to {
		if err := live.DeleteRange(first, min(to, last)); err != nil {
			return err
		}
	}
	return nil
}

// dropLiveThrough deletes raft's own entries up to index, the index of a
// snapshot a leader sent: the archive now holds the retained ones, and
// those in live may be a deposed leader's entries that the committed log
// replaced. It returns how many entries live holds after index; they stay
// (see failStopStore.IsMonotonic).
func (v *logView) dropLiveThrough(index uint64) (kept uint64, err error) {
	first, last := bounds(v.live)
	if last == 0 {
		return 0, nil
	}
	if last > index {
		kept = last - index
	}
	if first > index {
		return kept, nil
	}
	var live interface{ DeleteRange(min, max uint64) error } = v.live
	if v.liveDeleter != nil {
		live = v.liveDeleter
	}
	return kept, live.DeleteRange(first, min(index, last))
}

// first returns the lowest index held, 0 when none is.
func (v *logView) first() uint64 {
	if first, last := bounds(v.archive); last != 0 {
		return first
	}
	first, _ := bounds(v.live)
	return first
}

func bounds(s *raftstore.Store) (first, last uint64) {
	first, _ = s.FirstIndex()
	last, _ = s.LastIndex()
	return first, last
}
