package raftstore

import (
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/commitlog"
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
	db.logCommitLog(db.log.Recovery())
	inc := db.incarnations()
	for _, g := range db.stable.groups() {
		if err := db.addRecovered(g); err != nil {
			return err
		}
	}
	skipBelow := map[uint64]int64{} // a group's records below are in its state
	for _, st := range states {
		if !inc.state(st) {
			continue // of a dropped incarnation of the group
		}
		if err := db.addRecovered(st.group); err != nil {
			return err
		}
		skipBelow[st.group] = st.from
		replayFrom = min(replayFrom, st.from)
		s := db.groups[st.group]
		s.first.Store(st.first)
		s.last.Store(st.last)
		s.commit.Store(st.commit)
	}

	// Replay the tail into per-group states in memory first: the index
	// files on disk may already reflect deletions newer than the
	// checkpoint, so they are arranged only once the final range of each
	// group is known.
	replays := map[uint64]*groupReplay{}
	replayOf := func(g uint64) (*groupReplay, error) {
		if r, ok := replays[g]; ok {
			return r, nil
		}
		if err := db.addRecovered(g); err != nil {
			return nil, err
		}
		s := db.groups[g]
		r := &groupReplay{first: s.first.Load(), last: s.last.Load(), commit: s.commit.Load()}
		replays[g] = r
		return r, nil
	}
	from := max(replayFrom, db.log.First())
	it := db.log.NewIterator(from)
	defer it.Close()
	var (
		pending      []indexPos
		pendingGroup uint64
		pendingFirst int64 = -1
		replayed     int   // records applied, entries and deletions
		dropped      int   // records of dropped groups passed over
	)
	for {
		rec, err := it.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return corruptAs(fmt.Errorf("raftstore: replay from %d: %w", from, err))
		}
		r, err := decodeRecord(rec.Payload)
		if err != nil {
			return fmt.Errorf("%w: commit-log record at %d: %v", ErrCorrupt, rec.Position, err)
		}
		if rec.Position < skipBelow[r.group] {
			continue // the checkpointed state already holds it
		}
		if !inc.record(r.group, rec.Position) {
			dropped++
			continue // of a dropped incarnation of the group
		}
		if pendingFirst >= 0 && (r.kind != kindEntry || r.group != pendingGroup) {
			return fmt.Errorf("%w: commit-log record at %d interrupts the batch of group %d that starts at %d", ErrCorrupt, rec.Position, pendingGroup, pendingFirst)
		}
		g, err := replayOf(r.group)
		if err != nil {
			return err
		}
		replayed++
		switch r.kind {
		case kindEntry:
			if pendingFirst < 0 {
				pendingFirst, pendingGroup = rec.Position, r.group
			}
			pending = append(pending, indexPos{r.log.Index, rec.Position})
			if r.flags&flagBatchEnd == 0 {
				continue
			}
			for _, e := range pending {
				g.entry(e)
			}
			if r.flags&flagHasCommit != 0 {
				g.commit = r.commit
			}
			pending, pendingFirst = pending[:0], -1
		case kindDeleteRange:
			g.deleteRange(r.min, r.max)
		}
	}
	if replayed > 0 || dropped > 0 {
		db.opts.Logger.Info("replayed the commit log past the checkpoint into the indexes",
			"dir", db.dir, "from", from, "records", replayed, "groups", len(replays), "dropped_group_records", dropped)
	}
	if pendingFirst >= 0 {
		// The tail is a batch without its last entry.
		if err := db.log.Truncate(pendingFirst); err != nil {
			return corruptAs(fmt.Errorf("raftstore: remove the incomplete batch at %d: %w", pendingFirst, err))
		}
		db.opts.Logger.Info("removed a batch the crash cut short",
			"dir", db.dir, "group", pendingGroup, "position", pendingFirst, "entries", len(pending),
			"indexes", fmt.Sprintf("%d..%d", pending[0].index, pending[len(pending)-1].index))
	}
	for g, r := range replays {
		slots, err := db.groups[g].applyReplay(r)
		if err != nil {
			return err
		}
		db.opts.Logger.Info("rebuilt the index of a group from the commit log",
			"dir", db.dir, "group", g, "slots", slots, "first", r.first, "last", r.last, "commit", r.commit)
	}
	for _, s := range db.groups {
		if err := s.checkRecovered(); err != nil {
			return err
		}
	}
	if err := db.clampFloors(); err != nil {
		return err
	}
	return db.removeStaleIndexDirs()
}

