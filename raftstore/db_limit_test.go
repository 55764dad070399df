package raftstore

import (
	"errors"
	"testing"
)

func TestMaxGroupsIsEnforced(t *testing.T) {
	if MaxGroups != 1308 {
		t.Fatalf("MaxGroups is %d; the docs say 1,308", MaxGroups)
	}
	db, err := OpenDB(t.TempDir(), &Options{SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for g := uint64(0); g < MaxGroups; g++ {
		if _, err := db.Store(g); err != nil {
			t.Fatalf("group %d of %d: %v", g, MaxGroups, err)
		}
	}
	if _, err := db.Store(MaxGroups); err == nil {
		t.Fatal("a DB accepted one group more than MaxGroups")
	}
	if err := db.log.Checkpoint(); err != nil {
		t.Fatalf("checkpoint with %d groups: %v", MaxGroups, err)
	}
}

// A stable-store write racing with Close either completes or fails with
// ErrClosed; it never touches a closed file (the race detector checks).
func TestStableSetDuringClose(t *testing.T) {
	db, err := OpenDB(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := db.Store(1)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		var err error
		for i := uint64(0); i < 200 && err == nil; i++ {
			err = s.SetUint64([]byte("CurrentTerm"), i)
		}
		done <- err
	}()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil && !errors.Is(err, ErrClosed) {
		t.Fatalf("set during close: %v", err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("set after close: %v", err)
	}
}
