package raftstore_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/raftlog/raftlog/commitlog"
	"github.com/raftlog/raftlog/internal/testdamage"
	"github.com/raftlog/raftlog/raftstore"
)

// repairOpts are small segments, so that a test's records span several.
var repairOpts = &raftstore.Options{SegmentSize: 8192}

// repairDB writes group 1 entries 1..100 in batches of 10 with a group 2
// entry after each batch (group 2 holds 1..10), then closes the DB.
func repairDB(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	db, err := raftstore.OpenDB(dir, repairOpts)
	if err != nil {
		t.Fatal(err)
	}
	s1, _ := db.Store(1)
	s2, _ := db.Store(2)
	if err := s1.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	for b := range 10 {
		var batch []*raft.Log
		for i := 1; i <= 10; i++ {
			idx := uint64(b*10 + i)
			batch = append(batch, &raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: []byte(strings.Repeat(fmt.Sprint(idx), 40))})
		}
		if err := s1.StoreLogs(batch); err != nil {
			t.Fatal(err)
		}
		if err := s2.StoreLog(&raft.Log{Index: uint64(b + 1), Term: 1, Data: []byte("two")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// inspect inspects dir and returns what it found and the commit-log
// position of every entry, by group and index.
func inspect(t *testing.T, dir string) (*raftstore.Inspection, map[[2]uint64]int64) {
	t.Helper()
	pos := map[[2]uint64]int64{}
	in, err := raftstore.Inspect(dir, repairOpts, func(g uint64, p int64, l *raft.Log) { pos[[2]uint64{g, l.Index}] = p })
	if err != nil {
		t.Fatal(err)
	}
	return in, pos
}

// damageAt flips a byte in the payload of the commit-log record at
// position p and returns its file and offset.
func damageAt(t *testing.T, in *raftstore.Inspection, p int64) (string, int64) {
	t.Helper()
	path, off := in.Log.Locate(p)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off+commitlog.HeaderSize+20] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, off
}

// A clean DB: no damage, nothing to cut, every group's range as the DB
// reports it, the stable state readable, and no file changed.
func TestInspectClean(t *testing.T) {
	dir := repairDB(t)
	before := testdamage.TreeDigest(t, dir)
	in, pos := inspect(t, dir)
	if testdamage.TreeDigest(t, dir) != before {
		t.Fatal("Inspect changed the DB's files")
	}
	if in.Damage != nil || in.Cut != -1 || len(pos) != 110 {
		t.Fatalf("damage %v, cut %d, %d entries", in.Damage, in.Cut, len(pos))
	}
	g1, g2 := in.Group(1), in.Group(2)
	if g1.First != 1 || g1.Last != 100 || g1.KeptLast != 100 || g2.Last != 10 || g1.CutEntries != 0 {
		t.Fatalf("groups %+v", in.Groups)
	}
	if term := in.StableUint64(1, []byte("CurrentTerm")); term != 7 {
		t.Fatalf("CurrentTerm %d, want 7", term)
	}
}

// A damaged entry: reads of it fail naming the file and offset; Inspect
// finds it and cuts at the start of its batch; after CutLog, every group
// holds what it held before that batch, and takes new entries from there.
func TestInspectAndCutDamage(t *testing.T) {
	dir := repairDB(t)
	in, pos := inspect(t, dir)
	path, off := damageAt(t, in, pos[[2]uint64{1, 55}])

	db, err := raftstore.OpenDB(dir, repairOpts)
	if err != nil {
		t.Fatal(err)
	}
	s1, _ := db.Store(1)
	var l raft.Log
	err = s1.GetLog(55, &l)
	if !errors.Is(err, commitlog.ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("%s at offset %d", path, off)) {
		t.Fatalf("GetLog(55) = %v, want ErrCorrupt naming %s offset %d", err, path, off)
	}
	if _, err := raftstore.Inspect(dir, repairOpts, nil); err == nil {
		t.Fatal("Inspect of an open DB succeeded")
	}
	if err := raftstore.CutLog(dir, repairOpts, pos[[2]uint64{1, 51}]); err == nil {
		t.Fatal("CutLog of an open DB succeeded")
	}
	db.Close()

	before := testdamage.TreeDigest(t, dir)
	in, _ = inspect(t, dir)
	if testdamage.TreeDigest(t, dir) != before {
		t.Fatal("Inspect changed the DB's files")
	}
	if in.Damage == nil || in.Damage.Path != path || in.Damage.Offset != off || in.Harmless {
		t.Fatalf("damage %+v (harmless %v), want %s offset %d", in.Damage, in.Harmless, path, off)
	}
	if in.Cut != pos[[2]uint64{1, 51}] {
		t.Fatalf("cut at %d, want the start of the batch 51..60 at %d", in.Cut, pos[[2]uint64{1, 51}])
	}
	g1, g2 := in.Group(1), in.Group(2)
	if g1.Last != 100 || g1.KeptFirst != 1 || g1.KeptLast != 50 || g1.CutEntries != 49 || g1.CutFirst != 51 || g1.CutLast != 100 {
		t.Fatalf("group 1: %+v", g1)
	}
	if g2.KeptLast != 5 || g2.CutEntries != 5 || g2.CutFirst != 6 {
		t.Fatalf("group 2: %+v", g2)
	}

	if err := raftstore.CutLog(dir, repairOpts, in.Cut); err != nil {
		t.Fatal(err)
	}
	if in, _ := inspect(t, dir); in.Damage != nil || in.Group(1).Last != 50 || in.Group(2).Last != 5 {
		t.Fatalf("after the cut: damage %v, groups %+v", in.Damage, in.Groups)
	}
	db, err = raftstore.OpenDB(dir, repairOpts)
	if err != nil {
		t.Fatal(err)
	}
	s1, _ = db.Store(1)
	s2, _ := db.Store(2)
	if last, _ := s1.LastIndex(); last != 50 {
		t.Fatalf("group 1 last index %d after the cut, want 50", last)
	}
	if last, _ := s2.LastIndex(); last != 5 {
		t.Fatalf("group 2 last index %d after the cut, want 5", last)
	}
	for i := uint64(1); i <= 50; i++ {
		if err := s1.GetLog(i, &l); err != nil || string(l.Data) != strings.Repeat(fmt.Sprint(i), 40) {
			t.Fatalf("GetLog(%d) after the cut: %v %q", i, err, l.Data)
		}
	}
	if err := s1.GetLog(51, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog(51) after the cut: %v", err)
	}
	if term, _ := s1.GetUint64([]byte("CurrentTerm")); term != 7 {
		t.Fatalf("CurrentTerm %d after the cut, want 7: the stable state is kept", term)
	}
	if err := s1.StoreLogs([]*raft.Log{{Index: 51, Term: 2, Data: []byte("new")}}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = raftstore.OpenDB(dir, repairOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s1, _ = db.Store(1)
	if err := s1.GetLog(51, &l); err != nil || string(l.Data) != "new" {
		t.Fatalf("GetLog(51) after reopening: %v %q", err, l.Data)
	}
}

// A damaged record that no group holds any more (below a group's first
// index after a prefix deletion) is harmless: nothing to cut. With a
// second, real one after it, the cut goes before the first, so that what
// remains holds no damage.
func TestInspectHarmlessDamage(t *testing.T) {
	dir := repairDB(t)
	db, err := raftstore.OpenDB(dir, repairOpts)
	if err != nil {
		t.Fatal(err)
	}
	s1, _ := db.Store(1)
	if err := s1.DeleteRange(1, 90); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	in, pos := inspect(t, dir)
	if in.Group(1).First != 91 {
		t.Fatalf("group 1 %+v after deleting below 91", in.Group(1))
	}
	// Entry 90 is deleted, but its segment stays: group 2's entry 9
	// and group 1's entry 91 are in it or after it.
	damageAt(t, in, pos[[2]uint64{1, 90}])
	in, _ = inspect(t, dir)
	if in.Damage == nil || !in.Harmless || in.Cut != -1 || in.Group(1).KeptFirst != 91 {
		t.Fatalf("damage below the first index: %+v harmless %v cut %d", in.Damage, in.Harmless, in.Cut)
	}
	// The DB opens and reads every entry it holds.
	db, err = raftstore.OpenDB(dir, repairOpts)
	if err != nil {
		t.Fatal(err)
	}
	s1, _ = db.Store(1)
	var l raft.Log
	for i := uint64(91); i <= 100; i++ {
		if err := s1.GetLog(i, &l); err != nil {
			t.Fatalf("GetLog(%d): %v", i, err)
		}
	}
	db.Close()

	path, off := damageAt(t, in, pos[[2]uint64{1, 95}])
	in, _ = inspect(t, dir)
	if in.Harmless || in.Damage == nil || in.Damage.Position != pos[[2]uint64{1, 90}] || in.Cut != pos[[2]uint64{1, 81}] || in.Log.Damaged != 2 {
		t.Fatalf("second damage at %s offset %d: %+v harmless %v cut %d (%d places)", path, off, in.Damage, in.Harmless, in.Cut, in.Log.Damaged)
	}
	if g1 := in.Group(1); g1.KeptFirst != 1 || g1.KeptLast != 80 || g1.CutEntries != 18 {
		t.Fatalf("group 1 after cutting at 81: %+v", g1)
	}
	if err := raftstore.CutLog(dir, repairOpts, in.Cut); err != nil {
		t.Fatal(err)
	}
	db, err = raftstore.OpenDB(dir, repairOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s1, _ = db.Store(1)
	if first, _ := s1.FirstIndex(); first != 1 {
		t.Fatalf("first index %d after the cut, want 1: the deletion came after the cut", first)
	}
	if last, _ := s1.LastIndex(); last != 80 {
		t.Fatalf("last index %d after the cut, want 80", last)
	}
}

// A record whose checksum holds but whose payload is not raftstore's is
// not damage a cut repairs.
func TestInspectUndecodableRecord(t *testing.T) {
	dir := repairDB(t)
	l, err := commitlog.Open(filepath.Join(dir, "log"), &commitlog.Options{SegmentSize: 8192})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append([]byte{0xee, 1, 2}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := raftstore.Inspect(dir, repairOpts, nil); !errors.Is(err, raftstore.ErrCorrupt) || !strings.Contains(err.Error(), "does not decode") {
		t.Fatalf("Inspect: %v, want ErrCorrupt for a record that does not decode", err)
	}
}

// A DB whose commit log lost its checkpoint: Inspect and CutLog, the
// tools for a damaged DB, refuse it naming the cause, as OpenDB does (they
// panicked on a nil log while cleaning up).
func TestInspectMissingCheckpoint(t *testing.T) {
	dir := repairDB(t)
	if err := os.Remove(filepath.Join(dir, "log", "checkpoint")); err != nil {
		t.Fatal(err)
	}
	if _, err := raftstore.Inspect(dir, repairOpts, nil); err == nil || !strings.Contains(err.Error(), "checkpoint") {
		t.Fatalf("Inspect: %v, want an error naming the missing checkpoint", err)
	}
	if err := raftstore.CutLog(dir, repairOpts, 0); err == nil || !strings.Contains(err.Error(), "checkpoint") {
		t.Fatalf("CutLog: %v, want an error naming the missing checkpoint", err)
	}
}
