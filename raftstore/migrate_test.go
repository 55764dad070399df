package raftstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/commitlog/faultfs"
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

// migrateSource returns an in-memory raft store holding entries lo..hi of
// size bytes and a term and vote.
func migrateSource(t *testing.T, lo, hi uint64, size int) *raft.InmemStore {
	t.Helper()
	src := raft.NewInmemStore()
	var logs []*raft.Log
	for i := lo; i <= hi; i++ {
		logs = append(logs, ctEntry(i, 2, size))
	}
	if err := src.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	src.SetUint64([]byte("CurrentTerm"), 2)
	src.Set([]byte("LastVoteCand"), []byte("node-1"))
	return src
}

// TestMigrateContextReportsProgress migrates 5,000 entries and checks the
// reports: one per batch, growing, and a last one with Done.
func TestMigrateContextReportsProgress(t *testing.T) {
	src := migrateSource(t, 11, 5010, 100)
	dst, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	var got []MigrateProgress
	err = MigrateContext(context.Background(), dst, src, src, &MigrateOptions{Progress: func(p MigrateProgress) { got = append(got, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 6 { // 5 batches of up to 1,024, then Done
		t.Fatalf("%d reports, want 6: %+v", len(got), got)
	}
	for i, p := range got {
		if p.First != 11 || p.Last != 5010 || p.Done != (i == len(got)-1) {
			t.Fatalf("report %d: %+v", i, p)
		}
		if i > 0 && (p.Copied < got[i-1].Copied || p.Elapsed < got[i-1].Elapsed) {
			t.Fatalf("report %d goes backwards: %+v after %+v", i, p, got[i-1])
		}
	}
	if p := got[0]; p.Copied != 1024 || p.LastCopied != 1034 || p.Bytes < 1024*100 {
		t.Fatalf("first report %+v, want 1,024 entries up to 1034", p)
	}
	if p := got[len(got)-1]; p.Copied != 5000 || p.LastCopied != 5010 || p.Keys != 2 {
		t.Fatalf("last report %+v, want 5,000 entries up to 5010 and 2 keys", p)
	}
}

// TestMigrateContextCancelled cancels a migration after its second batch:
// it stops with the context's error, and the half-filled store is refused
// by Open and DB.Store with ErrMigrationIncomplete, so that raft never
// starts on part of a log, until its directory is removed.
func TestMigrateContextCancelled(t *testing.T) {
	src := migrateSource(t, 1, 5000, 100)
	dir := t.TempDir()
	dst, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	batches := 0
	err = MigrateContext(ctx, dst, src, src, &MigrateOptions{Progress: func(MigrateProgress) {
		if batches++; batches == 2 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "2048") {
		t.Fatalf("cancelled migration: %v, want context.Canceled after entry 2048", err)
	}
	if last, _ := dst.LastIndex(); last != 2048 {
		t.Fatalf("last index %d after the cancelled migration, want 2048", last)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, nil); !errors.Is(err, ErrMigrationIncomplete) {
		t.Fatalf("Open of a half-migrated store: %v, want ErrMigrationIncomplete", err)
	}
	db, err := OpenDB(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Store(0); !errors.Is(err, ErrMigrationIncomplete) {
		t.Fatalf("DB.Store of a half-migrated group: %v, want ErrMigrationIncomplete", err)
	}
	if _, err := db.Store(1); err != nil {
		t.Fatalf("DB.Store of another group: %v", err)
	}

	// A context done before the start copies nothing.
	dst2, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dst2.Close()
	if err := MigrateContext(ctx, dst2, src, src, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("migration with a done context: %v", err)
	}
	if err := dst2.checkEmpty(); err != nil {
		t.Fatalf("a migration with a done context wrote: %v", err)
	}
}

// TestMigrateIntoAsyncStoreIsDurable migrates into an AsyncFlush store and
// drops everything unsynced at a crash right after: a migration that
// returned nil is all there.
func TestMigrateIntoAsyncStoreIsDurable(t *testing.T) {
	src := migrateSource(t, 1, 3000, 200)
	fs := faultfs.New(1)
	dst, err := Open(crDir, crOptions(fs, AsyncFlush))
	if err != nil {
		t.Fatal(err)
	}
	if err := Migrate(dst, src, src); err != nil {
		t.Fatal(err)
	}
	after := fs.CrashDropAll()
	dst.Close()
	dst, err = Open(crDir, crOptions(after, AsyncFlush))
	if err != nil {
		t.Fatalf("Open after a crash right after Migrate: %v", err)
	}
	defer dst.Close()
	if first, _ := dst.FirstIndex(); first != 1 {
		t.Fatalf("first index %d", first)
	}
	if last, _ := dst.LastIndex(); last != 3000 {
		t.Fatalf("last index %d after the crash, want 3000", last)
	}
	if v, _ := dst.GetUint64([]byte("CurrentTerm")); v != 2 {
		t.Fatalf("CurrentTerm %d", v)
	}
}
