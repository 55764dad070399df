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

// ixCheckSizes checks the index files of group g, whose last entry is
// last: on disk, every slot up to indexRoom past last exists, and each
// file is at most twice as long as the slots it must hold, in whole pages.
func ixCheckSizes(t *testing.T, db *DB, g, last uint64) {
	t.Helper()
	sizes := ixFileSizes(t, db, g)
	end := last + indexRoom
	for b := fileBase(last); b <= end; b += indexSlotsPerFile {
		got, ok := sizes[indexFileName(b)]
		need := (min(end, b+indexSlotsPerFile-1) - b + 1) * indexSlotSize
		limit := min(2*(need+indexPageSize-1)/indexPageSize*indexPageSize, indexFileSize)
		if !ok || uint64(got) < need || uint64(got) > limit || got%indexPageSize != 0 {
			t.Fatalf("last %d: index file %s is %d bytes (present %v), want whole pages from %d to %d bytes (all files: %v)", last, indexFileName(b), got, ok, need, limit, sizes)
		}
	}
}

// TestIndexFileGrows checks that a group of a few entries has one index
// file of 20 KiB (its slots and the room past them), not 512 KiB, that
// the file grows as entries further on are stored, up to 512 KiB, with
// the room always on disk, across the end of the file, and that every
// entry stays readable across crashes at every size (with and without a
// checkpoint before).
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
			if got := ixFileSizes(t, db, 1); len(got) != 1 || got[indexFileName(0)] != 20<<10 {
				t.Fatalf("index files of a group of 5 entries: %v, want one of 20 KiB", got)
			}
			for round, upTo := range []uint64{511, 512, 600, 5000, 40000, indexSlotsPerFile - indexRoom - 1, indexSlotsPerFile - indexRoom, indexSlotsPerFile - 1, indexSlotsPerFile + 3} {
				for m.last() < upTo {
					crStore(t, s, m, ctEntries(m.last()+1, int(min(upTo-m.last(), 4096)), 1, 1))
				}
				ixCheckSizes(t, db, 1, upTo)
				_, second := ixFileSizes(t, db, 1)[indexFileName(indexSlotsPerFile)]
				if want := upTo+indexRoom >= indexSlotsPerFile; second != want {
					t.Fatalf("up to %d: the second index file exists: %v, want %v", upTo, second, want)
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
			if got := ixFileSizes(t, db, 1); got[indexFileName(0)] != indexFileSize {
				t.Fatalf("index files past the first's end: %v", got)
			}
			db.Close()
		})
	}
}

// TestIndexFileGrowFails fails the extension of an index file that must
// grow for the entries stored: StoreLogs fails and writes nothing, the DB
// goes on (nothing is in doubt), and the next StoreLogs grows the file.
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
	// Past the 2,560 slots of the first file (20 KiB).
	fs.Inject(faultfs.Fault{Op: faultfs.OpAllocate, Path: "/" + indexDirName + "/"})
	if err := s.StoreLogs(ctEntries(301, 2400, 1, 1)); err == nil {
		t.Fatal("StoreLogs that had to grow an index file whose extension fails returned nil")
	}
	if err := db.Err(); err != nil {
		t.Fatalf("a failed extension of an index file failed the DB: %v", err)
	}
	if err := ctCheckStore(s, m); err != nil {
		t.Fatal(err)
	}
	crStore(t, s, m, ctEntries(301, 2400, 1, 1))
	if err := ctCheckStore(s, m); err != nil {
		t.Fatal(err)
	}
	ixCheckSizes(t, db, 1, m.last())
}
