package raftstore_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/commitlog"
	"github.com/raftlog/raftlog/raftstore"
)

// isCorrupt reports whether err matches both raftstore.ErrCorrupt and
// commitlog.ErrCorrupt and names want.
func isCorrupt(err error, want string) bool {
	return errors.Is(err, raftstore.ErrCorrupt) && errors.Is(err, commitlog.ErrCorrupt) && strings.Contains(err.Error(), want)
}

// Every corruption of the commit log an embedder can get from raftstore
// matches raftstore.ErrCorrupt, and commitlog.ErrCorrupt as before, with
// the commit log's text naming the file and offset: a record that fails
// its checksum in GetLog, in Size's samples and when OpenDB reads a group's
// last entry; a commit log whose checkpoint is gone in OpenDB, Inspect and
// CutLog.
func TestErrCorruptMatchesCommitLogCorruption(t *testing.T) {
	dir := repairDB(t)
	in, pos := inspect(t, dir)
	// Size samples 16 of group 1's entries 1..100 evenly: 53 is one.
	path, off := damageAt(t, in, pos[[2]uint64{1, 53}])
	where := fmt.Sprintf("%s at offset %d", path, off)

	db, err := raftstore.OpenDB(dir, repairOpts)
	if err != nil {
		t.Fatal(err)
	}
	s1, _ := db.Store(1)
	var l raft.Log
	if err := s1.GetLog(53, &l); !isCorrupt(err, where) {
		t.Errorf("GetLog(53) = %v, want an error matching raftstore.ErrCorrupt and commitlog.ErrCorrupt naming %s", err, where)
	}
	if _, err := s1.Size(); !isCorrupt(err, where) {
		t.Errorf("Size() = %v, want an error matching raftstore.ErrCorrupt and commitlog.ErrCorrupt naming %s", err, where)
	}
	if err := s1.GetLog(54, &l); err != nil {
		t.Errorf("GetLog(54), next to the damage: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// The last entry of a group is read by OpenDB.
	path, off = damageAt(t, in, pos[[2]uint64{1, 100}])
	where = fmt.Sprintf("%s at offset %d", path, off)
	if db, err := raftstore.OpenDB(dir, repairOpts); !isCorrupt(err, where) {
		if err == nil {
			db.Close()
		}
		t.Errorf("OpenDB with group 1's last entry damaged = %v, want an error matching both ErrCorrupts naming %s", err, where)
	}

	cp := filepath.Join(dir, "log", "checkpoint")
	if err := os.Remove(cp); err != nil {
		t.Fatal(err)
	}
	if db, err := raftstore.OpenDB(dir, repairOpts); !isCorrupt(err, cp) {
		if err == nil {
			db.Close()
		}
		t.Errorf("OpenDB without the checkpoint = %v, want an error matching both ErrCorrupts naming %s", err, cp)
	}
	if _, err := raftstore.Inspect(dir, repairOpts, nil); !isCorrupt(err, "checkpoint") {
		t.Errorf("Inspect without the checkpoint = %v, want an error matching both ErrCorrupts", err)
	}
	if err := raftstore.CutLog(dir, repairOpts, 0); !isCorrupt(err, "checkpoint") {
		t.Errorf("CutLog without the checkpoint = %v, want an error matching both ErrCorrupts", err)
	}
}