// indexPos is a replayed entry: its raft index and commit-log position.
type indexPos struct {
	index uint64
	pos   int64
}

// groupReplay is a group's indexes while recovery replays the tail, starting
// from the checkpointed ones. Entries and deletions are applied in
// commit-log order; each sets the range absolutely, so replaying records
// the checkpoint already reflected ends in the same state.
type groupReplay struct {
	first, last, commit uint64
	entries             []indexPos // in commit-log order; later ones win
}

// entry applies a stored entry: it lives at pos and nothing after its
// index survives.
func (g *groupReplay) entry(e indexPos) {
	if g.last == 0 || e.index < g.first {
		g.first = e.index
	}
	g.last = e.index
	g.entries = append(g.entries, e)
}

// deleteRange applies DeleteRange(lo, hi) as Store.applyDeleteRange does.
func (g *groupReplay) deleteRange(lo, hi uint64) {
	g.first, g.last, g.commit = deletedRange(g.first, g.last, g.commit, lo, hi)
}

// deletedRange returns the first, last and commit index left after
// DeleteRange(lo, hi) of [first, last].
func deletedRange(first, last, commit, lo, hi uint64) (uint64, uint64, uint64) {
	if last == 0 || hi < first || lo > last || lo > hi {
		return first, last, commit
	}
	switch {
	case lo <= first && hi >= last:
		return 0, 0, commit
	case lo <= first:
		return hi + 1, last, commit
	default:
		return first, lo - 1, min(commit, lo-1)
	}
}

// applyReplay arranges the index files for the replayed range and stores
// the replayed positions; it returns how many slots it stored.
func (s *Store) applyReplay(r *groupReplay) (int, error) {
	s.last.Store(0) // no range yet: ensureIndexFiles may rearrange freely
	slots := 0
	if r.last == 0 {
		s.dropIndexFiles(func(*indexFile) bool { return true })
	} else {
		// Keep the files of the range and of the room past it (files
		// created ahead: on a full disk they could not be created again).
		lo, hi := fileBase(r.first), fileBase(roomEnd(r.last))
		s.dropIndexFiles(func(f *indexFile) bool { return f.base < lo || f.base > hi })
		if err := s.ensureIndexFiles(r.first, r.last); err != nil {
			return 0, err
		}
		files := s.files.Load()
		for _, e := range r.entries {
			if e.index >= r.first && e.index <= r.last {
				files.find(e.index).store(e.index, e.pos)
				slots++
			}
		}
	}
	s.first.Store(r.first)
	s.last.Store(r.last)
	s.commit.Store(r.commit)
	return slots, nil
}

// logCommitLog logs what opening the commit log found and did.
func (db *DB) logCommitLog(info commitlog.RecoveryInfo) {
	lg := db.opts.Logger
	switch {
	case info.New:
		lg.Info("created a new store", "dir", db.dir)
	case !info.Crashed:
		lg.Info("opened a store closed cleanly", "dir", db.dir, "checkpoint", info.Checkpoint, "end", info.End)
	default:
		lg.Info("opened a store that was not closed cleanly: scanned the commit log from the checkpoint",
			"dir", db.dir, "checkpoint", info.Checkpoint, "from", info.ScannedFrom, "synced", info.Synced, "records", info.Records, "end", info.End)
		if info.Torn {
			lg.Info("cut off a record torn by the crash, and everything after it",
				"dir", db.dir, "position", info.End, "reason", info.Stop)
		}
	}
	if len(info.Removed) > 0 {
		lg.Info("removed files a crash left behind", "dir", db.dir, "files", info.Removed)
	}
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

// checkRecovered checks that the group's first and last entries can be
// read, and drops index files below the first and past the room after the
// last (left by a deletion of the tail).
func (s *Store) checkRecovered() error {
	first, last := s.first.Load(), s.last.Load()
	if last == 0 {
		s.dropIndexFiles(func(*indexFile) bool { return true })
		return nil
	}
	lo, hi := fileBase(first), fileBase(roomEnd(last))
	s.dropIndexFiles(func(f *indexFile) bool { return f.base < lo || f.base > hi })
	var l raft.Log
	for _, i := range []uint64{first, last} {
		if err := s.GetLog(i, &l); err != nil {
			return fmt.Errorf("raftstore: group %d (first %d, last %d) after recovery: %w", s.group, first, last, err)
		}
	}
	return nil
}
