package raftstore

import (
	"bytes"
	"errors"
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

// TestMigrateRefusesDestinationWithState migrates into stores that hold
// something: stable keys alone (a CurrentTerm larger than the source's,
// which the migration would move backwards), entries alone, or both. Each
// is refused with ErrNotEmpty and left as it was. State of another group of
// the same DB does not count.
func TestMigrateRefusesDestinationWithState(t *testing.T) {
	src := raft.NewInmemStore()
	if err := src.StoreLogs([]*raft.Log{{Index: 1, Term: 3, Type: raft.LogCommand, Data: []byte("a")}}); err != nil {
		t.Fatal(err)
	}
	src.SetUint64([]byte("CurrentTerm"), 3)
	src.Set([]byte("LastVoteCand"), []byte("src"))

	cases := []struct {
		name  string
		prime func(s *Store) error
	}{
		{"CurrentTerm only", func(s *Store) error { return s.SetUint64([]byte("CurrentTerm"), 10) }},
		{"an unknown key only", func(s *Store) error { return s.Set([]byte("custom"), []byte("v")) }},
		{"an empty value only", func(s *Store) error { return s.Set([]byte("LastVoteCand"), nil) }},
		{"entries only", func(s *Store) error { return s.StoreLogs(ctEntries(50, 3, 9, 10)) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			dst, err := Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.prime(dst); err != nil {
				t.Fatal(err)
			}
			term, _ := dst.GetUint64([]byte("CurrentTerm"))
			first, _ := dst.FirstIndex()
			last, _ := dst.LastIndex()
			err = Migrate(dst, src, src)
			if !errors.Is(err, ErrNotEmpty) {
				t.Fatalf("Migrate into a store with %s = %v, want ErrNotEmpty", c.name, err)
			}
			t.Log(err)
			dst.Close()
			if dst, err = Open(dir, nil); err != nil {
				t.Fatal(err)
			}
			defer dst.Close()
			if v, _ := dst.GetUint64([]byte("CurrentTerm")); v != term {
				t.Fatalf("CurrentTerm %d after a refused migration, was %d", v, term)
			}
			if v, _ := dst.Get([]byte("LastVoteCand")); string(v) == "src" {
				t.Fatal("a refused migration copied LastVoteCand")
			}
			if f, _ := dst.FirstIndex(); f != first {
				t.Fatalf("first index %d after a refused migration, was %d", f, first)
			}
			if l, _ := dst.LastIndex(); l != last {
				t.Fatalf("last index %d after a refused migration, was %d", l, last)
			}
		})
	}

	t.Run("another group holds state", func(t *testing.T) {
		db, err := OpenDB(t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		busy, _ := db.Store(1)
		if err := busy.SetUint64([]byte("CurrentTerm"), 10); err != nil {
			t.Fatal(err)
		}
		if err := busy.StoreLogs(ctEntries(1, 5, 10, 10)); err != nil {
			t.Fatal(err)
		}
		dst, _ := db.Store(2)
		if err := Migrate(dst, src, src); err != nil {
			t.Fatalf("Migrate into an empty group beside a busy one: %v", err)
		}
		if v, _ := dst.GetUint64([]byte("CurrentTerm")); v != 3 {
			t.Fatalf("CurrentTerm %d, want 3", v)
		}
		if v, _ := busy.GetUint64([]byte("CurrentTerm")); v != 10 {
			t.Fatalf("the other group's CurrentTerm %d, want 10", v)
		}
	})

	t.Run("closed", func(t *testing.T) {
		dst, err := Open(t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		dst.Close()
		if err := Migrate(dst, src, src); !errors.Is(err, ErrClosed) {
			t.Fatalf("Migrate into a closed store = %v, want ErrClosed", err)
		}
	})
}
