package raftstore

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestMigrateFromAnotherStore(t *testing.T) {
	src := raft.NewInmemStore()
	var want []*raft.Log
	for i := uint64(100); i < 3100; i++ {
		want = append(want, &raft.Log{Index: i, Term: i / 1000, Type: raft.LogCommand,
			Data: []byte(fmt.Sprintf("entry %d", i)), AppendedAt: time.Unix(1_700_000_000, int64(i))})
	}
	if err := src.StoreLogs(want); err != nil {
		t.Fatal(err)
	}
	src.SetUint64([]byte("CurrentTerm"), 3)
	src.SetUint64([]byte("LastVoteTerm"), 3)
	src.Set([]byte("LastVoteCand"), []byte("node-2"))
	src.Set([]byte("custom"), []byte("kept"))

	dir := t.TempDir()
	dst, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := Migrate(dst, src, src, []byte("custom")); err != nil {
		t.Fatal(err)
	}
	if err := Migrate(dst, src, src); err == nil {
		t.Fatal("a second migration into a non-empty store succeeded")
	}
	dst.Close()
	dst, err = Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	first, _ := dst.FirstIndex()
	last, _ := dst.LastIndex()
	if first != 100 || last != 3099 {
		t.Fatalf("migrated %d..%d, want 100..3099", first, last)
	}
	var got raft.Log
	for _, w := range want {
		if err := dst.GetLog(w.Index, &got); err != nil {
			t.Fatal(err)
		}
		if got.Term != w.Term || !bytes.Equal(got.Data, w.Data) || !got.AppendedAt.Equal(w.AppendedAt) {
			t.Fatalf("entry %d differs after migration", w.Index)
		}
	}
	if v, _ := dst.GetUint64([]byte("CurrentTerm")); v != 3 {
		t.Fatalf("CurrentTerm %d", v)
	}
	if v, _ := dst.Get([]byte("LastVoteCand")); string(v) != "node-2" {
		t.Fatalf("LastVoteCand %q", v)
	}
	if v, _ := dst.Get([]byte("custom")); string(v) != "kept" {
		t.Fatalf("custom key %q", v)
	}
}
