package raftstore

// Dropping a group, and telling a dropped incarnation of a group from one
// created again with the same id.
//
// A drop is durable at one point: the stable state's write that removes
// the group's keys and records its floor, the commit-log end when the
// drop began (stable.go). Every record of the group is below the floor,
// and is durable before the floor is written, so recovery passes over
// them, and over any checkpointed state of the group whose replay
// position is not above the floor: such a state was taken before the drop.
// A group created again with the same id keeps the floor, so its records
// (all at or past the floor) are told from the old incarnation's. Before
// that write a crash leaves the group whole; after it, the group is gone
// whatever else the crash kept (its index files are removed at the next
// open if the drop did not get to it).
//
// A floor is forgotten once nothing could mix the incarnations: the
// commit log's first segment starts at or past it (no record of the old
// incarnation remains) and a checkpoint written after the drop is durable
// (none older is read again). releaseSegments forgets them.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// ErrGroupDropped is returned by every call to a Store of a group that
// DB.DropGroup dropped (wrapped with the group's id). A Store that DB.Store
// returns for the same id afterwards is a new, empty group.
var ErrGroupDropped = errors.New("raftstore: group dropped")

// DropGroup removes a group and everything it holds, durably: its entries
// (which no longer keep any commit-log segment on disk: they go with
// their segments once no other group needs them), its stable keys, its
// index directory and its state in memory. The other groups go on working
// meanwhile. Once DropGroup returns, every call to a Store of the group
// fails with an error wrapping ErrGroupDropped, and DB.Store of the same
// id creates a new, empty group. A crash before it returns leaves the
// group either whole or dropped; a crash after, dropped, whatever the
// replay of the commit log finds, also when the id was created again.
//
// Shut down the group's raft first: raft calls the store until then, and
// its calls fail afterwards. Dropping a group the DB does not hold
// returns nil, so that a drop cut short by a crash can be repeated. An
// error other than ErrClosed means the DB failed (see Err) before the drop
// was durable: reopen it, and drop again.
func (db *DB) DropGroup(group uint64) error {
	db.mu.Lock()
	if db.closed.Load() {
		db.mu.Unlock()
		return ErrClosed
	}
	s, ok := db.groups[group]
	if !ok {
		db.mu.Unlock()
		return nil
	}
	err := db.dropLocked(s)
	db.mu.Unlock()
	if err != nil {
		return err
	}
	// The group held segments no other group needs: release them.
	if err := db.releaseSegments(); err != nil {
		return fmt.Errorf("raftstore: group %d dropped; releasing its segments: %w", group, err)
	}
	return nil
}

// dropLocked drops s; db.mu must be held.
func (db *DB) dropLocked(s *Store) error {
	if err := db.Err(); err != nil {
		return err
	}
	// No writer of the group is in progress, and none will write: every
	// record of it lies below the end read here.
	s.wmu.Lock()
	s.dropped.Store(true)
	floor := db.log.End()
	s.wmu.Unlock()
	// The records must be durable before the floor is: otherwise a crash
	// could leave a torn batch of the group below it, or lose the tail of
	// the log and put a later incarnation's records below it.
	if err := db.log.WaitDurable(floor); err != nil {
		return closedAs(fmt.Errorf("raftstore: drop group %d: %w", s.group, err))
	}
	if err := db.writeStable(func() error { return db.stable.drop(s.group, floor) }); err != nil {
		return fmt.Errorf("raftstore: drop group %d: %w", s.group, err)
	}
	// Durable from here. Readers still in GetLog finish before the files
	// close; later ones see dropped.
	s.rw.Lock()
	files := *s.files.Load()
	empty := indexFiles{}
	s.files.Store(&empty)
	s.rw.Unlock()
	closeIndexFiles(files)
	delete(db.groups, s.group)
	db.m.pinned(s.group, 0)
	if err := db.removeIndexDir(s.group); err != nil {
		// The group is dropped; the next open removes what is left.
		db.opts.Logger.Warn("dropped a group but could not remove its index directory", "dir", db.dir, "group", s.group, "error", err)
	}
	db.opts.Logger.Info("dropped a group", "dir", db.dir, "group", s.group, "floor", floor)
	return nil
}

