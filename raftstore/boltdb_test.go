package raftstore

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// writeBoltFile writes the first page of a bbolt file (what raft-boltdb
// leaves as raft.db) at path.
func writeBoltFile(t *testing.T, path string) {
	t.Helper()
	page := make([]byte, 4096)
	binary.LittleEndian.PutUint32(page[16:20], boltMagic)
	binary.LittleEndian.PutUint32(page[20:24], 2) // bbolt's format version
	if err := os.WriteFile(path, page, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestOpenNextToBoltDB opens stores next to a raft-boltdb file, as a
// service that moves from raft-boltdb lays them out: an empty store is
// refused with ErrBoltDBFound, naming the file, unless IgnoreBoltDB is
// set; a store that holds raft state, or a raft.db that is no bbolt file,
// is opened.
func TestOpenNextToBoltDB(t *testing.T) {
	for _, tt := range []struct {
		name   string
		layout func(data string) (dir, bolt string) // where the store and raft.db go
	}{
		{"raft.db in the store's directory", func(data string) (string, string) {
			return data, filepath.Join(data, "raft.db")
		}},
		{"raft.db in the parent directory", func(data string) (string, string) {
			return filepath.Join(data, "raftstore"), filepath.Join(data, "raft.db")
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir, bolt := tt.layout(t.TempDir())
			writeBoltFile(t, bolt)
			_, err := Open(dir, nil)
			if !errors.Is(err, ErrBoltDBFound) || !strings.Contains(err.Error(), bolt) || !strings.Contains(err.Error(), "Migrate") {
				t.Fatalf("Open of a new store next to %s: %v, want ErrBoltDBFound naming the file and Migrate", bolt, err)
			}
			if _, err := os.Stat(filepath.Join(dir, logDirName)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the refused Open created %s: %v", filepath.Join(dir, logDirName), err)
			}
			if _, err := OpenDB(dir, nil); !errors.Is(err, ErrBoltDBFound) {
				t.Fatalf("OpenDB: %v, want ErrBoltDBFound", err)
			}

			// IgnoreBoltDB opens it (as Migrate's destination is opened);
			// while it stays empty, it is refused again without it.
			s, err := Open(dir, &Options{IgnoreBoltDB: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := Open(dir, nil); !errors.Is(err, ErrBoltDBFound) {
				t.Fatalf("Open of an existing empty store next to %s: %v, want ErrBoltDBFound", bolt, err)
			}

			// Once it holds raft state, the raft.db beside it is the old
			// copy, and it opens.
			s, err = Open(dir, &Options{IgnoreBoltDB: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.SetUint64([]byte("CurrentTerm"), 3); err != nil {
				t.Fatal(err)
			}
			s.Close()
			s, err = Open(dir, nil)
			if err != nil {
				t.Fatalf("Open of a store holding a term next to %s: %v", bolt, err)
			}
			s.Close()
		})
	}

	t.Run("entries alone count as state", func(t *testing.T) {
		data := t.TempDir()
		writeBoltFile(t, filepath.Join(data, "raft.db"))
		s, err := Open(data, &Options{IgnoreBoltDB: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Data: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
		s.Close()
		if s, err = Open(data, nil); err != nil {
			t.Fatal(err)
		}
		s.Close()
	})

	t.Run("a raft.db that is no bbolt file", func(t *testing.T) {
		data := t.TempDir()
		if err := os.WriteFile(filepath.Join(data, "raft.db"), []byte("not a bbolt file, long enough to read"), 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(data, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	})
}
