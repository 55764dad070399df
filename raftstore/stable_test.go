package raftstore

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/raftlog/raftlog/commitlog/faultfs"
)

// openTwoGroups opens a DB on a new faultfs with groups 1 and 2.
func openTwoGroups(t *testing.T, flush FlushMode) (*faultfs.FS, *DB, *Store, *Store) {
	t.Helper()
	fs := faultfs.New(1)
	db, err := OpenDB(crDir, crOptions(fs, flush))
	if err != nil {
		t.Fatal(err)
	}
	s, err := db.Store(1)
	if err != nil {
		t.Fatal(err)
	}
	other, err := db.Store(2)
	if err != nil {
		t.Fatal(err)
	}
	return fs, db, s, other
}

// TestStableWriteKeepsItsLength checks the lengths of the stable files: a
// write that does not change the state's length (a new term, a new vote:
// raft's writes during an election) leaves the file's length alone,
// since a truncation, even to the same length, makes the fdatasync a
// journal commit; a write that shrinks the state cuts the file to it, and
// the state reads back whole after a crash.
func TestStableWriteKeepsItsLength(t *testing.T) {
	fs, db, s, other := openTwoGroups(t, SyncFlush)
	if err := other.Set([]byte("note"), make([]byte, 500)); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 1); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 2); err != nil { // both files hold this length now
		t.Fatal(err)
	}

	// Writes of the same length never truncate: with every truncation of
	// the stable files failing, they succeed.
	fs.Inject(faultfs.Fault{Op: faultfs.OpTruncate, Path: "/stable.", Sticky: true})
	for term := uint64(3); term <= 6; term++ {
		if err := s.SetUint64([]byte("CurrentTerm"), term); err != nil {
			t.Fatalf("SetUint64(CurrentTerm, %d), a write of the same length: %v", term, err)
		}
	}
	fs.ClearFaults()

	// A shrink cuts each file to its state as it is written.
	if err := db.DropGroup(2); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		path := filepath.Join(crDir, fmt.Sprintf("stable.%d", i))
		f, err := fs.OpenFile(path, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		size, err := f.Size()
		if err != nil {
			t.Fatal(err)
		}
		head := make([]byte, stableHeader)
		if _, err := f.ReadAt(head, 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if want := int64(stableHeader + binary.LittleEndian.Uint32(head[16:20]) + 4); size != want {
			t.Errorf("%s is %d bytes after the state shrank, want %d: the file was not cut", path, size, want)
		}
	}

	fs = fs.CrashDropAll()
	db.Close()
	db, err := OpenDB(crDir, crOptions(fs, SyncFlush))
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer db.Close()
	if s, err = db.Store(1); err != nil {
		t.Fatal(err)
	}
	if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 7 {
		t.Fatalf("CurrentTerm after the crash = %d, %v; want 7", v, err)
	}
}
