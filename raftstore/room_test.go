package raftstore

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/commitlog/faultfs"
)

// Tests of the room a group keeps in its index files past its last entry
// (indexRoom, index.go): with the disk full, a group stores indexRoom more
// entries wherever in its index files the disk filled.

// rmOptions are the options of the room tests: crOptions with segments of
// 1 MiB, so that the commit log has room for a few thousand small entries
// when the disk fills (it prepares its next segment once the active one
// is half full) and the index is what runs out. The tests that do not
// crash use AsyncFlush: faultfs copies a file's contents at each sync,
// and thousands of syncs of a 1 MiB segment take most of a minute under
// the race detector.
func rmOptions(fs *faultfs.FS, flush FlushMode) *Options {
	opts := crOptions(fs, flush)
	opts.SegmentSize = 1 << 20
	return opts
}

// rmOpen opens a DB with rmOptions over fs, in sync mode, and closes it
// when the test ends.
func rmOpen(t *testing.T, fs *faultfs.FS) *DB {
	t.Helper()
	db, err := OpenDB(crDir, rmOptions(fs, SyncFlush))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// rmDiskFull makes the disk of fs full (faultfs.NoSpace), for every file
// of the DB.
func rmDiskFull(fs *faultfs.FS) {
	for _, f := range faultfs.NoSpace(crDir + "/") {
		fs.Inject(f)
	}
}

// rmRoom returns how many entries past its last one s has index slots
// for, in the files it holds.
func rmRoom(s *Store) uint64 {
	files := *s.files.Load()
	last := s.last.Load()
	i := last + 1
	for {
		f := files.find(i)
		if f == nil || i-f.base >= f.slots() {
			return i - last - 1
		}
		i = f.base + f.slots()
	}
}

// rmStoreTo stores entries (in batches) until the group's last index is
// at least atLeast. With step set, it goes on to the worst moment for the
// disk to fill: the room left is exactly indexRoom, and the next entry
// makes StoreLogs take a step ahead (grow a file or create the next one).
func rmStoreTo(t *testing.T, s *Store, m *ctModel, atLeast uint64, step bool) {
	t.Helper()
	for m.last() < atLeast {
		crStore(t, s, m, ctEntries(m.last()+1, int(min(atLeast-m.last(), 4096)), 1, 1))
	}
	room := rmRoom(s)
	if room < indexRoom {
		t.Fatalf("last %d: room for %d entries, want at least %d", m.last(), room, indexRoom)
	}
	if !step {
		return
	}
	if room > indexRoom {
		crStore(t, s, m, ctEntries(m.last()+1, int(room-indexRoom), 1, 1))
	}
	if room := rmRoom(s); room != indexRoom {
		t.Fatalf("last %d: room for %d entries, want exactly %d before a step", m.last(), room, indexRoom)
	}
}

// rmIsNoSpace checks err is the failure of a StoreLogs of index for lack
// of index slots: ENOSPC, naming the group and the entry.
func rmIsNoSpace(t *testing.T, err error, index uint64) {
	t.Helper()
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "group 1") || !strings.Contains(err.Error(), fmt.Sprint(index)) {
		t.Fatalf("StoreLogs of %d past the room on a full disk: %v, want an error matching syscall.ENOSPC naming group 1 and the entry", index, err)
	}
}

