package raftstore

import (
	"bytes"
	"testing"
	"time"

	"github.com/hashicorp/raft"
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
