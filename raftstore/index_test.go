package raftstore

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/raftlog/raftlog/commitlog/faultfs"
)

// ixFileSizes returns the length of each index file of group g.
func ixFileSizes(t *testing.T, db *DB, g uint64) map[string]int64 {
	t.Helper()
	dir := db.groupDir(g)
	names, err := db.fs.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[string]int64{}
	for _, name := range names {
		f, err := db.fs.OpenFile(filepath.Join(dir, name), os.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		sizes[name], err = f.Size()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return sizes
}

// TestIndexFileGrows checks that a group of a few entries has one index
// file of a page, not 512 KiB, and that the file doubles as entries
// further on are stored, up to 512 KiB, while every entry stays readable,
// across crashes at every size (with and without a checkpoint before).
func TestIndexFileGrows(t *testing.T) {
	for _, checkpoint := range []bool{false, true} {
		t.Run(fmt.Sprintf("checkpoint=%v", checkpoint), func(t *testing.T) {
			fs := faultfs.New(4)
			opts := crOptions(fs, SyncFlush)
			db, err := OpenDB(crDir, opts)
			if err != nil {
				t.Fatal(err)
			}
			s, _ := db.Store(1)
			m := &ctModel{}
			crStore(t, s, m, ctEntries(1, 5, 1, 10))
			if got := ixFileSizes(t, db, 1); len(got) != 1 || got[indexFileName(0)] != minIndexFileSize {
				t.Fatalf("index files of a group of 5 entries: %v, want one of %d bytes", got, minIndexFileSize)
			}
			for round, upTo := range []uint64{511, 512, 600, 5000, 40000, indexSlotsPerFile - 1, indexSlotsPerFile + 3} {
				for m.last() < upTo {
					crStore(t, s, m, ctEntries(m.last()+1, int(min(upTo-m.last(), 4096)), 1, 1))
				}
				want := int64(indexFileSizeAhead(min(upTo, indexSlotsPerFile-1) + 1))
				if got := ixFileSizes(t, db, 1)[indexFileName(0)]; got != want {
					t.Fatalf("up to %d: the first index file is %d bytes, want %d", upTo, got, want)
				}
				if checkpoint {
					if err := db.log.Checkpoint(); err != nil {
						t.Fatal(err)
					}
				}
				switch round % 3 {
				case 0:
					fs = fs.Crash()
				case 1:
					fs = fs.CrashDropAll()
				default:
					fs = fs.CrashKeepAll()
				}
				db.Close()
				opts.FS = fs
				if db, err = OpenDB(crDir, opts); err != nil {
					t.Fatalf("up to %d: reopen: %v", upTo, err)
				}
				s, _ = db.Store(1)
				if err := ctCheckStore(s, m); err != nil {
					t.Fatalf("up to %d, after a crash: %v", upTo, err)
				}
			}
			if got := ixFileSizes(t, db, 1); got[indexFileName(0)] != indexFileSize || got[indexFileName(indexSlotsPerFile)] != minIndexFileSize {
				t.Fatalf("index files past the first's end: %v", got)
			}
			db.Close()
		})
	}
}

// TestIndexFileGrowFails fails the extension of an index file that must
// grow: StoreLogs fails and writes nothing, the DB goes on (nothing is in
// doubt), and the next StoreLogs grows the file.
func TestIndexFileGrowFails(t *testing.T) {
	fs := faultfs.New(1)
	db, err := OpenDB(crDir, crOptions(fs, SyncFlush))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, _ := db.Store(1)
	m := &ctModel{}
	crStore(t, s, m, ctEntries(1, 300, 1, 1))
	fs.Inject(faultfs.Fault{Op: faultfs.OpAllocate, Path: "/" + indexDirName + "/"})
	if err := s.StoreLogs(ctEntries(301, 220, 1, 1)); err == nil {
		t.Fatal("StoreLogs that had to grow an index file whose extension fails returned nil")
	}
	if err := db.Err(); err != nil {
		t.Fatalf("a failed extension of an index file failed the DB: %v", err)
	}
	if err := ctCheckStore(s, m); err != nil {
		t.Fatal(err)
	}
	crStore(t, s, m, ctEntries(301, 220, 1, 1))
	if err := ctCheckStore(s, m); err != nil {
		t.Fatal(err)
	}
}

// TestIndexFileGrowsAhead: an index file grows once three quarters of it
// are used, so that a disk that is full (its extension fails) stops no
// write while the file has slots left: a node whose disk filled can still
// store a trim.
func TestIndexFileGrowsAhead(t *testing.T) {
	fs := faultfs.New(1)
	db, err := OpenDB(crDir, crOptions(fs, SyncFlush))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, _ := db.Store(1)
	m := &ctModel{}
	crStore(t, s, m, ctEntries(1, 300, 1, 1))
	fs.Inject(faultfs.Fault{Op: faultfs.OpAllocate, Path: "/" + indexDirName + "/"})
	// Past three quarters of 512 slots: the growth ahead fails, the write
	// does not.
	crStore(t, s, m, ctEntries(301, 150, 1, 1))
	if got := ixFileSizes(t, db, 1)[indexFileName(0)]; got != minIndexFileSize {
		t.Fatalf("index file of %d bytes after a failed growth ahead, want %d", got, minIndexFileSize)
	}
	// The next write grows it ahead: 1,024 slots, room for a full disk.
	crStore(t, s, m, ctEntries(451, 10, 1, 1))
	if got := ixFileSizes(t, db, 1)[indexFileName(0)]; got != 2*minIndexFileSize {
		t.Fatalf("index file of %d bytes after 460 slots, want %d", got, 2*minIndexFileSize)
	}
	fs.Inject(faultfs.Fault{Op: faultfs.OpAllocate, Path: "/" + indexDirName + "/"})
	crStore(t, s, m, ctEntries(461, 300, 1, 1))
	if err := ctCheckStore(s, m); err != nil {
		t.Fatal(err)
	}
	if err := db.Err(); err != nil {
		t.Fatalf("a failed growth ahead failed the DB: %v", err)
	}
}
