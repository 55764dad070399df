package raftstore

import (
	"bytes"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/commitlog"
)

func TestSmoke(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, &Options{SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var logs []*raft.Log
	for i := uint64(5); i < 1005; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(i)}, 100), AppendedAt: time.Unix(0, int64(i))})
	}
	for i := 0; i < len(logs); i += 64 {
		if err := s.StoreLogs(logs[i:min(i+64, len(logs))]); err != nil {
			t.Fatal(err)
		}
	}
	check := func(s *Store) {
		f, _ := s.FirstIndex()
		l, _ := s.LastIndex()
		if f != 5 || l != 1004 {
			t.Fatalf("first %d last %d", f, l)
		}
		var out raft.Log
		for _, want := range logs {
			if err := s.GetLog(want.Index, &out); err != nil {
				t.Fatal(err)
			}
			if out.Index != want.Index || !bytes.Equal(out.Data, want.Data) || !out.AppendedAt.Equal(want.AppendedAt) {
				t.Fatalf("entry %d differs", want.Index)
			}
		}
		if err := s.GetLog(1005, &out); err != raft.ErrLogNotFound {
			t.Fatalf("missing: %v", err)
		}
	}
	check(s)
	if err := s.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, &Options{SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check(s)
	if v, _ := s.GetUint64([]byte("CurrentTerm")); v != 7 {
		t.Fatalf("term %d", v)
	}
}

// TestLargeEntries stores entries whose data the commit log writes from
// where raft has it (commitlog.GatherMin bytes or more) among small ones,
// with and without extensions, in batches that cross segments, and checks
// that every entry reads back whole before and after a reopen, and that
// changing raft's data after StoreLogs returned changes nothing stored.
func TestLargeEntries(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{SegmentSize: 256 << 10}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int{commitlog.GatherMin, 10, commitlog.GatherMin - 1, 0, 100 << 10, commitlog.GatherMin + 1, 3, 40 << 10}
	var logs, want []*raft.Log
	for i := range 40 {
		data := bytes.Repeat([]byte{byte(i), byte(i >> 8), 7}, sizes[i%len(sizes)]/3+1)[:sizes[i%len(sizes)]]
		l := &raft.Log{Index: uint64(i + 1), Term: 2, Type: raft.LogCommand, Data: data, AppendedAt: time.Unix(0, int64(i))}
		if i%3 == 0 {
			l.Extensions = []byte("ext")
		}
		logs = append(logs, l)
		c := *l
		c.Data = bytes.Clone(data)
		want = append(want, &c)
	}
	for i := 0; i < len(logs); i += 7 {
		if err := s.StoreLogs(logs[i:min(i+7, len(logs))]); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range logs {
		clear(l.Data)
	}
	check := func(s *Store, when string) {
		t.Helper()
		var out raft.Log
		for _, w := range want {
			if err := s.GetLog(w.Index, &out); err != nil {
				t.Fatalf("%s: entry %d: %v", when, w.Index, err)
			}
			if !bytes.Equal(out.Data, w.Data) || !bytes.Equal(out.Extensions, w.Extensions) || !out.AppendedAt.Equal(w.AppendedAt) || out.Term != w.Term {
				t.Fatalf("%s: entry %d differs: %d bytes of data, want %d", when, w.Index, len(out.Data), len(w.Data))
			}
		}
	}
	check(s, "stored")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, opts); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check(s, "reopened")
}
