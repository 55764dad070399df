package raftstore

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/commitlog"
	"github.com/raftlog/raftlog/commitlog/faultfs"
)

// TestStableWriteFailureStopsDB fails a write of the stable state, the way
// a dying disk does, and checks that the DB stops on it as it does on a
// failed commit-log sync: DB.Err and Store.Err report it (so a service's
// fail-stop check sees it), every later write of every group fails with
// it, and Get never returns the value whose write failed, which a crash
// that drops every unsynced byte confirms was never durable.
func TestStableWriteFailureStopsDB(t *testing.T) {
	faults := []struct {
		name  string
		fault faultfs.Fault
	}{
		{"write", faultfs.Fault{Op: faultfs.OpWrite, Path: "/stable."}},
		{"truncate", faultfs.Fault{Op: faultfs.OpTruncate, Path: "/stable."}},
		{"fdatasync", faultfs.Fault{Op: faultfs.OpSync, Path: "/stable."}},
	}
	for _, f := range faults {
		for _, flush := range []FlushMode{SyncFlush, AsyncFlush} {
			t.Run(f.name+"/"+crFlushName(flush), func(t *testing.T) {
				testStableWriteFailure(t, f.fault, flush)
			})
		}
	}
}

func testStableWriteFailure(t *testing.T, fault faultfs.Fault, flush FlushMode) {
	fs, db, s, other := openTwoGroups(t, flush)
	model := &ctModel{}
	logs := ctEntries(1, 10, 1, 50)
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	model.store(logs, 0)
	if err := s.SetUint64([]byte("CurrentTerm"), 5); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}

	// The failing write adds a key: the state grows, so the write goes
	// through every step, the file's new length included.
	fs.Inject(fault)
	failure := s.Set([]byte("LastVoteCand"), []byte("n2"))
	if !errors.Is(failure, ErrFailed) {
		t.Fatalf("Set on a failing disk = %v, want ErrFailed", failure)
	}
	fs.ClearFaults() // from here on, only the latch can fail a call
	for name, err := range map[string]error{"DB.Err": db.Err(), "Store.Err": s.Err(), "other group's Err": other.Err()} {
		if err == nil || err.Error() != failure.Error() {
			t.Errorf("%s = %v, want the failure %v", name, err, failure)
		}
	}
	if v, err := s.Get([]byte("LastVoteCand")); err != nil || v != nil {
		t.Errorf("Get after the failed write = %q, %v; want nothing, the durable state", v, err)
	}
	later := map[string]func() error{
		"SetUint64 again":   func() error { return s.SetUint64([]byte("CurrentTerm"), 7) },
		"Set":               func() error { return s.Set([]byte("LastVoteCand"), []byte("n3")) },
		"other group's Set": func() error { return other.SetUint64([]byte("CurrentTerm"), 9) },
		"StoreLogs":         func() error { return s.StoreLogs(ctEntries(11, 2, 2, 50)) },
		"other StoreLogs":   func() error { return other.StoreLogs(ctEntries(1, 2, 2, 50)) },
		"DeleteRange":       func() error { return s.DeleteRange(1, 3) },
		"a new group":       func() error { _, err := db.Store(3); return err },
		"DB.Sync":           db.Sync,
		"Store.Sync":        s.Sync,
	}
	for name, call := range later {
		if err := call(); err == nil || err.Error() != failure.Error() {
			t.Errorf("%s after the failure = %v, want the failure %v", name, err, failure)
		}
	}
	if v, _ := s.GetUint64([]byte("CurrentTerm")); v != 5 {
		t.Errorf("GetUint64 after the refused writes = %d, want 5", v)
	}
	if v, _ := other.GetUint64([]byte("CurrentTerm")); v != 0 {
		t.Errorf("the other group's CurrentTerm = %d after a refused write, want 0", v)
	}
	if err := ctCheckStore(s, model); err != nil { // reads go on
		t.Fatal(err)
	}

	fs = fs.CrashDropAll()
	db.Close()
	var err error
	if db, err = OpenDB(crDir, crOptions(fs, flush)); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer db.Close()
	if db.Err() != nil {
		t.Fatalf("Err after reopening = %v", db.Err())
	}
	if s, err = db.Store(1); err != nil {
		t.Fatal(err)
	}
	if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 5 {
		t.Fatalf("CurrentTerm after the crash = %d, %v; want 5", v, err)
	}
	if v, err := s.Get([]byte("LastVoteCand")); err != nil || v != nil {
		t.Fatalf("LastVoteCand after the crash = %q, %v; want nothing", v, err)
	}
	if err := ctCheckStore(s, model); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 6); err != nil {
		t.Fatalf("SetUint64 after reopening: %v", err)
	}
}

// TestLogFailureStopsStableWrites fails a sync of the commit log and checks
// that stable writes then fail with the same error: one failure path for
// the whole DB.
func TestLogFailureStopsStableWrites(t *testing.T) {
	fs := faultfs.New(1)
	db, err := OpenDB(crDir, crOptions(fs, SyncFlush))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := db.Store(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 5); err != nil {
		t.Fatal(err)
	}
	fs.Inject(faultfs.Fault{Op: faultfs.OpSync, Path: crDir + "/log/0"})
	if err := s.StoreLogs([]*raft.Log{ctEntry(1, 1, 10)}); !errors.Is(err, commitlog.ErrFailed) {
		t.Fatalf("StoreLogs on a failing disk = %v, want commitlog.ErrFailed", err)
	}
	failure := db.Err()
	if !errors.Is(failure, commitlog.ErrFailed) {
		t.Fatalf("DB.Err = %v, want commitlog.ErrFailed", failure)
	}
	fs.ClearFaults()
	if err := s.SetUint64([]byte("CurrentTerm"), 6); err == nil || err.Error() != failure.Error() {
		t.Fatalf("SetUint64 after the log failed = %v, want the failure %v", err, failure)
	}
	if v, _ := s.GetUint64([]byte("CurrentTerm")); v != 5 {
		t.Fatalf("CurrentTerm = %d after a refused write, want 5", v)
	}
}

// stableFailed handles a stable write of TestGroupsCrashRandomized that
// failed. It may fail only because the DB had failed already (that test
// injects faults into the commit log only): the write then never happened
// and the group stops. Anything else breaks the contract.
func (g *mgGroup) stableFailed(desc string, err error) (stop bool, _ error) {
	if failure := g.s.Err(); failure == nil || err.Error() != failure.Error() {
		return true, fmt.Errorf("%s: %v (the DB's failure: %v)", desc, err, failure)
	}
	g.ops = append(g.ops, fmt.Sprintf("%s -> %v (refused: the DB failed)", desc, err))
	return true, nil
}
