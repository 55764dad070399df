package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/raftlog/raftlog/commitlog/vfs"
)

// A raft-boltdb store next to an empty DB.
//
// A service that moves from raft-boltdb to raftstore and forgets to
// migrate would start raft on an empty log: term 0, no configuration, no
// entries, while its old state sits in raft.db beside it. A node restarted
// so forgets its votes and its log, and a cluster that loses a quorum that
// way loses committed entries. OpenDB refuses that case instead.

// ErrBoltDBFound is returned by Open and OpenDB for a DB that holds no
// raft state (no entry, no stable key) next to a raft-boltdb store, a file
// named raft.db in its directory or the directory's parent: run Migrate
// first, or set Options.IgnoreBoltDB to start empty anyway.
var ErrBoltDBFound = errors.New("raftstore: a raft-boltdb store (raft.db) is next to an empty raftstore")

// boltDBName is the file name raft-boltdb users give their store.
const boltDBName = "raft.db"

// boltMagic is bbolt's magic number, at offset 16 of its first meta page
// after the page header, in the machine's byte order (little-endian on
// every platform raftstore supports).
const boltMagic = 0xED0CDAED

// findBoltDB returns the path of a bbolt file named raft.db in dir or its
// parent, or "". A file of that name that is not a bbolt file, or cannot
// be read, is not one.
func findBoltDB(fsys vfs.FS, dir string) string {
	for _, d := range []string{dir, filepath.Dir(filepath.Clean(dir))} {
		path := filepath.Join(d, boltDBName)
		f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
		if err != nil {
			continue
		}
		b := make([]byte, 20)
		_, err = f.ReadAt(b, 0)
		f.Close()
		if err == nil && binary.LittleEndian.Uint32(b[16:20]) == boltMagic {
			return path
		}
	}
	return ""
}

// hasNoLog reports whether dir holds no commit-log segment yet: opening
// it would create the DB.
func hasNoLog(fsys vfs.FS, dir string) bool {
	names, err := fsys.ReadDir(filepath.Join(dir, logDirName))
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	if err != nil {
		return false // let Open report it
	}
	for _, name := range names {
		if len(name) == 20 {
			return false
		}
	}
	return true
}

// holdsState reports whether any group of the DB holds an entry or a
// stable key. It runs inside OpenDB, after recovery.
func (db *DB) holdsState() bool {
	for g, s := range db.groups {
		if s.last.Load() != 0 || len(db.stable.keys(g)) > 0 {
			return true
		}
	}
	return false
}

// boltDBError returns the ErrBoltDBFound for the raft-boltdb file bolt next
// to the DB in dir.
func boltDBError(bolt, dir string) error {
	return fmt.Errorf("%w: %s is a raft-boltdb store and %s holds no raft state, so raft would start with an empty log and term 0: "+
		"copy the old store in with raftstore.Migrate first, or set Options.IgnoreBoltDB to start empty anyway", ErrBoltDBFound, bolt, dir)
}