// TestIndexRoomOnFullDisk fills the disk at the worst moment, just before
// a group's StoreLogs takes a step ahead in its index files: before a
// file grows, before the next file is created at the end of a 512 KiB
// file (index 65,536), and before the file created ahead grows; and at
// the last slot of a file (no room at all in it). The group
// still stores indexRoom entries, one StoreLogs each; the next fails with
// ENOSPC, failing neither the DB nor anything stored; a trim goes
// through; the DB reopens with everything while index files still cannot
// be created or extended; and once
// there is space again the group stores on and has its room back.
func TestIndexRoomOnFullDisk(t *testing.T) {
	for _, c := range []struct {
		name    string
		atLeast uint64
		step    bool // on to the worst moment past atLeast (rmStoreTo)
		// next tells whether the next file exists when the disk fills.
		next bool
	}{
		{"first growth of a new group", 1, true, false},
		{"growth inside a file", 30_000, true, false},
		{"next file at the end of a file", indexSlotsPerFile - indexRoom - 600, true, false},
		{"last slot of a file", indexSlotsPerFile - 1, false, true},
		{"growth of the file created ahead", indexSlotsPerFile - indexRoom, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := faultfs.New(7)
			db, err := OpenDB(crDir, rmOptions(fs, AsyncFlush))
			if err != nil {
				t.Fatal(err)
			}
			s, _ := db.Store(1)
			m := &ctModel{}
			rmStoreTo(t, s, m, c.atLeast, c.step)
			if _, ok := ixFileSizes(t, db, 1)[indexFileName(indexSlotsPerFile)]; ok != c.next {
				t.Fatalf("last %d: the second index file exists: %v, want %v", m.last(), ok, c.next)
			}
			full := m.last()
			rmDiskFull(fs)

			for range indexRoom {
				if err := s.StoreLogs(ctEntries(m.last()+1, 1, 1, 1)); err != nil {
					t.Fatalf("disk full at %d: StoreLogs of %d: %v", full, m.last()+1, err)
				}
				m.store(ctEntries(m.last()+1, 1, 1, 1), 0)
			}
			err = s.StoreLogs(ctEntries(m.last()+1, 1, 1, 1))
			rmIsNoSpace(t, err, m.last()+1)
			if err := db.Err(); err != nil {
				t.Fatalf("a StoreLogs past the room failed the DB: %v", err)
			}
			if err := ctCheckStore(s, m); err != nil {
				t.Fatalf("after a StoreLogs past the room: %v", err)
			}
			var l raft.Log
			if err := s.GetLog(m.last()+1, &l); err != raft.ErrLogNotFound {
				t.Fatalf("GetLog past the last index: %v, want raft.ErrLogNotFound", err)
			}

			// A trim frees space: it needs none in the index.
			crDelete(t, s, m, 0, m.first+100)
			if err := db.Close(); err != nil {
				t.Fatalf("close on a full disk: %v", err)
			}
			// The commit log does not open on a disk this full (it
			// creates its marker file); the index files do.
			fs.ClearFaults()
			for _, f := range faultfs.NoSpace(crDir + "/" + indexDirName + "/") {
				fs.Inject(f)
			}
			if db, err = OpenDB(crDir, rmOptions(fs, AsyncFlush)); err != nil {
				t.Fatalf("reopen with no space for index files: %v", err)
			}
			s, _ = db.Store(1)
			if err := ctCheckStore(s, m); err != nil {
				t.Fatalf("reopened with no space for index files: %v", err)
			}
			rmIsNoSpace(t, s.StoreLogs(ctEntries(m.last()+1, 1, 1, 1)), m.last()+1)

			fs.ClearFaults()
			crStore(t, s, m, ctEntries(m.last()+1, 1, 1, 1))
			if room := rmRoom(s); room < indexRoom {
				t.Fatalf("with space again: room for %d entries, want at least %d", room, indexRoom)
			}
			ixCheckSizes(t, db, 1, m.last())
			if err := ctCheckStore(s, m); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestIndexRoomAheadFile covers the index file created ahead of need,
// which holds no slot yet: a crash, with or without a checkpoint, leaves
// the group's indexes as they were (the file is never read as entries,
// and keeps its place, past the last); a crash that loses its length,
// then no space to extend it at open, still opens the DB (the file opens
// with no slot, and grows when entries reach it and there is space); a
// deletion of the tail keeps it; DropGroup removes it with the group.
func TestIndexRoomAheadFile(t *testing.T) {
	for _, checkpoint := range []bool{false, true} {
		for _, crash := range []string{"crash", "drop-all", "keep-all"} {
			t.Run(fmt.Sprintf("checkpoint=%v/%s", checkpoint, crash), func(t *testing.T) {
				fs := faultfs.New(3)
				db, err := OpenDB(crDir, rmOptions(fs, SyncFlush))
				if err != nil {
					t.Fatal(err)
				}
				s, _ := db.Store(1)
				m := &ctModel{}
				rmStoreTo(t, s, m, indexSlotsPerFile-indexRoom, true)
				ahead := indexFileName(indexSlotsPerFile)
				if _, ok := ixFileSizes(t, db, 1)[ahead]; !ok {
					t.Fatalf("last %d: no index file created ahead", m.last())
				}
				if checkpoint {
					if err := db.log.Checkpoint(); err != nil {
						t.Fatal(err)
					}
				}
				switch crash {
				case "crash":
					fs = fs.Crash()
				case "drop-all":
					fs = fs.CrashDropAll()
				default:
					fs = fs.CrashKeepAll()
				}
				db.Close()
				// No space for the file ahead at open (the others may need
				// extending to rebuild what the crash lost).
				for _, f := range faultfs.NoSpace(db.groupDir(1) + "/" + ahead) {
					fs.Inject(f)
				}
				if db, err = OpenDB(crDir, rmOptions(fs, SyncFlush)); err != nil {
					t.Fatalf("reopen after a crash, with no space for the file ahead: %v", err)
				}
				s, _ = db.Store(1)
				if err := ctCheckStore(s, m); err != nil {
					t.Fatalf("after a crash: %v", err)
				}
				if _, ok := ixFileSizes(t, db, 1)[ahead]; !ok {
					t.Fatalf("the index file created ahead is gone after a crash")
				}
				// Up to the end of the first file: slots that survived.
				crStore(t, s, m, ctEntries(m.last()+1, int(indexSlotsPerFile-1-m.last()), 1, 1))
				if room := rmRoom(s); room == 0 {
					// The crash lost the length of the file ahead, and
					// the full disk kept open from extending it.
					rmIsNoSpace(t, s.StoreLogs(ctEntries(m.last()+1, 1, 1, 1)), m.last()+1)
				} else if crash == "drop-all" {
					t.Fatalf("room for %d entries in the file created ahead after a crash that kept only what was synced, want none", room)
				}
				fs.ClearFaults()
				crStore(t, s, m, ctEntries(m.last()+1, 10, 1, 1)) // into the file created ahead
				ixCheckSizes(t, db, 1, m.last())

				// Deleting the tail back into the first file keeps the
				// second, and every later entry goes on from there.
				crDelete(t, s, m, indexSlotsPerFile-5, m.last())
				if _, ok := ixFileSizes(t, db, 1)[ahead]; !ok {
					t.Fatalf("a deletion of the tail removed the index file past it")
				}
				crStore(t, s, m, ctEntries(m.last()+1, 20, 2, 1))
				if err := ctCheckStore(s, m); err != nil {
					t.Fatal(err)
				}

				if err := db.DropGroup(1); err != nil {
					t.Fatal(err)
				}
				if _, err := fs.ReadDir(db.groupDir(1)); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("index directory of a dropped group: %v, want it gone", err)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestIndexRoomNoStepDue: while the room is there, the check StoreLogs
// makes before it writes allocates nothing and touches no file (it
// publishes no new run of files).
func TestIndexRoomNoStepDue(t *testing.T) {
	db, err := OpenDB(crDir, rmOptions(faultfs.New(1), AsyncFlush))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, _ := db.Store(1)
	m := &ctModel{}
	crStore(t, s, m, ctEntries(1, 5, 1, 1))
	s.wmu.Lock()
	defer s.wmu.Unlock()
	files := s.files.Load()
	allocs := testing.AllocsPerRun(100, func() {
		if err := s.ensureIndexFiles(6, 69); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 || s.files.Load() != files {
		t.Fatalf("with the room there: %v allocations, files published again: %v; want none", allocs, s.files.Load() != files)
	}
}

// TestIndexDirSyncFailureStopsDB: a group's first StoreLogs creates its
// first index file, and the directory sync that makes its name durable
// fails with EIO. The DB stops (Err wraps ErrFailed and the EIO), as it
// does for a failed sync of the commit log, and every later write fails:
// a node stops on that, where a follower that only ever staged
// snapshots on the failed disk used to keep running (a cluster-test soak
// found it still serving 20 s after its disk failed).
func TestIndexDirSyncFailureStopsDB(t *testing.T) {
	fs := faultfs.New(1)
	db := rmOpen(t, fs)
	s, err := db.Store(7)
	if err != nil {
		t.Fatal(err)
	}
	fs.Inject(faultfs.Fault{Op: faultfs.OpSyncDir, Path: db.groupDir(7), Sticky: true})
	if err := s.StoreLogs(ctEntries(1, 3, 1, 16)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("StoreLogs with the index directory's sync failing: %v, want EIO", err)
	}
	if err := db.Err(); !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("DB.Err after the failed directory sync: %v, want ErrFailed wrapping EIO", err)
	}
	fs.ClearFaults()
	other, err := db.Store(8)
	if err == nil {
		err = other.StoreLogs(ctEntries(1, 1, 1, 16))
	}
	if !errors.Is(err, ErrFailed) {
		t.Fatalf("a write to another group after the failure: %v, want ErrFailed", err)
	}
}

// TestIndexDirSyncNoSpace: a directory sync that fails for want of space
// is not a failure of the DB, like any other lack of space.
func TestIndexDirSyncNoSpace(t *testing.T) {
	fs := faultfs.New(1)
	db := rmOpen(t, fs)
	s, _ := db.Store(7)
	fs.Inject(faultfs.Fault{Op: faultfs.OpSyncDir, Path: db.groupDir(7), Err: syscall.ENOSPC})
	if err := s.StoreLogs(ctEntries(1, 3, 1, 16)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("StoreLogs with the index directory's sync out of space: %v, want ENOSPC", err)
	}
	if err := db.Err(); err != nil {
		t.Fatalf("DB.Err after a directory sync out of space: %v, want nil", err)
	}
	if err := s.StoreLogs(ctEntries(1, 3, 1, 16)); err != nil {
		t.Fatalf("StoreLogs once the space is back: %v", err)
	}
}
