package raftstore

import "testing"

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
