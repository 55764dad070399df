package replica

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/raftstore"
)

// LogView is a node's whole log: raft's own store (live) and the archive, a
// group of the same DB that holds the retained entries a snapshot install
// brought in below raft's log. Raft never compacts live (its TrailingLogs
// is unbounded), so after a node's first snapshot install the archive
// holds [floor, snapshot index] and live the entries after it; otherwise
// the archive is empty and live holds everything retained. Entries in the
// archive are committed, so where both hold an index the archive's copy is
// right.
//
// Two groups take turns as the archive (Groups.ArchiveA and ArchiveB): the current one,
// named by the newest snapshot file, and the other, which is empty or
// holds the records of a snapshot being installed (snapinstall.go). An
// install switches the current one; readers load it through an atomic
// pointer.
type LogView struct {
	// Live is raft's log; set before the view is shared, never changed.
	Live *raftstore.Store
	// Groups are the view's raftstore groups; set before the view is
	// shared, never changed.
	Groups Groups
	// Archives are the stores of Groups.ArchiveA and ArchiveB; set
	// before the view is shared, never changed.
	Archives [2]*raftstore.Store
	// Archive is the current Archive, one of archives. Changed only by the
	// snapshot store, holding snapStore.mu.
	Archive atomic.Pointer[raftstore.Store]
	// LiveDeleter deletes from live through raft's log cache, so that the
	// cache never serves deleted entries; nil means live itself. Set once
	// before raft starts.
	LiveDeleter interface{ DeleteRange(min, max uint64) error }
	// pins keep entries from deleteBelow while backups copy them
	// (backup.go).
	pins pinSet
}

// NewLogView opens the live and archive groups of db, with the first
// archive group current (the snapshot store's recovery may pick the
// other).
func NewLogView(db *raftstore.DB, groups Groups) (*LogView, error) {
	v := &LogView{Groups: groups}
	var err error
	if v.Live, err = db.Store(groups.Live); err != nil {
		return nil, err
	}
	for i, g := range []uint64{groups.ArchiveA, groups.ArchiveB} {
		if v.Archives[i], err = db.Store(g); err != nil {
			return nil, err
		}
	}
	v.Archive.Store(v.Archives[0])
	return v, nil
}

// archiveStore returns the store of archive group g.
func (v *LogView) archiveStore(g uint64) (*raftstore.Store, error) {
	switch g {
	case v.Groups.ArchiveA:
		return v.Archives[0], nil
	case v.Groups.ArchiveB:
		return v.Archives[1], nil
	}
	return nil, fmt.Errorf("replica: %d is not an archive group", g)
}

// GetLog reads the entry at index from the archive or the live log. A
// missing entry is raft.ErrLogNotFound.
func (v *LogView) GetLog(index uint64, out *raft.Log) error {
	for {
		ar := v.Archive.Load()
		if first, last := Bounds(ar); last != 0 && index >= first && index <= last {
			err := ar.GetLog(index, out)
			if !errors.Is(err, raft.ErrLogNotFound) {
				return err
			}
		}
		err := v.Live.GetLog(index, out)
		if errors.Is(err, raft.ErrLogNotFound) && v.Archive.Load() != ar {
			continue // an install switched the archive while we read: read the new one
		}
		return err
	}
}

// liveStore returns what deletes from live.
func (v *LogView) liveStore() interface{ DeleteRange(min, max uint64) error } {
	if v.LiveDeleter != nil {
		return v.LiveDeleter
	}
	return v.Live
}

// DeleteBelow deletes every entry below floor, and never one above upTo
// (the index of a durable snapshot, which restart replays from), nor one
// at or above a pin.
func (v *LogView) DeleteBelow(floor, upTo uint64) error {
	if floor <= 1 {
		return nil
	}
	to := min(floor-1, upTo)
	if p, ok := v.pins.lowest(); ok {
		if p <= 1 {
			return nil
		}
		to = min(to, p-1)
	}
	ar := v.Archive.Load()
	if first, last := Bounds(ar); last != 0 && first <= to {
		if err := ar.DeleteRange(first, min(to, last)); err != nil {
			return err
		}
	}
	if first, last := Bounds(v.Live); last != 0 && first <= to {
		if err := v.liveStore().DeleteRange(first, min(to, last)); err != nil {
			return err
		}
	}
	return nil
}

// DropLiveThrough deletes raft's own entries up to index, the index of a
// snapshot a leader sent: the archive now holds the retained ones, and
// those in live may be a deposed leader's entries that the committed log
// replaced. It returns how many entries live holds after index; they stay
// (see failStopStore.IsMonotonic).
func (v *LogView) DropLiveThrough(index uint64) (kept uint64, err error) {
	first, last := Bounds(v.Live)
	if last == 0 {
		return 0, nil
	}
	if last > index {
		kept = last - index
	}
	if first > index {
		return kept, nil
	}
	return kept, v.liveStore().DeleteRange(first, min(index, last))
}

// First returns the lowest index held, 0 when none is.
func (v *LogView) First() uint64 {
	if first, last := Bounds(v.Archive.Load()); last != 0 {
		return first
	}
	first, _ := Bounds(v.Live)
	return first
}

// EmptyStore deletes every entry of s; durable when it returns.
func EmptyStore(s *raftstore.Store) error {
	if first, last := Bounds(s); last != 0 {
		return s.DeleteRange(first, last)
	}
	return nil
}

// Bounds returns the first and last index s holds, 0 and 0 when empty.
func Bounds(s *raftstore.Store) (first, last uint64) {
	first, _ = s.FirstIndex()
	last, _ = s.LastIndex()
	return first, last
}