// groupDir returns the index directory of group.
func (db *DB) groupDir(group uint64) string {
	return filepath.Join(db.dir, indexDirName, fmt.Sprintf("%020d", group))
}

// removeIndexDir removes the index directory of group and its files, and
// makes the removal durable.
func (db *DB) removeIndexDir(group uint64) error {
	dir := db.groupDir(group)
	names, err := db.fs.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := db.fs.Remove(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	if err := db.fs.Remove(dir); err != nil {
		return err
	}
	return db.fs.SyncDir(filepath.Join(db.dir, indexDirName))
}

// removeStaleIndexDirs removes the index directories of groups the DB does
// not hold: those of drops a crash cut short. Recovery calls it.
func (db *DB) removeStaleIndexDirs() error {
	names, err := db.fs.ReadDir(filepath.Join(db.dir, indexDirName))
	if err != nil {
		return fmt.Errorf("raftstore: read %s: %w", filepath.Join(db.dir, indexDirName), err)
	}
	for _, name := range names {
		g, err := strconv.ParseUint(name, 10, 64)
		if err != nil || len(name) != 20 {
			continue
		}
		if _, ok := db.groups[g]; ok {
			continue
		}
		if err := db.removeIndexDir(g); err != nil {
			return fmt.Errorf("raftstore: remove the index directory of dropped group %d: %w", g, err)
		}
		db.opts.Logger.Info("removed the index directory of a dropped group", "dir", db.dir, "group", g)
	}
	return nil
}

// incarnations tells the records and checkpointed states of the live
// incarnation of each group from those of dropped ones, by the floors of
// the stable state (see the comment at the top of the file).
type incarnations struct {
	live   func(group uint64) bool // the group has keys in the stable state
	floors stableFloors
}

func (db *DB) incarnations() incarnations {
	return incarnations{live: db.stable.hasGroup, floors: db.stable.floorsCopy()}
}

// record reports whether the record of group at pos belongs to its live
// incarnation, or to a group the stable state does not know (one of a DB
// of an older version, which recovery adds).
func (in incarnations) record(group uint64, pos int64) bool {
	at, ok := in.floors[group]
	return !ok || in.live(group) && pos >= at
}

// state reports whether a checkpointed state describes the live
// incarnation of its group. A state taken when the group was created
// again and had written nothing has the floor as its replay position; it
// is empty, as is the group replayed from the floor.
func (in incarnations) state(st groupState) bool {
	at, ok := in.floors[st.group]
	return !ok || in.live(st.group) && st.from > at
}

// clampFloors lowers every floor past the end of the commit log to the
// end, durably: after a repair cut the log (CutLog), records of a group
// created again are written below its floor, and must count as its own.
// Every record of a dropped incarnation is below the end.
func (db *DB) clampFloors() error {
	old := db.stable.floorsCopy()
	end := db.log.End()
	lower := stableFloors{}
	for g, at := range old {
		if at > end {
			lower[g] = end
		}
	}
	if len(lower) == 0 {
		return nil
	}
	if err := db.stable.setFloors(old, lower); err != nil {
		return err
	}
	db.opts.Logger.Info("lowered the floors of dropped groups to the end of the commit log", "dir", db.dir, "end", end, "groups", len(lower))
	return nil
}

// forgetFloors forgets the floors of before (a copy taken before a
// checkpoint that is now durable) that the commit log no longer reaches
// below: no record of a dropped incarnation remains, and no checkpoint
// that describes one will be read.
func (db *DB) forgetFloors(before stableFloors) error {
	first := db.log.First()
	gone := stableFloors{}
	for g, at := range before {
		if at <= first {
			gone[g] = -1
		}
	}
	if len(gone) == 0 {
		return nil
	}
	return db.writeStable(func() error { return db.stable.setFloors(before, gone) })
}
