package raftstore

import (
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/raft"
)

// recover rebuilds every group's indexes: it starts from the indexes the
// last checkpoint recorded and replays the commit log from the position
// that checkpoint recorded, which is bounded by the checkpoint interval,
// not by the size of the log. A batch whose last entry is missing (a crash
// cut its StoreLogs short) is removed from the commit log, so it is never
// visible.
func (db *DB) recover() error {
	replayFrom, states, err := decodeMeta(db.log.Meta())
	if err != nil {
		return err
	}
	for _, g := range db.stable.groups() {
		if err := db.addRecovered(g); err != nil {
			return err
		}
	}
	for _, st := range states {
		if err := db.addRecovered(st.group); err != nil {
			return err
		}
		s := db.groups[st.group]
		s.first.Store(st.first)
		s.last.Store(st.last)
		s.commit.Store(st.commit)
	}

	from := max(replayFrom, db.log.First())
	it := db.log.NewIterator(from)
	defer it.Close()
	type pendingEntry struct {
		index uint64
		pos   int64
	}
	var (
		pending      []pendingEntry
		pendingGroup uint64
		pendingFirst int64 = -1
	)
	for {
		rec, err := it.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("raftstore: replay from %d: %w", from, err)
		}
		r, err := decodeRecord(rec.Payload)
		if err != nil {
			return fmt.Errorf("%w: commit-log record at %d: %v", ErrCorrupt, rec.Position, err)
		}
		if pendingFirst >= 0 && (r.kind != kindEntry || r.group != pendingGroup) {
			return fmt.Errorf("%w: commit-log record at %d interrupts the batch of group %d that starts at %d", ErrCorrupt, rec.Position, pendingGroup, pendingFirst)
		}
		if err := db.addRecovered(r.group); err != nil {
			return err
		}
		s := db.groups[r.group]
		switch r.kind {
		case kindEntry:
			if pendingFirst < 0 {
				pendingFirst, pendingGroup = rec.Position, r.group
			}
			pending = append(pending, pendingEntry{r.log.Index, rec.Position})
			if r.flags&flagBatchEnd == 0 {
				continue
			}
			for _, e := range pending {
				if err := s.replayEntry(e.index, e.pos); err != nil {
					return err
				}
			}
			if r.flags&flagHasCommit != 0 {
				s.commit.Store(r.commit)
			}
			pending, pendingFirst = pending[:0], -1
		case kindDeleteRange:
			s.applyDeleteRange(r.min, r.max)
		}
	}
	if pendingFirst >= 0 {
		// The tail is a batch without its last entry.
		if err := db.log.Truncate(pendingFirst); err != nil {
			return fmt.Errorf("raftstore: remove the incomplete batch at %d: %w", pendingFirst, err)
		}
	}
	for _, s := range db.groups {
		if err := s.checkRecovered(); err != nil {
			return err
		}
	}
	return nil
}

// addRecovered opens a group found during recovery.
func (db *DB) addRecovered(group uint64) error {
	if _, ok := db.groups[group]; ok {
		return nil
	}
	if len(db.groups) >= maxGroups {
		return fmt.Errorf("%w: more than %d groups", ErrCorrupt, maxGroups)
	}
	if !db.stable.hasGroup(group) {
		if err := db.stable.set(group, nil, nil); err != nil {
			return err
		}
	}
	s, err := db.openGroup(group)
	if err != nil {
		return err
	}
	db.groups[group] = s
	return nil
}

// replayEntry applies one recovered entry: the entry at index lives at pos
// and nothing after index survives. Applied in commit-log order on top of
// the checkpointed indexes, replay ends in the state the writes left.
func (s *Store) replayEntry(index uint64, pos int64) error {
	if err := s.ensureIndexFiles(index, index); err != nil {
		return err
	}
	s.files.Load().find(index).store(index, pos)
	first, last := s.first.Load(), s.last.Load()
	if last == 0 || index < first {
		s.first.Store(index)
	}
	s.last.Store(index)
	return nil
}

// checkRecovered checks that the group's first and last entries can be
// read, and drops index files below the first.
func (s *Store) checkRecovered() error {
	first, last := s.first.Load(), s.last.Load()
	if last == 0 {
		s.dropIndexFiles(func(*indexFile) bool { return true })
		return nil
	}
	keepFrom := fileBase(first)
	s.dropIndexFiles(func(f *indexFile) bool { return f.base < keepFrom })
	var l raft.Log
	for _, i := range []uint64{first, last} {
		if err := s.GetLog(i, &l); err != nil {
			return fmt.Errorf("raftstore: group %d (first %d, last %d) after recovery: %w", s.group, first, last, err)
		}
	}
	return nil
}
