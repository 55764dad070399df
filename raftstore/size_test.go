package raftstore

import (
	"testing"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/commitlog"
)

// szRecordBytes returns the commit-log bytes of logs stored as one batch
// by group.
func szRecordBytes(group uint64, logs []*raft.Log) int64 {
	var n int64
	for i, l := range logs {
		flags := byte(0)
		if i == len(logs)-1 {
			flags = flagBatchEnd
		}
		n += commitlog.HeaderSize + int64(len(appendEntry(nil, group, l, flags, 0)))
	}
	return n
}

// TestStoreSize checks Store.Size: exact indexes and entry counts, bytes
// exact for entries of one size and close for entries of varied sizes,
// following stores and deletions, and after a reopen.
func TestStoreSize(t *testing.T) {
	dir := t.TempDir()
	db, err := OpenDB(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { db.Close() }()
	s, _ := db.Store(7)
	other, _ := db.Store(8)
	if sz, err := s.Size(); err != nil || sz != (GroupSize{}) {
		t.Fatalf("Size of an empty group = %+v, %v", sz, err)
	}
	// 1,000 entries of one size, between another group's.
	var want int64
	for i := 0; i < 10; i++ {
		logs := ctEntries(uint64(100*i+1), 100, 1, 1000)
		if err := s.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
		want += szRecordBytes(7, logs)
		if err := other.StoreLogs(ctEntries(uint64(i+1), 1, 1, 5000)); err != nil {
			t.Fatal(err)
		}
	}
	sz, err := s.Size()
	if err != nil {
		t.Fatal(err)
	}
	// Varints of the index take 1 to 3 bytes: a few bytes per entry off.
	if d := sz.Bytes - want; sz.First != 1 || sz.Last != 1000 || sz.Entries != 1000 || d > 2000 || d < -2000 {
		t.Fatalf("Size = %+v, want 1..1000, 1000 entries, %d bytes", sz, want)
	}
	// Compacted to 601..1000, then 1,000 entries of 200 bytes: the
	// estimate follows within a fifth.
	if err := s.DeleteRange(1, 600); err != nil {
		t.Fatal(err)
	}
	want = want * 4 / 10
	if sz, _ := s.Size(); sz.First != 601 || sz.Entries != 400 || sz.Bytes-want > 800 || want-sz.Bytes > 800 {
		t.Fatalf("Size after compacting to 601 = %+v, want 400 entries of about %d bytes", sz, want)
	}
	small := ctEntries(1001, 1000, 1, 200)
	if err := s.StoreLogs(small); err != nil {
		t.Fatal(err)
	}
	want += szRecordBytes(7, small)
	check := func(what string) {
		t.Helper()
		sz, err := s.Size()
		if err != nil {
			t.Fatal(err)
		}
		if sz.First != 601 || sz.Last != 2000 || sz.Entries != 1400 {
			t.Fatalf("%s: Size = %+v, want 601..2000", what, sz)
		}
		if d := sz.Bytes - want; d*5 > want || -d*5 > want {
			t.Fatalf("%s: Size.Bytes = %d, want about %d", what, sz.Bytes, want)
		}
		t.Logf("%s: Bytes %d, exact %d", what, sz.Bytes, want)
	}
	check("mixed sizes")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = OpenDB(dir, nil); err != nil {
		t.Fatal(err)
	}
	s, _ = db.Store(7)
	check("after reopen")
	if err := s.DeleteRange(0, 3000); err != nil {
		t.Fatal(err)
	}
	if sz, err := s.Size(); err != nil || sz != (GroupSize{}) {
		t.Fatalf("Size after deleting everything = %+v, %v", sz, err)
	}
}
