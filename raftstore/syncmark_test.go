package raftstore_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/commitlog"
	"github.com/raftlog/raftlog/commitlog/faultfs"
	"github.com/raftlog/raftlog/raftstore"
)

// TestDamageSyncedAfterCheckpoint is an embedder's tryout: entries stored
// (synced) after the last checkpoint, the process killed, then one byte of
// an entry damaged. The store used to open and cut that entry and every one
// after it, in every group, as a write torn by the crash, with an INFO line
// and nothing in Inspect. Now OpenDB refuses, naming the file and offset;
// Inspect reports the damage and where to cut; after CutLog every entry
// before the damaged batch reads back and the store takes new entries.
func TestDamageSyncedAfterCheckpoint(t *testing.T) {
	fs := faultfs.New(11)
	opts := &raftstore.Options{SegmentSize: 64 << 10, CheckpointInterval: time.Hour, FS: fs}
	const dir = "/db"
	db, err := raftstore.OpenDB(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	s1, _ := db.Store(1)
	s2, _ := db.Store(2)
	if err := s1.SetUint64([]byte("CurrentTerm"), 4); err != nil {
		t.Fatal(err)
	}
	data := func(i uint64) []byte { return []byte(strings.Repeat(fmt.Sprint(i), 30)) }
	for b := range 12 {
		var batch []*raft.Log
		for i := 1; i <= 10; i++ {
			idx := uint64(b*10 + i)
			batch = append(batch, &raft.Log{Index: idx, Term: 4, Type: raft.LogCommand, Data: data(idx)})
		}
		if err := s1.StoreLogs(batch); err != nil {
			t.Fatal(err)
		}
		if err := s2.StoreLog(&raft.Log{Index: uint64(b + 1), Term: 4, Data: []byte("two")}); err != nil {
			t.Fatal(err)
		}
	}
	// The process dies: the page cache survives, no checkpoint since Open.
	fs = fs.CrashKeepAll()
	db.Close() // fails on the crashed file system; releases the old one
	opts.FS = fs

	pos := map[uint64]int64{}
	in, err := raftstore.Inspect(dir, opts, func(g uint64, p int64, l *raft.Log) {
		if g == 1 {
			pos[l.Index] = p
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if in.Damage != nil || len(pos) != 120 {
		t.Fatalf("before the damage: damage %v, %d entries of group 1", in.Damage, len(pos))
	}
	path, off := in.Log.Locate(pos[55])
	f, err := fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	at := off + commitlog.HeaderSize + 20
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
	f.Sync()
	f.Close()

	if db, err := raftstore.OpenDB(dir, opts); err == nil {
		s1, _ := db.Store(1)
		last, _ := s1.LastIndex()
		db.Close()
		t.Fatalf("OpenDB succeeded with a synced entry damaged; group 1 ends at %d of 120", last)
	} else if !errors.Is(err, commitlog.ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("%s at offset %d", path, off)) {
		t.Fatalf("OpenDB: %v, want ErrCorrupt naming %s at offset %d", err, path, off)
	}

	in, err = raftstore.Inspect(dir, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if in.Damage == nil || in.Damage.Path != path || in.Damage.Offset != off || in.Harmless {
		t.Fatalf("Inspect: damage %+v (harmless %v), want %s offset %d", in.Damage, in.Harmless, path, off)
	}
	if in.Cut != pos[51] {
		t.Fatalf("Inspect: cut at %d, want the start of the batch 51..60 at %d", in.Cut, pos[51])
	}
	if g1 := in.Group(1); g1.KeptLast != 50 || g1.CutFirst != 51 || g1.CutLast != 120 {
		t.Fatalf("Inspect: group 1 %+v", g1)
	}
	if err := raftstore.CutLog(dir, opts, in.Cut); err != nil {
		t.Fatal(err)
	}
	db, err = raftstore.OpenDB(dir, opts)
	if err != nil {
		t.Fatalf("OpenDB after CutLog: %v", err)
	}
	defer db.Close()
	s1, _ = db.Store(1)
	if last, _ := s1.LastIndex(); last != 50 {
		t.Fatalf("group 1 ends at %d after the cut, want 50", last)
	}
	var l raft.Log
	for i := uint64(1); i <= 50; i++ {
		if err := s1.GetLog(i, &l); err != nil || string(l.Data) != string(data(i)) {
			t.Fatalf("GetLog(%d) after the cut: %v", i, err)
		}
	}
	if term, _ := s1.GetUint64([]byte("CurrentTerm")); term != 4 {
		t.Fatalf("CurrentTerm %d after the cut, want 4", term)
	}
	if err := s1.StoreLogs([]*raft.Log{{Index: 51, Term: 5, Data: []byte("new")}}); err != nil {
		t.Fatal(err)
	}
}
