package raftstore_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/raftstore"
)

// entries returns entries of term 3 with the given indexes.
func entries(idx ...uint64) []*raft.Log {
	logs := make([]*raft.Log, len(idx))
	for i, x := range idx {
		logs[i] = &raft.Log{Index: x, Term: 3, Type: raft.LogCommand, Data: []byte("x")}
	}
	return logs
}

// checkHolds fails unless s holds exactly first..last, each entry readable.
func checkHolds(t *testing.T, s *raftstore.Store, first, last uint64) {
	t.Helper()
	f, _ := s.FirstIndex()
	l, _ := s.LastIndex()
	if f != first || l != last {
		t.Fatalf("the store holds %d..%d, want %d..%d", f, l, first, last)
	}
	var out raft.Log
	for i := first; i <= last && last != 0; i++ {
		if err := s.GetLog(i, &out); err != nil || out.Index != i {
			t.Fatalf("GetLog(%d) = %v, index %d", i, err, out.Index)
		}
	}
}

// A StoreLogs batch the store refuses returns an error wrapping
// ErrInvalidBatch that names the entry and the cause, writes nothing (also
// across a reopen), and never panics: a nil entry, index 0, indexes that
// do not increase by one, a batch overlapping the stored entries (it says
// to DeleteRange first), and with Options.Monotonic a gap. GetLog into a
// nil *raft.Log is an error too, not a panic. A store takes entries up to
// MaxIndex.
func TestStoreLogsRefusesInvalidBatches(t *testing.T) {
	for _, monotonic := range []bool{false, true} {
		dir := t.TempDir()
		opts := &raftstore.Options{Monotonic: monotonic}
		s, err := raftstore.Open(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		withNil := func(idx ...uint64) []*raft.Log {
			logs := entries(idx...)
			logs[len(logs)-1] = nil
			return logs
		}
		cases := []struct {
			name string
			logs []*raft.Log
			want string
		}{
			{"nil only", []*raft.Log{nil}, "entry 0 of the batch of 1 (counting from 0) is nil"},
			{"nil inside", withNil(10, 11, 0), "entry 2 of the batch of 3 (counting from 0) is nil"},
			{"index 0", entries(0, 1), "raft index 0"},
			{"gap inside", entries(10, 12), "entry 1 of the batch has index 12 after 10"},
			{"descending", entries(10, 9), "entry 1 of the batch has index 9 after 10"},
			{"past MaxIndex", entries(raftstore.MaxIndex, raftstore.MaxIndex+1), "entry 1 of the batch has index 9223372036854775808, past MaxIndex (9223372036854775807)"},
			{"max uint64", entries(math.MaxUint64, 0), "entry 0 of the batch has index 18446744073709551615, past MaxIndex"},
		}
		check := func(stage string, first, last uint64) {
			t.Helper()
			for _, c := range cases {
				err := s.StoreLogs(c.logs)
				if !errors.Is(err, raftstore.ErrInvalidBatch) || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("monotonic %v, %s: StoreLogs(%s) = %v, want ErrInvalidBatch saying %q", monotonic, stage, c.name, err, c.want)
				}
				checkHolds(t, s, first, last)
			}
		}
		check("empty", 0, 0)

		if err := s.StoreLogs(entries(5, 6, 7, 8, 9)); err != nil {
			t.Fatal(err)
		}
		check("holding 5..9", 5, 9)
		for _, start := range []uint64{9, 7, 5, 1} {
			err := s.StoreLogs(entries(start, start+1))
			want := fmt.Sprintf("entry %d overlaps the stored entries 5..9: the next batch starts at 10; to replace entries, delete them with DeleteRange(%d, 9) first", start, start)
			if !errors.Is(err, raftstore.ErrInvalidBatch) || !strings.Contains(err.Error(), want) {
				t.Fatalf("monotonic %v: StoreLogs(%d, %d) over 5..9 = %v, want ErrInvalidBatch saying %q", monotonic, start, start+1, err, want)
			}
			checkHolds(t, s, 5, 9)
		}
		if monotonic {
			err := s.StoreLogs(entries(12))
			want := "entry 12 leaves a gap after the last index 9, which Options.Monotonic refuses"
			if !errors.Is(err, raftstore.ErrInvalidBatch) || !strings.Contains(err.Error(), want) {
				t.Fatalf("StoreLogs(12) over 5..9, monotonic = %v, want ErrInvalidBatch saying %q", err, want)
			}
			checkHolds(t, s, 5, 9)
		}
		if err := s.GetLog(5, nil); err == nil || !strings.Contains(err.Error(), "nil *raft.Log") {
			t.Fatalf("GetLog(5, nil) = %v, want an error naming the nil *raft.Log", err)
		}

		// The advice works: DeleteRange, then the batch.
		if err := s.DeleteRange(7, 9); err != nil {
			t.Fatal(err)
		}
		if err := s.StoreLogs(entries(7, 8)); err != nil {
			t.Fatalf("StoreLogs(7, 8) after DeleteRange(7, 9): %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if s, err = raftstore.Open(dir, opts); err != nil {
			t.Fatal(err)
		}
		checkHolds(t, s, 5, 8)
		s.Close()
	}

	dir := t.TempDir()
	s, err := raftstore.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs(entries(raftstore.MaxIndex-1, raftstore.MaxIndex)); err != nil {
		t.Fatalf("StoreLogs(MaxIndex-1, MaxIndex): %v", err)
	}
	checkHolds(t, s, raftstore.MaxIndex-1, raftstore.MaxIndex)
	if err := s.StoreLog(entries(raftstore.MaxIndex + 1)[0]); !errors.Is(err, raftstore.ErrInvalidBatch) {
		t.Fatalf("StoreLog(MaxIndex+1) after MaxIndex = %v, want ErrInvalidBatch", err)
	}
	s.Close()
	if s, err = raftstore.Open(dir, nil); err != nil {
		t.Fatal(err)
	}
	checkHolds(t, s, raftstore.MaxIndex-1, raftstore.MaxIndex)
	s.Close()
}
